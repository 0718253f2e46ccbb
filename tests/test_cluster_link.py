"""A node's cluster link on a real Redis: what anyone who can publish may send it, and replays.

Two `Node`s in this process, each on a `RedisStore` of its own under one prefix, as two
processes would be: A serves relayed requests with a small ASGI app, B relays requests to A.
Each node's `run` is called directly (not `run_forever`, which would rejoin): if its inbox
stopped, the test's task group would fail with the error that stopped it.

* Garbage PUBLISHed to both nodes' channels - JSON nested 100,000 deep, a message past the
  size bound, bytes that are not JSON, JSON that is no relay message, relay messages with the
  wrong shapes - is dropped and counted, one warning per reason; relayed calls before, between
  and after it succeed, and the link never drops.
* A validly sealed part of a relayed answer, captured off B's channel and published again
  while that answer is under way, is dropped: the answer goes on to its end. A part that is
  really missing still ends it.
* A relayed SSE answer that B's drain lets go of just as its last part went to its client is
  not ended a second time (uvicorn refuses a body after the end: "Exception in ASGI
  application", seen in a rolling deploy).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from mcp_resume_asgi.engine.cluster import Node
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.wire.asgi import Message, Receive, Scope, Send, http_scope
from mcp_resume_asgi.wire.relay_seal import RelaySeal
from mcp_resume_asgi.wire.tokens import TokenSigner
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SECRET = "cluster-link-test-secret-0123456"
LIBRARY = "mcp_resume_asgi"
DEEP = b"[" * 100_000 + b"]" * 100_000
BIG = 1_000_000
"""An answer longer than one relay message may be: it travels in parts."""


class Owner:
    """A's app: echoes a POST's body; `/big` answers `BIG` bytes in one body message; `/parts`
    answers in three parts, the second one held until `go` is set; `/events` answers two SSE
    events, each a part."""

    def __init__(self) -> None:
        self.go = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = (await receive()).get("body", b"")
        if scope["path"] == "/events":
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"id: 1\ndata: a\n\n", "more_body": True})
            await send({"type": "http.response.body", "body": b"id: 2\ndata: b\n\n"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]})
        if scope["path"] == "/big":
            await send({"type": "http.response.body", "body": b"x" * BIG})
            return
        if scope["path"] != "/parts":
            await send({"type": "http.response.body", "body": b"echo:" + body})
            return
        await send({"type": "http.response.body", "body": b"one;", "more_body": True})
        await self.go.wait()
        await send({"type": "http.response.body", "body": b"two;", "more_body": True})
        await send({"type": "http.response.body", "body": b"three"})


@contextlib.asynccontextmanager
async def two_nodes(max_body_bytes: int = 4096) -> AsyncIterator[tuple[Node, Node, Owner, str]]:
    """A and B running (their inboxes subscribed), and the prefix of their channels."""
    require_redis()
    from mcp_resume_asgi.store import RedisStore

    prefix = redis_prefix("test-cluster-link")
    stores = [RedisStore(redis_url(), prefix=prefix) for _ in range(2)]
    a, b = (
        Node(store, node_id=name, timeout_s=5.0, signer=TokenSigner(SECRET), max_body_bytes=max_body_bytes)
        for store, name in zip(stores, ("a", "b"), strict=True)
    )
    owner = Owner()

    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("B serves nothing relayed in these tests")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.run, owner)
            tg.start_soon(b.run, refuse)
            for node in (a, b):
                assert await node.wait_running(scaled(10))
            yield a, b, owner, prefix
            assert a.running and b.running, "a node's inbox stopped"
            tg.cancel_scope.cancel()
    finally:
        for store in stores:
            with anyio.CancelScope(shield=True):
                await store.aclose()


async def relay(b: Node, path: str, body: bytes = b"") -> tuple[int, bytes, bool]:
    """Relay a request through B to A, as B's client: its status, its body, and whether its
    answer ended as a complete one (`more_body` false on its last message)."""
    sent: list[Message] = []

    async def receive() -> Message:
        await anyio.sleep_forever()
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message)

    scope = http_scope("POST", "http", path, b"", [(b"content-type", b"application/json")])
    await b.relay("a", scope, receive, send, body)
    [start, *bodies] = sent
    assert start["type"] == "http.response.start"
    complete = bool(bodies) and not bodies[-1].get("more_body", False)
    return start["status"], b"".join(m.get("body", b"") for m in bodies), complete


async def publish(prefix: str, node_id: str, raw: bytes) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url())
    try:
        assert await client.publish(f"{prefix}ch:{keys.node(node_id)}", raw) >= 1
    finally:
        await client.aclose()


def garbage(max_message_bytes: int) -> list[bytes]:
    """What anyone who can publish may send a node's channel, none of it a relay message."""
    shapes: list[Any] = [
        [],
        "text",
        {"id": 5, "t": "req"},
        {"id": "x", "t": "req"},
        {"id": "x", "t": "req", "sealed": {"id": "x"}, "seal": "y"},
        {"id": "x", "t": "req", "sealed": "{}", "seal": ["y"]},
        {"id": "x", "t": ["req"]},
        {"id": "x", "t": "body", "sealed": "é" * 10, "seal": "\udc00"},
        {"id": "x", "t": "gone", "sealed": 1, "seal": 2},
    ]
    return [
        DEEP,
        b'{"id": "x", "t": "req", "sealed": ' + DEEP + b"}",
        b"{" * 100_000,
        b"\xff\xfe not json",
        b" " * (max_message_bytes + 1),
        *(json.dumps(shape).encode() for shape in shapes),
    ]


async def test_garbage_on_the_channels_is_dropped_and_relays_go_on(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LIBRARY)
    async with two_nodes() as (a, b, _, prefix):
        assert await relay(b, "/mcp", b"before") == (200, b"echo:before", True)
        for round_ in range(3):
            for node_id in ("a", "b"):
                for raw in garbage(a.max_message_bytes):
                    await publish(prefix, node_id, raw)
            # The relay's request reaches A after the garbage sent to it, its answer B likewise.
            assert await relay(b, "/mcp", b"%d" % round_) == (200, b"echo:%d" % round_, True)
        for node in (a, b):
            assert node.dropped["it is not JSON, or nests too deep"] == 3 * 4, node.dropped
            assert node.dropped[f"it is longer than {node.max_message_bytes} bytes"] == 3
            assert node.dropped["it is not a relay message"] == 3 * 3
            assert not node.link.down
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    deep = [w for w in warnings if "nests too deep" in w]
    assert len(deep) == 2, warnings  # once per node and reason, however many came
    assert not [w for w in warnings if "cluster link" in w], warnings


async def test_an_answer_longer_than_a_message_travels_in_parts() -> None:
    async with two_nodes() as (a, b, _, _prefix):
        assert a.max_message_bytes < BIG * 4 // 3
        with anyio.fail_after(scaled(10)):
            assert await relay(b, "/big") == (200, b"x" * BIG, True)
        assert not b.dropped


@pytest.mark.parametrize("again", ["replayed", "skipping"])
async def test_a_replayed_part_of_an_answer_is_dropped_and_the_answer_goes_on(again: str) -> None:
    """A's first part, captured off B's channel and published again while the answer waits for
    its second part: the client still gets the whole answer. A part past the next one (one is
    missing) still ends it."""
    import redis.asyncio as aioredis

    async with two_nodes() as (_, b, owner, prefix):
        client = aioredis.Redis.from_url(redis_url())
        listener = client.pubsub()
        await listener.subscribe(f"{prefix}ch:{keys.node('b')}")
        first_part = anyio.Event()
        captured: list[bytes] = []

        async def capture() -> None:
            while True:
                message = await listener.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is not None and json.loads(message["data"]).get("t") == "body":
                    captured.append(message["data"])
                    first_part.set()
                    return

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(capture)
                answer: list[tuple[int, bytes, bool]] = []

                async def call() -> None:
                    answer.append(await relay(b, "/parts"))

                tg.start_soon(call)
                with anyio.fail_after(scaled(10)):
                    await first_part.wait()
                if again == "replayed":
                    await publish(prefix, "b", captured[0])  # the same sealed part, again
                    await publish(prefix, "b", captured[0])
                else:
                    part = json.loads(json.loads(captured[0])["sealed"])
                    skipping = RelaySeal(TokenSigner(SECRET), "a").seal_message({**part, "seq": 3})
                    await publish(prefix, "b", json.dumps(skipping).encode())
                owner.go.set()  # (published after those: B reads them first)
            if again == "replayed":
                assert answer == [(200, b"one;two;three", True)]
                assert b.dropped["a 'body' message of its answer came again"] == 2
            else:
                assert answer == [(200, b"one;", True)]  # ended where the part is missing
        finally:
            await listener.aclose()
            await client.aclose()


async def test_a_drain_that_lets_a_relayed_answer_go_once_it_is_complete_sends_nothing_more() -> None:
    async with two_nodes() as (_, b, _owner, _prefix):
        sent: list[Message] = []

        async def receive() -> Message:
            await anyio.sleep_forever()
            raise AssertionError

        async def send(message: Message) -> None:
            sent.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                b.let_streams_go()  # B drains as the answer's end goes out

        scope = http_scope("POST", "http", "/events", b"", [(b"content-type", b"application/json")])
        with anyio.fail_after(scaled(10)):
            await b.relay("a", scope, receive, send, b"")
        bodies = [m for m in sent if m["type"] == "http.response.body"]
        assert b"".join(m["body"] for m in bodies) == b"id: 1\ndata: a\n\nid: 2\ndata: b\n\n", sent
        assert [m.get("more_body", False) for m in bodies] == [True, False], "a body after the end"
