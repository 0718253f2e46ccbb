"""The client helper against the real engine: SEP-1335 multi-turn, Link resumes, the SDK adapter."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.client import ResumableSession, ResumableTransport, sdk_http_client
from tests.apps import APP_FACTORIES
from tests.support.counting import Counting
from tests.support.mcp_client import call_with_progress, result_text, stock_session
from tests.support.proxy import CutProxy
from tests.support.server import load_app, serve
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def text(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result.get("content", []))


@pytest.mark.parametrize("flavour", sorted(APP_FACTORIES))
async def test_elicitation_round_trip_through_the_link_url(flavour: str) -> None:
    counting = Counting(resumable(load_app(APP_FACTORIES[flavour]), policy=Policy(retry_ms=20)))
    asked: list[str] = []

    async def on_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append(method)
        return {"action": "accept", "content": {"name": "dora"}}

    async with serve(counting) as info, ResumableSession(info.mcp_url, on_request=on_request) as session:
        result = await session.call_tool("ask_name", {})
        assert text(result) == "hello dora"
    assert asked == ["elicitation/create"]
    # The answer went to the Link URL (SEP-1335), not to /mcp.
    link_posts = sum(n for kind, n in counting.counts.items() if kind.startswith("POST") and "link" in kind)
    link_gets = sum(n for kind, n in counting.counts.items() if kind.startswith("GET") and "link" in kind)
    assert link_posts == 1 and link_gets >= 1, counting.counts


async def test_progress_survives_at_will_disconnects_with_the_helper() -> None:
    policy = Policy(retry_ms=20, max_connection_s=0.2)
    counting = Counting(resumable(load_app(APP_FACTORIES["lowlevel"]), policy=policy))
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with serve(counting) as info, ResumableSession(info.mcp_url) as session:
        result = await session.call_tool(
            "slow_progress", {"seconds": 1.5, "steps": 15}, on_progress=on_progress
        )
    assert text(result) == "done 15"
    assert seen == [float(i) for i in range(1, 16)]
    assert counting.counts["GET resume link"] >= 5, counting.counts


async def test_the_sdk_client_through_the_adapter_survives_every_connection_being_cut() -> None:
    app = resumable(load_app(APP_FACTORIES["lowlevel"]), policy=Policy(retry_ms=10))
    async with serve(app) as info, CutProxy(info.port, cut_after_bytes=(700, 1900), seed=7) as proxy:
        # One TCP connection per request: a byte offset is an offset into one response, and
        # every cut lands after the response's headers (a cut before them is Idempotency-Key work).
        # The upper bound lets the largest single event (the SDK's tools/list answer, ~1.6 kB with
        # headers) through whole, or no replay could ever deliver it.
        inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
        http = sdk_http_client(transport=ResumableTransport(inner, max_attempts=10))
        async with http, stock_session(proxy.mcp_url, http_client=http, terminate_on_close=False) as session:
            results = []
            for _ in range(10):
                with anyio.fail_after(scaled(30)):
                    result, progress = await call_with_progress(
                        session, "slow_progress", {"seconds": 0.2, "steps": 5}
                    )
                results.append((result_text(result), [int(p[0]) for p in progress]))
    assert results == [("done 5", [1, 2, 3, 4, 5])] * 10
    assert proxy.stats.cuts >= 10


async def test_the_sdk_client_in_auto_mode_keeps_resuming_on_2026_07_28() -> None:
    """The stock client in auto mode speaks 2026-07-28, whose streams are not resumable unless
    a request declares the resumable-streams extension: the helper declares it on each one."""
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    policy = Policy(retry_ms=20, max_connection_s=0.2)
    counting = Counting(resumable(load_app(APP_FACTORIES["lowlevel"]), policy=policy))
    versions: list[bytes] = []

    async def seen(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            versions.append(dict(scope["headers"]).get(b"mcp-protocol-version", b""))
        await counting(scope, receive, send)

    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with (
        serve(seen) as info,
        sdk_http_client() as http,
        Client(streamable_http_client(info.mcp_url, http_client=http)) as client,
    ):
        with anyio.fail_after(scaled(20)):
            result = await client.call_tool(
                "slow_progress", {"seconds": 1.5, "steps": 15}, progress_callback=on_progress
            )
    assert result_text(result) == "done 15"
    assert progress == [float(i) for i in range(1, 16)]
    assert b"2026-07-28" in versions, versions
    resumes = sum(n for kind, n in counting.counts.items() if kind.startswith("GET") and "resume" in kind)
    assert resumes >= 3, counting.counts
