"""Connections cut by the network at random moments: every call still gets its result.

A TCP proxy between the stock `mcp` client and a wrapped stock server closes
each connection after a random number of bytes. Cuts land after the response
headers and the priming event (the proxy's lower bound, with one connection per
request): the stock client cannot resume a stream before it holds an event id,
and it counts a resumed stream that is cut mid-body as a failed reconnect, giving
up after two in a row - so this test cuts the POSTs (the moment a request's answer
is most exposed) and lets the resumes through; the client helper's own test cuts
every connection.
"""

from __future__ import annotations

import anyio
import httpx2
import pytest

from mcp_resume_asgi import Policy, resumable
from tests.apps import APP_FACTORIES
from tests.support.counting import Counting
from tests.support.mcp_client import call_with_progress, result_text, stock_session
from tests.support.proxy import CutProxy
from tests.support.server import load_app, serve
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CALLS = 50
STEPS = 5


async def test_fifty_calls_through_a_proxy_that_cuts_every_connection() -> None:
    counting = Counting(resumable(load_app(APP_FACTORIES["lowlevel"]), policy=Policy(retry_ms=10)))
    async with (
        serve(counting) as info,
        CutProxy(info.port, cut_after_bytes=(700, 1600), seed=1975, cut_methods=["POST"]) as proxy,
    ):
        results: list[str] = []
        progress_ok = 0

        async def worker(session_no: int) -> None:
            nonlocal progress_ok
            # One TCP connection per HTTP request, so a byte offset is an offset into one response.
            http = httpx2.AsyncClient(limits=httpx2.Limits(max_keepalive_connections=0), timeout=30)
            async with (
                http,
                stock_session(proxy.mcp_url, http_client=http, terminate_on_close=False) as session,
            ):
                for _ in range(CALLS // 5):
                    result, progress = await call_with_progress(
                        session, "slow_progress", {"seconds": 0.2, "steps": STEPS}
                    )
                    results.append(result_text(result))
                    if [int(p[0]) for p in progress] == list(range(1, STEPS + 1)):
                        progress_ok += 1

        with anyio.fail_after(scaled(120)):
            async with anyio.create_task_group() as tg:
                for n in range(5):
                    tg.start_soon(worker, n)
        print(
            f"calls={len(results)} correct={results.count(f'done {STEPS}')} exact_progress={progress_ok} "
            f"cuts={proxy.stats.cuts} connections={proxy.stats.connections} resumes={counting.counts['GET resume']}"
        )
        assert results == [f"done {STEPS}"] * CALLS
        assert progress_ok == CALLS
        assert proxy.stats.cuts >= CALLS
