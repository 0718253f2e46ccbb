"""What real servers do with the two things an engine-owned task group relies on.

    PROBE_LOG=/tmp/probe.log uvicorn plan.servers_probe:app --port 8931
    (hypercorn, hypercorn -k trio, granian --interface asgi: the same app)

1. `/pending`: the request's task waits in `receive()` while ANOTHER task completes the
   response (what the lean design does: the POST's task only watches its client, the app's
   task writes). Logged: whether the waiting `receive()` returns `http.disconnect` once the
   response is complete, and after how long (or not within 2 s).
2. `/detach`: the response is sent at once and a task outlives the request (sleeping 30 s),
   started two ways: into a task group opened in the lifespan (`tg`), and loose
   (`asyncio.create_task` / trio system task). On shutdown, logged in order: lifespan
   shutdown starting, each task cancelled (or never told), lifespan shutdown done.
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
import sniffio

LOG = os.environ.get("PROBE_LOG", "/tmp/probe.log")
state: dict[str, Any] = {"tg": None}


def log(text: str) -> None:
    with open(LOG, "a") as f:
        f.write(f"{time.monotonic():.3f} {text}\n")


async def detached(name: str) -> None:
    try:
        await anyio.sleep(30)
        log(f"{name}: finished (not cancelled)")
    except BaseException as exc:  # cancellation on either backend
        log(f"{name}: {type(exc).__name__} at shutdown")
        raise


def spawn_loose(name: str) -> None:
    if sniffio.current_async_library() == "trio":
        import trio

        trio.lowlevel.spawn_system_task(detached, name)
    else:
        import asyncio

        task = asyncio.get_running_loop().create_task(detached(name))
        state.setdefault("loose", set()).add(task)


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":

                async def run_group(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
                    async with anyio.create_task_group() as tg:
                        state["tg"] = tg
                        task_status.started()
                        await anyio.sleep_forever()

                outer = state["outer"] = anyio.create_task_group()
                await outer.__aenter__()
                await outer.start(run_group)
                log(f"lifespan startup ({sniffio.current_async_library()})")
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                log("lifespan shutdown: begins; cancelling the engine task group")
                outer = state["outer"]
                outer.cancel_scope.cancel()
                try:
                    await outer.__aexit__(None, None, None)
                except BaseException as exc:
                    log(f"lifespan group exit: {type(exc).__name__}")
                log("lifespan shutdown: done")
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    if path == "/pending":
        body_done = False
        while not body_done:
            body_done = not (await receive()).get("more_body", False)

        async def respond() -> None:
            await anyio.sleep(0.05)
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
            )
            await send({"type": "http.response.body", "body": b"done\n", "more_body": False})
            state["completed_at"] = time.monotonic()

        async with anyio.create_task_group() as tg:
            tg.start_soon(respond)
            with anyio.move_on_after(2.0) as timeout:
                message = await receive()
            waited = time.monotonic() - state.get("completed_at", time.monotonic())
            if timeout.cancelled_caught:
                log("pending receive: NOT woken within 2 s of the response completing")
            else:
                log(
                    f"pending receive: woken with {message['type']} {waited * 1000:.1f} ms after the response completed"
                )
        return
    if path == "/detach":
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        await send({"type": "http.response.body", "body": b"detached\n", "more_body": False})
        if state["tg"] is not None:
            state["tg"].start_soon(detached, "task in the lifespan's group")
        spawn_loose("loose task")
        log("detach: request returned, two tasks left running")
        return
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})
