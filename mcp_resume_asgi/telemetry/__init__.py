"""Telemetry: OpenTelemetry spans and metrics of what the middleware does, when installed.

`pip install 'mcp-resume-asgi[otel]'` (`opentelemetry-api` only): the middleware then
reports through the global tracer and meter providers, as instrumentation libraries do,
so an application that configures the OpenTelemetry SDK gets everything with no more
code. Without the extra, or with `telemetry=False`, nothing of OpenTelemetry is imported
and every report is a call that does nothing (`base.py`). `telemetry=OpenTelemetry(...)`
passes providers of its own. The instruments and attributes: `names.py`, and
docs/guides/observability.md.

This layer sits at the bottom, beside `wire` and `policy`: it imports nothing of the
package, nor an event loop.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp_resume_asgi.telemetry.base import NO_OPERATION, OFF, Operation, Telemetry

__all__ = [
    "NO_OPERATION",
    "OFF",
    "OpenTelemetry",
    "Operation",
    "Telemetry",
    "TelemetrySetting",
    "telemetry_from",
]

logger = logging.getLogger(__name__)


class OpenTelemetry:
    """Telemetry through OpenTelemetry with providers of one's own (None: the global ones,
    looked up on each use, so an SDK configured after the app was built is used)."""

    __slots__ = ("meter_provider", "tracer_provider")

    def __init__(self, *, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider


TelemetrySetting = bool | OpenTelemetry | Telemetry
"""`True`: OpenTelemetry's global providers if `opentelemetry-api` is installed, else off;
`False`: off; `OpenTelemetry(...)`: those providers; a `Telemetry`: that one."""


def telemetry_from(setting: TelemetrySetting) -> Telemetry:
    """The `Telemetry` a middleware stack reports through (see `TelemetrySetting`)."""
    if isinstance(setting, Telemetry):
        return setting
    if setting is False:
        return OFF
    if setting is not True and not isinstance(setting, OpenTelemetry):
        raise TypeError("telemetry must be True, False, an OpenTelemetry(...) or a Telemetry")
    try:
        from mcp_resume_asgi.telemetry.otel import OtelTelemetry
    except ImportError:
        if isinstance(setting, OpenTelemetry):
            raise ImportError(
                "telemetry=OpenTelemetry(...) needs opentelemetry-api: pip install 'mcp-resume-asgi[otel]'"
            ) from None
        return OFF
    if isinstance(setting, OpenTelemetry):
        return OtelTelemetry(tracer_provider=setting.tracer_provider, meter_provider=setting.meter_provider)
    return OtelTelemetry()
