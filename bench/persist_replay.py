"""The replay side of `mcp-persist`'s event stores (SQLite, Redis), as both replay benches use it.

`filled_replayer` writes a stream of `n_events` (the priming event, progress notifications,
the result) through the store's own `store_event`, as the SDK's transport stores them, and
returns a function that replays it from the first event with `replay_events_after`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


async def filled_replayer(store: Any, n_events: int) -> Callable[[], Awaitable[int]]:
    from mcp.server.streamable_http import EventMessage
    from mcp_types import JSONRPCNotification, JSONRPCResponse

    first_id = await store.store_event("s1", None)  # the priming event, as the SDK stores it
    for i in range(1, n_events):
        note = JSONRPCNotification(
            jsonrpc="2.0",
            method="notifications/progress",
            params={"progressToken": "t1", "progress": i, "total": n_events},
        )
        await store.store_event("s1", note)
    done = JSONRPCResponse(
        jsonrpc="2.0", id=1, result={"content": [{"type": "text", "text": "done"}], "isError": False}
    )
    await store.store_event("s1", done)

    async def replay() -> int:
        got: list[EventMessage] = []

        async def collect(event: EventMessage) -> None:
            got.append(event)

        await store.replay_events_after(first_id, collect)
        return len(got)

    return replay
