"""Learning early that the server stops: a hook on its SIGTERM/SIGINT handlers.

A server tells the app it stops (`lifespan.shutdown`) only once its own connections
are over: uvicorn waits for every open response first (for ever without
`timeout_graceful_shutdown`), hypercorn for `graceful_timeout`. SSE answers that never
end would hold the shutdown, or be cut without `retry:`. So the middleware chains onto
the handler the server installed for the signal (uvicorn's `handle_exit`, hypercorn's
and granian's workers' asyncio handlers, whose Python-level handler is a no-op beside
the loop's wake-up fd): the server's handler runs as it would alone, then the drain starts on
the event loop. A signal nobody handles (the default action, ignored, or Python's
`KeyboardInterrupt`) is left alone: that server does not stop gracefully on it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

__all__ = ["hold_app_streams", "on_shutdown_signal"]

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)

Handler = Callable[[int, FrameType | None], Any]


def on_shutdown_signal(drain: Callable[[], Awaitable[Any]]) -> Callable[[], None]:
    """Start `drain()` as a task of the running event loop when the server's SIGTERM/SIGINT
    handler runs (after it); returns how to undo the hook (a handler replaced since is left
    alone)."""
    if threading.current_thread() is not threading.main_thread():
        logger.info("not in the main thread: the drain starts at the lifespan's shutdown")
        return _nothing
    schedule = _scheduler(drain)
    if schedule is None:
        return _nothing
    hooked: dict[int, tuple[Handler, Handler]] = {}
    for sig in SIGNALS:
        previous = signal.getsignal(sig)
        if not callable(previous) or previous is signal.default_int_handler:
            continue
        server_handler: Handler = previous

        def handler(signum: int, frame: FrameType | None, server_handler: Handler = server_handler) -> None:
            try:
                server_handler(signum, frame)
            finally:
                schedule()

        signal.signal(sig, handler)
        hooked[sig] = (handler, server_handler)
    if hooked:
        logger.debug("drain hooked on signals %s", sorted(int(s) for s in hooked))

    def undo() -> None:
        for sig, (ours, theirs) in hooked.items():
            if signal.getsignal(sig) is ours:
                signal.signal(sig, theirs)

    return undo


def _scheduler(drain: Callable[[], Awaitable[Any]]) -> Callable[[], None] | None:
    """How a signal handler gets `drain()` started on this event loop (asyncio or trio)."""

    async def guarded() -> None:
        try:
            await drain()
        except Exception:
            logger.exception("the drain failed")

    trio: Any = sys.modules.get("trio")
    if trio is not None:
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            pass
        else:
            spawn_system_task = trio.lowlevel.spawn_system_task

            def schedule_trio() -> None:
                token.run_sync_soon(spawn_system_task, guarded)

            return schedule_trio
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    tasks: set[asyncio.Task[None]] = set()

    def start() -> None:
        task = loop.create_task(guarded())
        tasks.add(task)  # (the loop keeps only weak references)
        task.add_done_callback(tasks.discard)

    def schedule() -> None:
        loop.call_soon_threadsafe(start)

    return schedule


def hold_app_streams() -> Callable[[], None]:
    """Keep sse-starlette (the MCP SDK's SSE responses) from ending the app's streams on the
    server's signal; returns how to let go (at the lifespan's end).

    sse-starlette ends every `EventSourceResponse` as soon as uvicorn's `handle_exit` runs
    (it patches it, and polls the server's `should_exit`): an MCP SDK app's tool would lose
    its stream mid-call, and its client get "ended without a response". Under the engine the
    app's responses go to the engine, not to the network, and the drain ends them itself (at
    `drain_s`), so its automatic drain is switched off while the middleware's lifespan runs."""
    status: Any = getattr(sys.modules.get("sse_starlette.sse"), "AppStatus", None)
    if status is None or not getattr(status, "enable_automatic_graceful_drain", False):
        return _nothing
    status.enable_automatic_graceful_drain = False
    logger.debug("sse-starlette's automatic drain is off: the middleware drains the app's streams")

    def release() -> None:
        status.enable_automatic_graceful_drain = True

    return release


def _nothing() -> None:
    """Undo for a hook that was not set."""
