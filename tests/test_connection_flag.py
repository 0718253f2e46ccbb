"""`engine.connection.Flag`, on asyncio (a bare future per waiter) and trio (an `anyio.Event`):
every waiter is released by `set`, a cancelled waiter leaves the others waiting, and a set
flag is not waited on."""

from __future__ import annotations

import anyio
import pytest

from mcp_resume_asgi.engine.connection import Flag
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


async def test_set_releases_every_waiter_and_a_cancelled_one_leaves_the_others() -> None:
    flag = Flag()
    released: list[str] = []

    async def waiter(name: str) -> None:
        await flag.wait()
        released.append(name)

    with anyio.fail_after(scaled(5)):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter, "a")
            tg.start_soon(waiter, "b")
            with anyio.CancelScope() as cancelled:
                cancelled.cancel()
                await flag.wait()  # cancelled while waiting: "a" and "b" must not notice
            await anyio.wait_all_tasks_blocked()
            assert not released and not flag.is_set()
            flag.set()
    assert sorted(released) == ["a", "b"]


async def test_a_set_flag_is_not_waited_on() -> None:
    flag = Flag()
    flag.set()
    with anyio.fail_after(scaled(5)):
        await flag.wait()
    assert flag.is_set()


async def test_future_is_set_with_the_flag_and_a_cancelled_one_is_dropped(anyio_backend: str) -> None:
    """`Flag.future`: on asyncio the future `wait` would await (set with the flag; one cancelled
    by its waiter is dropped by the next one), None on trio or once set (`wait` then)."""
    flag = Flag()
    first = flag.future()
    if anyio_backend == "trio":
        assert first is None
        return
    assert first is not None
    first.cancel()  # its waiter was cancelled
    second = flag.future()
    assert second is not None and not second.done()
    assert flag._waiters is second  # the cancelled one is not kept for the flag's lifetime (nor a list)
    flag.set()
    assert second.done() and not second.cancelled()
    assert flag.future() is None
