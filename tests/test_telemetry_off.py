"""Telemetry off, and its one table: no SDK needed (issue 23). Without the `otel` extra - or with
`telemetry=False` - nothing of OpenTelemetry is imported, not by `import mcp_resume_asgi` nor by
a wrapped request; with `opentelemetry-api` installed it is on by default."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mcp_resume_asgi.telemetry import OFF, telemetry_from
from mcp_resume_asgi.telemetry import names as n

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------- no extra, no cost
def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


WRAPPED_REQUEST = """
    import anyio, sys
    {block}
    import mcp_resume_asgi
    from mcp_resume_asgi import ResumeMiddleware

    async def app(scope, receive, send):
        await send({{"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}})
        await send({{"type": "http.response.body", "body": b'{{"jsonrpc":"2.0","id":1,"result":{{}}}}'}})

    async def main():
        mw = ResumeMiddleware(app{option})
        body = b'{{"jsonrpc":"2.0","id":1,"method":"ping"}}'
        scope = {{"type": "http", "method": "POST", "path": "/mcp", "raw_path": b"/mcp", "query_string": b"",
                 "headers": [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]}}
        sent = []
        async def receive():
            return {{"type": "http.request", "body": body, "more_body": False}}
        async def send(message):
            sent.append(message)
        await mw(scope, receive, send)
        assert sent[0]["status"] == 200, sent
        print(type(mw.engine.port.telemetry).__name__, sorted(m for m in sys.modules if m.startswith("opentelemetry")))

    anyio.run(main)
"""

BLOCK_OTEL = """
    import importlib.abc
    class NoOtel(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(name)
            return None
    sys.meta_path.insert(0, NoOtel())
"""


def test_without_the_extra_nothing_of_opentelemetry_is_imported_and_telemetry_is_off() -> None:
    out = _run(WRAPPED_REQUEST.format(block=BLOCK_OTEL, option=""))
    assert out == "Telemetry []"


def test_turned_off_it_imports_nothing_of_opentelemetry_even_when_installed() -> None:
    out = _run(WRAPPED_REQUEST.format(block="", option=", telemetry=False"))
    assert out == "Telemetry []"


def test_installed_it_is_on_by_default_through_the_global_providers() -> None:
    pytest.importorskip("opentelemetry.metrics")
    out = _run(WRAPPED_REQUEST.format(block="", option=""))
    assert out.startswith("OtelTelemetry ['opentelemetry"), out


def test_the_settings() -> None:
    assert telemetry_from(False) is OFF and telemetry_from(OFF) is OFF
    with pytest.raises(TypeError):
        telemetry_from("yes")  # type: ignore[arg-type]


def test_every_instrument_is_in_the_one_table_of_the_guide() -> None:
    guide = (ROOT / "docs" / "guides" / "observability.md").read_text()
    table = [line for line in guide.splitlines() if line.startswith("| `")]
    documented = [line.split("`")[1] for line in table]
    assert [name for name in documented if name in n.INSTRUMENTS] == list(n.INSTRUMENTS)
