"""With an `encryption_key`, nothing secret is readable in Redis or on its pub/sub.

Two nodes (real uvicorns in the test's loop) on the suite's Redis, one secret and one encryption
key: a session opened on node A, a stateless call of a `rerun_on_loss` tool run on A (its request
kept in the store while it runs, for a re-run), and a call of the session sent to node B, relayed
to A over pub/sub and its answer relayed back. A raw Redis client subscribed to every channel of
the test's prefix, and a dump of every key under it (strings, hashes, streams) while the kept
call runs and after both calls: the bearer token, the cookie and the tool's result text appear
nowhere; the clients got their answers. Without the key the same dump shows them (what the test
guards against). Then a store with another key reads nothing (values absent, events as SSE
comments) and a message published with another key is dropped by the node, each said in the log.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.encrypted import UNREADABLE_EVENT, EncryptedStore
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.store_cipher import StoreCipher
from tests.support.server import serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # (`serve_in_loop` serves on asyncio)


SECRET = "encryption-tests-shared-secret"
KEY = "encryption-tests-store-key-0123"
TOKEN = "Bearer tok-9f8e7d6c5b4a"
COOKIE = "sid=cookie-1a2b3c4d5e"
RESULT = "result-text-7q6w5e4r3t"
SECRETS = (TOKEN.encode(), COOKIE.encode(), RESULT.encode(), b"9f8e7d6c5b4a", b"1a2b3c4d5e")


class SessionApp:
    """A tiny stateful MCP app: `initialize` opens session `sess-1`; `tools/call` answers with
    `RESULT` over SSE after one notification, holding its answer until `release` when asked to."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.held = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        message = json.loads((await receive())["body"])
        if message.get("method") == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "enc", "version": "1"},
            }
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": result}
            headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", b"sess-1")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": _event(answer)})
            return
        if "id" not in message:
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": RESULT},
        }
        await send({"type": "http.response.body", "body": _event(note), "more_body": True})
        if message["params"]["arguments"].get("hold"):
            self.held.set()
            await self.release.wait()
        answer = {
            "jsonrpc": "2.0",
            "id": message["id"],
            "result": {"content": [{"type": "text", "text": RESULT}]},
        }
        await send({"type": "http.response.body", "body": _event(answer), "more_body": False})


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + p.dumps(message) + b"\n\n"


def headers(session: str | None = None) -> dict[str, str]:
    out = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2025-11-25",
        "authorization": TOKEN,
        "cookie": COOKIE,
    }
    if session is not None:
        out["mcp-session-id"] = session
    return out


def call(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "t", "arguments": arguments},
    }


async def dump(raw: Any, prefix: str) -> list[bytes]:
    """Every value Redis holds under `prefix`: strings, hash fields and values, stream entries."""
    found: list[bytes] = []
    async for key in raw.scan_iter(match=f"*{prefix}*"):
        kind = await raw.type(key)
        if kind == b"string":
            found.append(await raw.get(key) or b"")
        elif kind == b"hash":
            for field, value in (await raw.hgetall(key)).items():
                found += [field, value]
        elif kind == b"stream":
            for _, fields in await raw.xrange(key):
                found += [*fields.keys(), *fields.values()]
        elif kind == b"zset":
            found += [member for member, _ in await raw.zrange(key, 0, -1, withscores=True)]
        elif kind == b"set":
            found += list(await raw.smembers(key))
    return found


_BASE64 = re.compile(rb"[A-Za-z0-9+/_-]{8,}={0,2}")


def readable(value: bytes) -> bytes:
    """`value`, and what each base64 run in it decodes to (stored requests and relays carry
    headers and bodies in base64: encoded, not hidden)."""
    decoded = [value]
    for run in _BASE64.findall(value):
        for decode in (base64.b64decode, base64.urlsafe_b64decode):
            with contextlib.suppress(ValueError, binascii.Error):
                decoded.append(decode(run + b"=" * (-len(run) % 4)))
    return b"\n".join(decoded)


def leaked(values: list[bytes]) -> list[bytes]:
    return [value for value in values if any(secret in readable(value) for secret in SECRETS)]


@contextlib.asynccontextmanager
async def cluster(prefix: str, key: str | None) -> AsyncIterator[tuple[str, str, SessionApp, list[Any]]]:
    """Nodes A and B (their URLs), A's app, and the nodes' stores."""
    from mcp_resume_asgi.store import RedisStore

    app = SessionApp()
    stores = [RedisStore(redis_url(), prefix=prefix) for _ in range(2)]
    policy = Policy(retry_ms=20)
    options: dict[str, Any] = {"node_timeout_s": 5.0} | ({"encryption_key": key} if key is not None else {})
    routes = {"tool:t": policy.replace(rerun_on_loss=True)}
    node_a = resumable(app, policy=policy, routes=routes, store=stores[0], secret=SECRET, **options)
    node_b = resumable(SessionApp(), policy=policy, routes=routes, store=stores[1], secret=SECRET, **options)
    try:
        async with serve_in_loop(node_a) as a, serve_in_loop(node_b) as b:
            yield a.base_url, b.base_url, app, stores
    finally:
        app.release.set()
        await stores[0].clear()
        for store in stores:
            await store.aclose()


async def run_calls(prefix: str, key: str | None) -> tuple[list[bytes], list[bytes], list[bytes], str]:
    """The calls; returns what Redis held while the kept call ran, after, what pub/sub carried,
    and the relayed call's answer as its client read it."""
    import redis.asyncio as aioredis

    raw = aioredis.Redis.from_url(redis_url())
    carried: list[bytes] = []
    pubsub = raw.pubsub()
    await pubsub.psubscribe(f"{prefix}*")

    async def listen() -> None:
        async for message in pubsub.listen():
            if message["type"] == "pmessage":
                carried.append(message["data"])

    try:
        async with cluster(prefix, key) as (url_a, url_b, app, _), anyio.create_task_group() as tg:
            tg.start_soon(listen)
            async with httpx.AsyncClient(timeout=10) as client:
                opened = await client.post(
                    f"{url_a}/mcp",
                    json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                    headers=headers(),
                )
                assert opened.status_code == 200 and opened.headers["mcp-session-id"] == "sess-1"
                # A stateless call held on A: its request is kept for a re-run while it runs.
                async with client.stream(
                    "POST", f"{url_a}/mcp", json=call({"hold": True}), headers=headers()
                ) as held:
                    assert held.status_code == 200
                    with anyio.fail_after(scaled(10)):
                        await app.held.wait()
                        while not [k async for k in raw.scan_iter(match=f"*{prefix}*rerun-request:*")]:
                            await anyio.sleep(0.02)
                    during = await dump(raw, prefix)
                    app.release.set()
                    text = (await held.aread()).decode()
                assert RESULT in text, "the held call's client got its answer"
                # The session's call through B: relayed to A over pub/sub, answered back.
                relayed = await client.post(f"{url_b}/mcp", json=call({}), headers=headers("sess-1"))
                assert relayed.status_code == 200
            after = await dump(raw, prefix)
            with anyio.fail_after(scaled(5)):
                while not carried:
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
    finally:
        await pubsub.aclose()
        await raw.aclose()
    return during, after, carried, relayed.text


async def test_without_a_key_the_store_and_pub_sub_carry_secrets_in_the_clear() -> None:
    """What the key is for: without it, the token, cookie and result are readable."""
    require_redis()
    during, after, carried, answer = await run_calls(redis_prefix("test-enc-clear"), None)
    assert RESULT in answer
    assert leaked(during) and leaked(after) and leaked(carried)


async def test_with_a_key_nothing_secret_is_readable_in_redis_nor_on_pub_sub() -> None:
    require_redis()
    during, after, carried, answer = await run_calls(redis_prefix("test-enc"), KEY)
    assert RESULT in answer, "the relayed call's client got its answer, decrypted"
    assert during and after and carried, "there was something to read"
    assert leaked(during) == [], "while the kept call ran (its request in the store)"
    assert leaked(after) == []
    assert leaked(carried) == [], "relayed requests and answers on the channels"


async def test_another_key_reads_nothing_and_its_messages_are_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    require_redis()
    from mcp_resume_asgi.store import RedisStore

    prefix = redis_prefix("test-enc-wrong")
    caplog.set_level(logging.WARNING, logger="mcp_resume_asgi")
    ours = EncryptedStore(RedisStore(redis_url(), prefix=prefix), StoreCipher(KEY))
    theirs = EncryptedStore(RedisStore(redis_url(), prefix=prefix), StoreCipher("another-key-0123456789"))
    clear = RedisStore(redis_url(), prefix=prefix)
    try:
        from mcp_resume_asgi.store.base import StreamKind, StreamMeta

        meta = StreamMeta(
            stream_id="s1",
            kind=StreamKind.REQUEST,
            session_id=None,
            principal=None,
            protocol_version="2025-11-25",
            path="/mcp",
        )
        await ours.create_stream(meta, ttl_s=60)
        await ours.append("s1", [(1, _event({"x": RESULT}))], max_events=10, max_bytes=1 << 20)
        await ours.set_key(keys.rerun_request("s1"), TOKEN, 60)
        assert await ours.get_key(keys.rerun_request("s1")) == TOKEN
        assert await ours.read("s1", 0) == [(1, _event({"x": RESULT}))]
        # Another key: refused, not misread.
        assert await theirs.get_key(keys.rerun_request("s1")) is None
        assert await theirs.read("s1", 0) == [(1, UNREADABLE_EVENT)]
        # Written in the clear (by whoever can write to Redis): refused as well.
        await clear.set_key(keys.rerun_request("s2"), TOKEN, 60)
        assert await ours.get_key(keys.rerun_request("s2")) is None
        # Moved to another key: does not open there.
        await clear.set_key(keys.rerun_request("s3"), await clear.get_key(keys.rerun_request("s1")) or "", 60)
        assert await ours.get_key(keys.rerun_request("s3")) is None
        # A message published with another key (or in the clear) is dropped by a subscriber.
        received: list[bytes] = []
        async with ours.subscribe("node:x") as inbox:

            async def read() -> None:
                async for message in inbox:
                    received.append(message)

            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await anyio.sleep(0.1)
                await theirs.publish("node:x", b'{"t":"req","id":"forged"}')
                await clear.publish("node:x", b'{"t":"req","id":"clear"}')
                await ours.publish("node:x", b'{"t":"req","id":"ours"}')
                with anyio.fail_after(scaled(5)):
                    while not received:
                        await anyio.sleep(0.02)
                tg.cancel_scope.cancel()
        assert received == [b'{"t":"req","id":"ours"}']
        said = [r.getMessage() for r in caplog.records if "does not open" in r.getMessage()]
        assert any("a key's value" in m for m in said) and any("an event" in m for m in said)
        assert any("a message on channel" in m for m in said)
    finally:
        await clear.clear()
        for store in (ours, theirs, clear):
            await store.aclose()


def test_the_cipher_is_deterministic_bound_to_its_context_and_key() -> None:
    cipher = StoreCipher(KEY)
    sealed = cipher.encrypt(b"ctx", b"data")
    assert sealed == cipher.encrypt(b"ctx", b"data") and b"data" not in sealed
    assert cipher.decrypt(b"ctx", sealed) == b"data"
    assert cipher.decrypt(b"other", sealed) is None
    assert StoreCipher("another-key-0123456789").decrypt(b"ctx", sealed) is None
    assert cipher.decrypt(b"ctx", b"data") is None and cipher.decrypt(b"ctx", sealed[:-1]) is None
    with pytest.raises(ValueError):
        StoreCipher("short")
