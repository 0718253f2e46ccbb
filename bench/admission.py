"""What the admission check (issue 11) costs a resume: Link GETs with and without it, one run.

Run: `.venv/bin/python -m bench.admission`. A wrapped `MCPServer` under uvicorn on
127.0.0.1 (in a thread of this process), one completed call, then `GET <Link>`
(which replays that answer) N times with the app's admission `ping`, and N times
with the check switched off, alternating; prints microseconds per resume.
"""

from __future__ import annotations

import time

import anyio
import httpx

from mcp_resume_asgi import MemoryStore, Policy, resumable
from mcp_resume_asgi.engine.admission import Admission
from tests.apps.mcpserver_app import create_app
from tests.support.raw import RawSession
from tests.support.server import serve

ROUNDS = 300


async def main() -> None:
    app = resumable(create_app(), policy=Policy(retry_ms=20), store=MemoryStore())
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        session = RawSession(client)
        await session.initialize()
        first = await session.exchange("POST", "/mcp", session.tool_call("echo", {"text": "x"}))
        assert first.link
        checked = Admission.check

        async def unchecked(self: Admission, scope: object, meta: object) -> None:
            return None

        try:
            for label in ("with admission", "without", "with admission", "without"):
                Admission.check = checked if label == "with admission" else unchecked  # type: ignore[method-assign]
                started = time.perf_counter()
                for _ in range(ROUNDS):
                    response = await client.get(first.link, headers=session.headers())
                    assert response.status_code == 200, response.status_code
                took = (time.perf_counter() - started) / ROUNDS * 1e6
                print(f"{label}: {took:,.0f} us per resume (GET <Link>, replays a one-event answer)")
        finally:
            Admission.check = checked  # type: ignore[method-assign]


if __name__ == "__main__":
    anyio.run(main)
