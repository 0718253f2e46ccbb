"""A memory store that refuses every operation while `down`, as Redis does while it is down.

Each public coroutine of `MemoryStore` raises the `ConnectionError` redis-py raises for a
refused connection, and `is_unavailable_error` recognises it, so the middleware treats it
as an outage. The test switches it off and on, so an outage starts and ends exactly where
the test wants it, in one process (the Redis fault tests kill a real server instead).
"""

from __future__ import annotations

import inspect
from typing import Any

from mcp_resume_asgi import MemoryStore


class DownStore(MemoryStore):
    """The memory store, refusing every operation while `down`."""

    down = False

    def is_unavailable_error(self, exc: BaseException) -> bool:
        return isinstance(exc, ConnectionError)


def _refused_while_down(name: str) -> Any:
    real = getattr(MemoryStore, name)

    async def method(self: DownStore, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        return await real(self, *args, **kwargs)

    return method


for _name, _function in inspect.getmembers(MemoryStore, inspect.iscoroutinefunction):
    if not _name.startswith("_") and _name != "aclose":
        setattr(DownStore, _name, _refused_while_down(_name))
