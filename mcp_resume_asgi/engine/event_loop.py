"""Which event loop runs the current task: asyncio's (and which one), or another (trio).

The engine takes asyncio-only short cuts (a bare future to wait on, a loop callback instead of a
timer task) where asyncio runs, and anyio's portable forms elsewhere; it asks which on every
request. `asyncio.get_running_loop()` raises `RuntimeError` when no asyncio loop runs, so under trio
each question would raise and catch an exception; `asyncio._get_running_loop()` answers None
instead. It is underscored but stable since Python 3.7 (its docstring: "Return the running event
loop or None ... intended to be used by event loops"), and what `asyncio.get_running_loop()` itself
calls. This module is the one place that names it; `running_asyncio_loop` is the function itself,
not a wrapper around it (it is asked on every request: no frame added).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["current_asyncio_task", "running_asyncio_loop"]


running_asyncio_loop: Callable[[], asyncio.AbstractEventLoop | None] = asyncio._get_running_loop
"""The running asyncio loop, None under another event loop (no exception raised to learn it)."""


def current_asyncio_task() -> asyncio.Task[Any] | None:
    """The running asyncio task, None under another event loop (trio: no asyncio loop runs in
    its thread; nor is a task of asyncio's running when trio is a guest on an asyncio loop)."""
    loop = running_asyncio_loop()
    return None if loop is None else asyncio.current_task(loop)
