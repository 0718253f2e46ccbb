"""What the OpenTelemetry SDK is asked to do per call (issue 23's cost bar): a store kept in
process is not timed (a histogram sample costs the SDK more than the call), a shared one is,
and a plain call that never lost its client does not move `mcp_resume.streams.detached`."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("opentelemetry.sdk")

from mcp_resume_asgi import MemoryStore, Policy, resumable
from mcp_resume_asgi.store.observed import ObservedStore, observed
from mcp_resume_asgi.telemetry import OFF, telemetry_from
from mcp_resume_asgi.telemetry import names as n
from mcp_resume_asgi.telemetry.otel import OtelTelemetry
from tests.support.raw import RawSession
from tests.support.server import serve
from tests.test_telemetry import Otel

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class SharedStore(MemoryStore):
    """A memory store standing for one other processes reach (as Redis): timed."""

    shared = True

    def is_unavailable_error(self, exc: BaseException) -> bool:
        return isinstance(exc, ConnectionError)


class LocalFlakyStore(MemoryStore):
    """A store kept in process that can still be down: watched, not timed."""

    def is_unavailable_error(self, exc: BaseException) -> bool:
        return isinstance(exc, ConnectionError)


async def _fail_then_recover(store: Any, inner: MemoryStore) -> None:
    down = [True]

    async def get_key(key: str) -> str | None:
        if down[0]:
            raise ConnectionError("refused")
        return None

    inner.get_key = get_key  # type: ignore[method-assign]
    for _ in range(2):
        with pytest.raises(ConnectionError):
            await store.get_key("k")
    down[0] = False
    assert await store.get_key("k") is None


def test_a_memory_store_is_neither_timed_nor_wrapped() -> None:
    telemetry = telemetry_from(Otel().setting)
    store = MemoryStore()
    assert observed(store, telemetry) is store, "in process and never down: nothing to time or watch"
    assert observed(store, OFF) is store


async def test_a_shared_store_is_timed_and_watched() -> None:
    otel = Otel()
    inner = SharedStore()
    store = observed(inner, telemetry_from(otel.setting))
    assert isinstance(store, ObservedStore) and store.timed
    assert await store.get_stream("nothing") is None
    await _fail_then_recover(store, inner)
    assert otel.count(n.STORE_OPERATION_DURATION, mcp_resume__store__name="shared") == 4
    assert otel.count(n.STORE_OPERATION_DURATION, error__type="ConnectionError") == 2
    assert otel.count(n.STORE_OUTAGES, mcp_resume__store__name="shared") == 1


async def test_a_store_kept_in_process_that_can_be_down_is_watched_not_timed() -> None:
    otel = Otel()
    inner = LocalFlakyStore()
    store = observed(inner, telemetry_from(otel.setting))
    assert isinstance(store, ObservedStore) and not store.timed
    assert await store.get_stream("nothing") is None
    await _fail_then_recover(store, inner)
    assert otel.count(n.STORE_OUTAGES, mcp_resume__store__name="localflaky") == 1
    assert otel.points(n.STORE_OPERATION_DURATION) == []


class Watched(OtelTelemetry):
    """The SDK's telemetry, noting each move of the two up-down counters."""

    def __init__(self, otel: Otel) -> None:
        super().__init__(tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
        self.moves: list[tuple[str, int]] = []

    def streams_attached(self, delta: int) -> None:
        self.moves.append(("attached", delta))
        super().streams_attached(delta)

    def streams_detached(self, delta: int) -> None:
        self.moves.append(("detached", delta))
        super().streams_detached(delta)


async def test_a_plain_call_moves_attached_up_and_down_and_detached_not_at_all() -> None:
    from tests.apps.lowlevel_app import create_app as lowlevel_app

    otel = Otel()
    telemetry = Watched(otel)
    app = resumable(lowlevel_app(), store=MemoryStore(), policy=Policy(), telemetry=telemetry)
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        session = RawSession(client)
        await session.initialize()
        await session.notify("notifications/initialized")
        for i in range(3):
            reply = await session.exchange("POST", "/mcp", session.tool_call("echo", {"text": f"hi {i}"}))
            assert any('"result"' in (event.data or "") for event in reply.events), reply.raw
        with anyio.fail_after(10):
            while otel.count(n.STREAMS_ATTACHED):  # (a connection is noted let go after its answer)
                await anyio.sleep(0.01)
    attached = [delta for kind, delta in telemetry.moves if kind == "attached"]
    assert attached.count(1) == attached.count(-1) >= 3, telemetry.moves
    assert ("detached", 1) not in telemetry.moves, "every answer was out before its client left"
    assert otel.count(n.STREAMS_DETACHED) == 0
    assert otel.points(n.STORE_OPERATION_DURATION) == [], "the memory store is not timed"
