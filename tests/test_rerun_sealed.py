"""A stored re-run request is sealed: one forged or altered in the store is never run.

Whoever can write to the shared Redis can rewrite `rerun-request:<stream>` (`SET ... KEEPTTL`)
to another caller and tool, then delete the owner's heartbeat key so that the call looks lost.
On a real Redis, with two nodes (`ResumeMiddleware` engines) of one secret: a stream of alice's
whose stored request is rewritten in the clear, replaced by another stream's sealed request,
or whose record is rewritten to name another principal is refused (logged, with why), and the
app runs nothing; the same request left as it was is run again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import anyio
import pytest
from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import Policy
from mcp_resume_asgi.engine import rerun
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import StreamKind, StreamMeta
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.sse import encode_payload
from mcp_resume_asgi.wire.tokens import TokenSigner
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

SECRET = "rerun-seal-tests-shared-secret"
TTL = 60.0
ALICE_BODY = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"mine"}}'
FORGED_BODY = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"forged"}}'


def meta_of(stream_id: str, principal: str | None = "alice") -> StreamMeta:
    return StreamMeta(
        stream_id=stream_id,
        kind=StreamKind.REQUEST,
        session_id=None,
        principal=principal,
        protocol_version="2025-11-25",
        path="/mcp",
        request_id=7,
        method="tools/call",
        owner="a-dead-node",
    )


def alices_request() -> rerun.StoredRequest:
    return rerun.StoredRequest(
        "POST",
        "/mcp",
        b"",
        "http",
        [(b"content-type", b"application/json"), (b"authorization", b"Bearer alice-token")],
        ALICE_BODY,
        {"principal": "alice"},
        stream=rerun.bound("alice", None, 7, "tools/call", -1),
    )


@pytest.fixture
async def node() -> AsyncIterator[tuple[object, list[bytes], object]]:
    """A node on the suite's Redis (its engine, what its app ran) and a raw Redis client."""
    require_redis()
    import redis.asyncio as aioredis

    from mcp_resume_asgi.http.middleware import ResumeMiddleware
    from mcp_resume_asgi.store import RedisStore

    ran: list[bytes] = []
    answer = p.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": []}})

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        ran.append(message["body"])
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"event: message\ndata: " + answer + b"\n\n"})

    store = RedisStore(redis_url(), prefix=redis_prefix("test-rerun-seal"))
    middleware = ResumeMiddleware(app, policy=Policy(rerun_on_loss=True), store=store, secret=SECRET)
    raw = aioredis.Redis.from_url(redis_url())
    try:
        yield middleware, ran, raw
    finally:
        await raw.aclose()
        await store.clear()
        await store.aclose()


async def redis_key(raw: object, part: str) -> bytes:
    """The one Redis key whose name holds `part` (under the test's prefix)."""
    found = [key async for key in raw.scan_iter(match=f"*{part}*")]  # type: ignore[attr-defined]
    assert len(found) == 1, found
    return found[0]


async def lost_call(node: object, stream_id: str) -> StreamMeta:
    """Alice's call on a lost node, its request kept sealed as the engine keeps it."""
    store = node.store  # type: ignore[attr-defined]
    await store.create_stream(meta_of(stream_id), ttl_s=TTL)
    await store.append(
        stream_id, [(1, encode_payload(b'{"n":1}', b"message"))], max_events=100, max_bytes=1 << 20
    )
    assert await rerun.save(store, TokenSigner(SECRET), stream_id, alices_request(), TTL)
    meta = await store.get_stream(stream_id)
    assert meta is not None
    return meta


async def test_a_stored_request_rewritten_in_the_clear_is_not_run(
    node: tuple[object, list[bytes], object], caplog: pytest.LogCaptureFixture
) -> None:
    middleware, ran, raw = node
    meta = await lost_call(middleware, "s-forged")
    forged = rerun.encode(
        rerun.StoredRequest(
            "POST",
            "/mcp",
            b"",
            "http",
            [(b"content-type", b"application/json")],
            FORGED_BODY,
            {"principal": "alice"},
            stream=rerun.bound("alice", None, 7, "tools/call", -1),
        )
    )
    assert forged is not None
    key = await redis_key(raw, keys.rerun_request("s-forged"))
    await raw.set(key, forged, keepttl=True)  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="mcp_resume_asgi.engine.engine"):
        assert not await middleware.engine.rerun(meta)  # type: ignore[attr-defined]
    await anyio.sleep(0.1)
    assert ran == [], "the forged tool did not run"
    assert "stored request is refused (it is not sealed)" in caplog.text


async def test_a_sealed_request_is_not_run_on_another_stream(
    node: tuple[object, list[bytes], object], caplog: pytest.LogCaptureFixture
) -> None:
    middleware, ran, raw = node
    meta = await lost_call(middleware, "s-target")
    other = rerun.StoredRequest(
        "POST", "/mcp", b"", "http", [], FORGED_BODY, {"principal": "alice"}, stream=alices_request().stream
    )
    store = middleware.store  # type: ignore[attr-defined]
    assert await rerun.save(store, TokenSigner(SECRET), "s-elsewhere", other, TTL)
    moved = await raw.get(await redis_key(raw, keys.rerun_request("s-elsewhere")))  # type: ignore[attr-defined]
    await raw.set(await redis_key(raw, keys.rerun_request("s-target")), moved, keepttl=True)  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="mcp_resume_asgi.engine.engine"):
        assert not await middleware.engine.rerun(meta)  # type: ignore[attr-defined]
    await anyio.sleep(0.1)
    assert ran == []
    assert "its seal does not match" in caplog.text


async def test_a_record_rewritten_to_name_another_principal_is_not_run(
    node: tuple[object, list[bytes], object], caplog: pytest.LogCaptureFixture
) -> None:
    middleware, ran, raw = node
    await lost_call(middleware, "s-record")
    hashes = [
        key
        async for key in raw.scan_iter(match="*s-record*")  # type: ignore[attr-defined]
        if await raw.type(key) == b"hash" and await raw.hexists(key, "principal")  # type: ignore[attr-defined]
    ]
    assert len(hashes) == 1, hashes
    stream_key = hashes[0]
    await raw.hset(stream_key, "principal", json.dumps("bob"))  # type: ignore[attr-defined]
    meta = await middleware.store.get_stream("s-record")  # type: ignore[attr-defined]
    assert meta is not None and meta.principal == "bob"
    with caplog.at_level(logging.WARNING, logger="mcp_resume_asgi.engine.engine"):
        assert not await middleware.engine.rerun(meta)  # type: ignore[attr-defined]
    await anyio.sleep(0.1)
    assert ran == []
    assert "its record does not name the caller" in caplog.text


async def test_the_same_request_left_as_it_was_is_run_again(node: tuple[object, list[bytes], object]) -> None:
    middleware, ran, _ = node
    meta = await lost_call(middleware, "s-intact")
    assert await middleware.engine.rerun(meta)  # type: ignore[attr-defined]
    with anyio.fail_after(scaled(10)):
        while not ran:
            await anyio.sleep(0.02)
    assert ran == [ALICE_BODY]


def test_a_seal_opens_only_with_its_secret_and_stream() -> None:
    request = alices_request()
    sealed = rerun.seal(TokenSigner(SECRET), "s1", request)
    assert sealed is not None
    assert rerun.open_sealed(TokenSigner(SECRET), "s1", sealed) == request
    for signer, stream_id in ((TokenSigner("another-secret-of-16+"), "s1"), (TokenSigner(SECRET), "s2")):
        opened = rerun.open_sealed(signer, stream_id, sealed)
        assert isinstance(opened, rerun.Refused) and "seal does not match" in opened.why
    for text in ("", "[]", "{}", '{"sealed":"{}","seal":"x"}', "[" * 100_000):
        assert isinstance(rerun.open_sealed(TokenSigner(SECRET), "s1", text), rerun.Refused), text
