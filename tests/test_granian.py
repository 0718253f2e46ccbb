"""granian serves a wrapped app: at-will closes, a dropped connection and its resume, end to end.

granian runs the app in a worker process of its own and drives it through its own
ASGI implementation (in Rust), so the app's request outliving its HTTP response,
`http.disconnect` and the lifespan are exercised by a server other than uvicorn and
hypercorn.
"""

from __future__ import annotations

import httpx
import httpx2
import pytest

from tests.support.mcp_client import call_with_progress, result_text, stock_session
from tests.support.raw import RawSession
from tests.support.server import serve_granian

pytest.importorskip("granian", reason="granian is not installed (it is in the `test` extra)")

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.slow]

TARGET = "tests.apps.wrapped_app:create_app"
CUT_EVERY_200MS = {"policy": {"retry_ms": 20, "max_connection_s": 0.2}}


async def test_the_stock_client_gets_every_notification_through_at_will_closes() -> None:
    resumes: list[str] = []

    async def count_resumes(request: httpx2.Request) -> None:
        if request.method == "GET" and "last-event-id" in request.headers:
            resumes.append(request.headers["last-event-id"])

    http = httpx2.AsyncClient(event_hooks={"request": [count_resumes]}, timeout=30)
    async with (
        serve_granian(TARGET, factory_kwargs=CUT_EVERY_200MS) as info,
        http,
        stock_session(info.mcp_url, http_client=http) as session,
    ):
        result, progress = await call_with_progress(session, "slow_progress", {"seconds": 2, "steps": 20})
        assert result_text(result) == "done 20"
        assert [int(p[0]) for p in progress] == list(range(1, 21)), "lost, duplicated or reordered"
        assert result_text(await session.call_tool("echo", {"text": "after"})) == "after"
    assert len(resumes) >= 5, f"granian should have let the middleware close every 200 ms: {resumes}"


async def test_a_dropped_connection_resumes_with_the_missed_events() -> None:
    async with (
        serve_granian(TARGET, factory_kwargs={"policy": {"retry_ms": 20}}) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
    ):
        s = RawSession(client)
        await s.initialize()
        call = s.tool_call("slow_progress", {"seconds": 1.0, "steps": 10}, progress=True)
        first = await s.exchange("POST", "/mcp", call, stop_after=3)  # then the client drops
        assert first.link and first.events[0].data == "" and first.events[0].retry == 20
        progress = [m["params"]["progress"] for m in first.messages() if "params" in m]
        rest = await s.exchange("GET", "/mcp", headers=s.headers(last_event_id=first.last_id))
        progress += [m["params"]["progress"] for m in rest.messages() if "params" in m]
        assert progress == list(range(1, 11))
        assert rest.messages()[-1]["result"]["content"][0]["text"] == "done 10"
        again = await s.exchange("GET", first.link, headers=s.headers(last_event_id=rest.last_id))
        assert again.status == 204, "the stream is over for this client"
