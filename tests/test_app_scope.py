"""`AppScope`: the lever that stops the app's call, on asyncio by cancelling its task (no cancel
scope), on trio by a cancel scope. Its cancellation never outlives the call, and never
swallows one that is not its own."""

from __future__ import annotations

import asyncio
import contextlib

import anyio
import anyio.lowlevel
import pytest

from mcp_resume_asgi.engine.connection import AppScope

pytestmark = pytest.mark.anyio

BACKENDS = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])


@BACKENDS
async def test_a_cancel_during_the_call_stops_it_and_what_follows_runs() -> None:
    scope = AppScope()
    reached: list[str] = []

    async def app() -> None:
        reached.append("started")
        await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:

        async def run() -> None:
            await scope.run(app())
            await anyio.lowlevel.checkpoint()  # (a cancellation left pending would stop this)
            reached.append("after")

        tg.start_soon(run)
        await anyio.wait_all_tasks_blocked()
        scope.cancel()
    assert reached == ["started", "after"]


@BACKENDS
async def test_a_cancel_before_the_call_stops_it_at_its_first_await() -> None:
    scope = AppScope()
    scope.cancel()
    reached: list[str] = []

    async def app() -> None:
        reached.append("started")
        await anyio.lowlevel.checkpoint()
        reached.append("not reached")

    await scope.run(app())
    await anyio.lowlevel.checkpoint()
    assert reached == ["started"]


@BACKENDS
async def test_a_cancel_after_the_call_ended_does_nothing() -> None:
    scope = AppScope()

    async def app() -> None:
        await anyio.lowlevel.checkpoint()

    await scope.run(app())
    scope.cancel()
    await anyio.lowlevel.checkpoint()  # not cancelled


async def test_a_cancel_the_app_swallowed_is_taken_back_when_the_call_ends() -> None:
    scope = AppScope()

    async def app() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # an app that goes on anyway
            await asyncio.sleep(10)

    async def run() -> str:
        await scope.run(app())
        await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        return f"cancelling={task.cancelling()}"

    task = asyncio.get_running_loop().create_task(run())
    await asyncio.sleep(0)
    scope.cancel()
    assert await task == "cancelling=0"


async def test_a_cancel_that_is_not_its_own_goes_through() -> None:
    scope = AppScope()

    async def app() -> None:
        await asyncio.sleep(10)

    task = asyncio.get_running_loop().create_task(scope.run(app()))
    await asyncio.sleep(0)
    task.cancel()  # (the server's, say: not the scope's)
    with pytest.raises(asyncio.CancelledError):
        await task
