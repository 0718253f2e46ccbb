"""A relayed answer whose write stalls: every event reaches the client once.

A session's request that lands on another node is relayed to the node that holds the session
(`engine/cluster.py`): the answer the app streams there is written, part by part, as messages
PUBLISHed to the relaying node, which writes them to its client. The engine gives up a write that
takes longer than `STALL_S` (a client that stopped reading) and writes the connection from a
task of its own from then on (`engine/delivery.py`), writing again what the stalled write
carried unless that write is known to have gone out. A publish is out once the store has it,
before its reply comes back: a write given up while the reply was in flight was written all the
same, and writing it again sent the event twice.

Seen in `test_session_adoption.py[legacy-sigterm]` on a loaded machine (a progress event the
stock client got twice; Redis replies there took longer than `STALL_S`), and with the TypeScript
SDK client. Forced here in one process: two nodes with a real `MemoryStore` standing for a
shared one, the owner's publish of the part that carries the second progress event held after
it went out (`PausingStore.hold_publish`) until the app has sent its result.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.store import MemoryStore
from tests.apps.lowlevel_app import create_app
from tests.support.pausing_store import PausingStore
from tests.support.raw import RawSession
from tests.support.server import serve_in_loop
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SECRET = "relayed-answer-stalls-secret"
STEPS = 5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # (`serve_in_loop` runs uvicorn in the test's own loop)


class SharedMemoryStore(MemoryStore):
    """A memory store standing for one that nodes in several processes reach (Redis): each
    engine on it is a node of one cluster (heartbeat, roll call, channels), in this process."""

    shared = True


def _carries_progress(step: int) -> Any:
    """Whether a published relay message is a part of an answer carrying progress `step`."""
    progress = re.compile(rb'"progress":\s*%d(\.0)?[,}]' % step)

    def matches(message: str) -> bool:
        payload = json.loads(json.loads(message)["sealed"])
        return payload["t"] == "body" and bool(progress.search(base64.b64decode(payload["body"])))

    return matches


async def test_a_relayed_event_whose_publish_stalls_reaches_the_client_once() -> None:
    shared = SharedMemoryStore()
    owner_store = PausingStore(shared)
    policy = Policy(retry_ms=50, keepalive_s=None)
    owner = resumable(create_app(), store=owner_store, secret=SECRET, policy=policy)
    relaying = resumable(create_app(), store=shared, secret=SECRET, policy=policy)
    async with (
        serve_in_loop(owner) as owner_info,
        serve_in_loop(relaying) as relaying_info,
        httpx.AsyncClient(base_url=owner_info.base_url, timeout=scaled(30)) as to_owner,
        httpx.AsyncClient(base_url=relaying_info.base_url, timeout=scaled(30)) as to_relaying,
    ):
        opened = RawSession(to_owner)
        await opened.initialize()  # the session lives on the owner
        session = RawSession(to_relaying)
        session.session_id = opened.session_id
        call = session.tool_call("slow_progress", {"seconds": 0.2, "steps": STEPS}, progress=True)
        published = owner_store.hold_publish(matches=_carries_progress(2))
        recorded = owner_store.hold_append(matches=lambda payloads: '"result"' in payloads)
        reply: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def call_through_the_relaying_node() -> None:
                reply.append(await session.exchange("POST", "/mcp", call, timeout=30))

            tg.start_soon(call_through_the_relaying_node)
            with anyio.fail_after(scaled(20)):
                await published.reached()  # the part is out; its publisher waits for the reply
                await recorded.reached()  # the app went on meanwhile, to its result
            recorded.release()
            published.release()
    answer = reply[0]
    assert answer.status == 200, answer.raw
    messages = answer.messages()
    progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
    assert progress == list(range(1, STEPS + 1)), f"lost, repeated or reordered: {progress}"
    assert messages[-1]["result"]["content"][0]["text"] == f"done {STEPS}", messages
