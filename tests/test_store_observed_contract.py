"""The store contract (`test_store_contract.py`) holds through `ObservedStore`, the wrapper that
times every call of a shared store for telemetry: every test of it, run again on a wrapped
`MemoryStore` that says it is shared (as a Redis store does; one kept in process is not timed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcp_resume_asgi.store import MemoryStore, Store
from mcp_resume_asgi.store.observed import ObservedStore
from mcp_resume_asgi.telemetry import Telemetry
from tests.test_store_contract import *  # noqa: F403 - the contract's tests, collected here again
from tests.test_store_contract import Factory


class SharedMemoryStore(MemoryStore):
    """A memory store timed as a shared one (Redis) is."""

    shared = True


class Counted(Telemetry):
    """Telemetry on, without OpenTelemetry: the store calls it was told of."""

    enabled = True
    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def store_operation(self, store: str, operation: str, duration_s: float, error_type: str | None) -> None:
        assert store == "sharedmemory" and duration_s >= 0
        self.calls.append((operation, error_type))


@pytest.fixture
async def make() -> AsyncIterator[Factory]:  # (replaces the contract's: a wrapped memory store)
    told = Counted()

    async def factory(peer: Store | None = None, **bounds: Any) -> Store:
        return peer if peer is not None else ObservedStore(SharedMemoryStore(**bounds), told)

    yield factory


async def test_the_contract_here_runs_on_the_wrapper_which_reports_each_call(store: Store) -> None:
    assert isinstance(store, ObservedStore) and isinstance(store.telemetry, Counted)
    assert await store.get_key("nothing") is None
    await store.wait("nothing", 0, within_s=0.01)  # (not timed: it lasts while nothing happens)
    assert store.telemetry.calls == [("get_key", None)]
