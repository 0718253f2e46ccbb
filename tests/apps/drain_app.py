"""One node with the memory store, for the drain tests under other servers (hypercorn, granian).

`create_app(log_path=..., drain_s=...)`: the low-level app wrapped by `resumable` with the
memory store; the engine's log (its drain's summary: "drain over in ...: N request(s)
finished, M ended at the budget") goes to `log_path`, which the test reads once the
process is gone (the memory store went with it).
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp

from mcp_resume_asgi import Policy, resumable
from tests.apps.lowlevel_app import create_app as create_lowlevel_app


def create_app(*, log_path: str, drain_s: float = 30.0) -> ASGIApp:
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    engine_log = logging.getLogger("mcp_resume_asgi.engine.engine")
    engine_log.addHandler(handler)
    engine_log.setLevel(logging.INFO)
    return resumable(create_lowlevel_app(), policy=Policy(retry_ms=50), drain_s=drain_s)
