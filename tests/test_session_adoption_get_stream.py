"""A session's GET stream carries on from the node that adopts the session.

Two uvicorn nodes on one Redis behind the round-robin proxy; a raw client opens a 2025 session
on node A and its standalone GET stream there, gets a server notification on it, and A gets
SIGTERM (the balancer drops it). The client resumes the GET with the `Last-Event-ID` it holds,
through the proxy: node B serves it - first what A recorded that the client missed, then,
resumed after that, the session's stream from B's app, which took the session over: what the
app sends the session from then on (a log message, on a tool call) arrives on it. The same
`Last-Event-ID` under a forged session id is still refused (404).
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from tests.support.cluster import cluster, port_of, prefix, steer
from tests.support.proxy import CutProxy
from tests.support.raw import Event, RawSession
from tests.support.stores import require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

#: A connection per request: the balancer picks the node of each (as a leaving node's
#: closed connections make a client do).
FRESH = httpx.Limits(max_keepalive_connections=0)


def _is_tick(event: Event, tick: str) -> bool:
    message = event.message
    return (
        isinstance(message, dict)
        and message.get("method") == "notifications/message"
        and message.get("params", {}).get("data") == tick
    )


async def _next_tick(events: AsyncIterator[Event], seen: list[Event], tick: str) -> None:
    async for event in events:
        seen.append(event)
        if _is_tick(event, tick):
            return
    raise AssertionError(f"the stream ended before {tick!r}: {seen}")


async def _notify(raw: RawSession, count: int) -> Any:
    """Ask the app to send the session `count` log messages on its GET stream ("tick 1", ...)."""
    body = raw.tool_call("notify_later", {"count": count, "interval": 0.01, "wait": True})
    reply = await raw.exchange("POST", raw.path, body, timeout=30)
    assert reply.status == 200, (reply.status, reply.raw)
    return reply


async def test_the_get_stream_of_a_session_carries_on_from_its_adopter(prefix: str) -> None:
    require_redis()
    async with (
        cluster(
            2, prefix, policy={"retry_ms": 50}, options={"node_timeout_s": 2.0}, graceful_shutdown=2.0
        ) as (
            a,
            b,
        ),
        CutProxy([port_of(a), port_of(b)]) as proxy,
        httpx.AsyncClient(
            base_url=proxy.mcp_url.removesuffix("/mcp"), timeout=scaled(30), limits=FRESH
        ) as http,
    ):
        raw = RawSession(http)
        await steer(proxy, port_of(a))
        opened = await raw.initialize()
        assert opened.status == 200 and raw.session_id
        on_a: list[Event] = []
        with anyio.fail_after(scaled(30)):
            await steer(proxy, port_of(a))
            async with raw.open("GET", raw.path, headers=raw.headers()) as (response, reader):
                assert response.status_code == 200
                events = aiter(reader)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_notify, raw, 1)
                    await _next_tick(events, on_a, "tick 1")
                proxy.backend_ports = [port_of(b)]  # A is not ready any more: the balancer drops it
                a.signal(signal.SIGTERM)
                on_a.extend([event async for event in events])  # A's drain lets the stream go
        ids = [e.id for e in on_a if e.id]
        before_tick = next(e.id for e in on_a if e.id and not e.data)  # the priming event's
        assert ids and before_tick != ids[-1], on_a

        # A client that missed A's last event gets it, from the record, on B...
        missed: list[Event] = []
        with anyio.fail_after(scaled(30)):
            async with raw.open("GET", raw.path, headers=raw.headers(last_event_id=before_tick)) as (
                response,
                reader,
            ):
                assert response.status_code == 200, (response.status_code, await response.aread())
                missed.extend([event async for event in reader])
        assert [e.message["params"]["data"] for e in missed if e.data] == ["tick 1"], missed

        # ... and then, resumed after it, the session's GET stream from B's app: what it sends the
        # session from now on (a log message, on a tool call) arrives on it.
        live: list[Event] = []
        with anyio.fail_after(scaled(30)):
            async with raw.open("GET", raw.path, headers=raw.headers(last_event_id=ids[-1])) as (
                response,
                reader,
            ):
                assert response.status_code == 200, (response.status_code, await response.aread())
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_notify, raw, 2)
                    await _next_tick(aiter(reader), live, "tick 2")
        assert [e.message["params"]["data"] for e in live if e.data] == ["tick 1", "tick 2"], live

        # Isolation: the same Last-Event-ID under a forged session id is not served.
        forged = await raw.exchange(
            "GET", raw.path, headers={**raw.headers(last_event_id=ids[-1]), "mcp-session-id": "forged"}
        )
        assert forged.status == 404, (forged.status, forged.raw)
