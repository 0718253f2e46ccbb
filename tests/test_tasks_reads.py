"""What one `tasks/get` reads from the store (`tasks/stored.read_task`), on both stores.

A task in its first round, working or finished, is read in one store call
(`Store.read_key_and_stream`: the record, the request's stream, its answer; one
round trip on Redis), where it took two (working) or three (finished). The store is
a real one, wrapped to note the calls made about the task's stream.
"""

from __future__ import annotations

import inspect
import uuid
from typing import Any

import anyio
import pytest

from mcp_resume_asgi import Store
from tests.test_tasks import created, store_kind, wrapped

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
__all__ = ["store_kind"]  # the store fixture (memory, Redis) of test_tasks.py


class CountingStore:
    """`inner`, noting every call of its async methods (name, arguments) in `calls`."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def noted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args))
            return await attr(*args, **kwargs)

        return noted

    def about(self, stream_id: str) -> list[str]:
        """The calls noted that name `stream_id` (its stream, or a key built from it)."""
        return [name for name, args in self.calls if any(stream_id in str(arg) for arg in args)]


Store.register(CountingStore)


async def test_tasks_get_of_a_first_round_task_reads_the_store_once() -> None:
    async with wrapped(wrap=CountingStore) as h:
        store = h.store
        assert isinstance(store, CountingStore)
        finished = created(await h.call("echo", {"text": "done"}))
        assert (await h.until_terminal(finished))["status"] == "completed"
        working = created(await h.call("slow", {"seconds": 5.0, "tag": f"reads-{uuid.uuid4().hex[:8]}"}))
        assert (await h.get(working))["status"] == "working"
        await anyio.sleep(0.5)  # the echo call's end is noted (its record written) by now
        for task_id, status in ((finished, "completed"), (working, "working")):
            store.calls.clear()
            assert (await h.get(task_id))["status"] == status
            assert store.about(h.stream_of(task_id)) == ["read_key_and_stream"], status
        await h.task("tasks/cancel", working)
