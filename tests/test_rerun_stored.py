"""A call on a route with `Policy(rerun_on_loss=True)` keeps its request in the store (issue 22, item 2).

What another node needs to run a lost call again (`engine/rerun.py`): the request and its caller,
stored bounded, read back as they were, deleted once the call is answered; and a claim that
one node only takes per loss. On every store (`make`: memory, Redis, Redis Cluster), without
servers; then on a real uvicorn in the test's loop with the Redis store, that the engine
keeps the request of a running call on such a route (and of no other) and forgets it once
the call is answered.
"""

from __future__ import annotations

import dataclasses

import anyio
import pytest
from starlette.authentication import SimpleUser
from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.core import resume
from mcp_resume_asgi.core.orphans import after_loss
from mcp_resume_asgi.core.resume import Resume
from mcp_resume_asgi.engine import rerun
from mcp_resume_asgi.engine.relayed_caller import RelayedCaller, principal_with_relays
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.wire.principal import default_principal
from mcp_resume_asgi.wire.scope_keys import RELAYED_CALLER
from mcp_resume_asgi.wire.tokens import TokenSigner
from tests.apps.probe_app import PROBE, create_app
from tests.support.raw import RawSession
from tests.support.server import serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled
from tests.test_store_contract import Factory, make

pytestmark = pytest.mark.anyio

__all__ = ["make"]  # the fixture, used by name

TTL = 60.0
SIGNER = TokenSigner("rerun-tests-shared-secret")


def a_scope(**extra: object) -> dict[str, object]:
    scope: dict[str, object] = {
        "type": "http",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "query_string": b"x=1",
        "headers": [
            (b"authorization", b"Bearer t0k3n"),
            (b"mcp-session-id", b"sess-1"),
            (b"last-event-id", b"s.sig:3"),
            (b"idempotency-key", b"k-1"),
            (b"connection", b"keep-alive"),
            (b"content-type", b"application/json"),
        ],
    }
    scope.update(extra)
    return scope


def test_a_request_is_captured_with_its_caller_and_without_one_attempts_headers() -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}'
    stored = rerun.capture(a_scope(user=SimpleUser("alice")), body, lambda scope: "alice@issuer")
    assert stored.path == "/mcp" and stored.method == "POST" and stored.query == b"x=1"
    assert stored.body == body and stored.round == 0
    assert stored.headers == [
        (b"authorization", b"Bearer t0k3n"),
        (b"mcp-session-id", b"sess-1"),
        (b"content-type", b"application/json"),
    ]
    assert stored.caller == {"principal": "alice@issuer", "user": {"kind": "simple", "username": "alice"}}
    text = rerun.encode(stored)
    assert text is not None and rerun.decode(text) == stored


def test_the_scope_of_a_rerun_seats_its_caller() -> None:
    stored = rerun.capture(a_scope(user=SimpleUser("alice")), b"{}", lambda scope: "alice@issuer")
    scope = rerun.scope_of(stored)
    assert scope is not None
    assert scope["path"] == "/mcp" and scope["headers"] == stored.headers
    caller = scope[RELAYED_CALLER]
    assert isinstance(caller, RelayedCaller) and caller.principal == "alice@issuer"
    assert isinstance(scope["user"], SimpleUser) and scope["user"].username == "alice"
    # The middleware's view of who calls: the vouched principal, as for a relayed request.
    assert principal_with_relays(default_principal)(scope) == "alice@issuer"
    malformed = rerun.StoredRequest("POST", "/mcp", b"", "http", [], b"", {"principal": 7})
    assert rerun.scope_of(malformed) is None


def test_what_is_not_a_stored_request_decodes_to_none() -> None:
    for text in (
        "",
        "[]",
        "{}",
        '{"m":"POST"}',
        "not json",
        '{"m":1,"p":2,"q":"","s":"","h":[],"b":"","c":{},"r":-1}',
    ):
        assert rerun.decode(text) is None, text


def test_the_marker() -> None:
    assert rerun.marker(1) == {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {
            "level": "warning",
            "logger": "mcp-resume-asgi",
            "data": {"rerun": 1, "reason": "owner-lost"},
        },
    }


async def test_saved_loaded_and_forgotten(make: Factory) -> None:
    store = await make()
    stored = rerun.capture(a_scope(), b'{"jsonrpc":"2.0"}', lambda scope: None)
    assert await rerun.load(store, SIGNER, "s1") is None
    assert await rerun.save(store, SIGNER, "s1", stored, TTL)
    assert await rerun.load(await make(peer=store), SIGNER, "s1") == stored, "another node reads it as it was"
    moved = dataclasses.replace(stored, round=1)
    assert await rerun.save(store, SIGNER, "s1", moved, TTL)
    assert await rerun.load(store, SIGNER, "s1") == moved
    await rerun.forget(store, "s1")
    assert await rerun.load(store, SIGNER, "s1") is None


async def test_a_request_over_the_bound_is_not_kept(make: Factory) -> None:
    store = await make()
    large = rerun.capture(a_scope(), b"x" * rerun.MAX_REQUEST_BYTES, lambda scope: None)
    assert rerun.encode(large) is None
    assert not await rerun.save(store, SIGNER, "s2", large, TTL)
    assert await rerun.load(store, SIGNER, "s2") is None


async def test_one_node_claims_each_loss(make: Factory) -> None:
    store = await make()
    other = await make(peer=store)
    first = [
        await rerun.claim(s, node, "s3", 0, TTL) for s, node in ((store, "a"), (other, "b"), (store, "c"))
    ]
    assert first == [True, False, False]
    assert await store.get_key(keys.rerun_claim("s3", 0)) == "a"
    assert await rerun.claim(other, "b", "s3", 1, TTL), "the next loss is claimed anew"
    await rerun.release(store, "a", "s3", 1)
    assert not await rerun.claim(store, "c", "s3", 1, TTL), "only its holder gives a claim back"
    await rerun.release(other, "b", "s3", 1)
    assert await rerun.claim(store, "c", "s3", 1, TTL), "given back: free for the loss it names"


@pytest.mark.slow
async def test_the_engine_keeps_a_running_calls_request_only_on_a_rerun_route() -> None:
    """On a real server with the Redis store: a running call of a tool on a `rerun_on_loss` route
    has its request in the store until it is answered; a call on another route has none."""
    require_redis()
    from mcp_resume_asgi.store import RedisStore

    store = RedisStore(redis_url(), prefix=redis_prefix("test-rerun"))
    policy = Policy(retry_ms=20, max_wait_s=5.0)
    app = resumable(
        create_app(stateless=True),  # (a 2025 session's calls cannot be run again: none is kept)
        policy=policy,
        routes={"tool:sleep": policy.replace(rerun_on_loss=True)},
        store=store,
        secret="rerun-tests-shared-secret",
    )
    PROBE.clear()
    try:
        async with serve_in_loop(app) as info:
            import httpx

            async with httpx.AsyncClient(base_url=info.base_url, timeout=10) as client:
                s = RawSession(client)
                await s.initialize()
                kept: dict[str, bool] = {}
                for tool, arguments in (
                    ("sleep", {"seconds": 1.0, "notify": True, "tag": "kept"}),
                    ("progress", {"steps": 10, "seconds": 1.0}),
                ):
                    first = await s.exchange(
                        "POST", "/mcp", s.tool_call(tool, arguments, progress=True), stop_after=1, timeout=5
                    )
                    event_id = next(e.id for e in first.events if e.id)
                    stream_id = event_id.split(".", 1)[0]
                    stored = await rerun.load(store, SIGNER, stream_id)
                    kept[tool] = stored is not None
                    if stored is not None:
                        assert stored.path == "/mcp" and b'"sleep"' in stored.body
                        assert not isinstance(stored, rerun.Refused) and s.session_id is None
                        assert dict(stored.headers).get(b"mcp-protocol-version") == b"2025-11-25"
                    with anyio.fail_after(scaled(10)):
                        while (meta := await store.get_stream(stream_id)) is None or meta.final_seq is None:
                            await anyio.sleep(0.05)
                        while await rerun.load(store, SIGNER, stream_id) is not None:
                            await anyio.sleep(0.05)  # forgotten once answered
                assert kept == {"sleep": True, "progress": False}
    finally:
        await store.clear()
        await store.aclose()


async def test_two_nodes_noticing_one_loss_run_the_call_once() -> None:
    """Two engines on one Redis find the same call's node lost at once (`Engine.rerun`): one
    runs it again, the other sees it taken over; the record goes on after the first run's
    events (the marker, then the answer); a node that read the record before, asking later,
    runs nothing (the request is forgotten once answered)."""
    require_redis()
    from mcp_resume_asgi.http.middleware import ResumeMiddleware
    from mcp_resume_asgi.store import RedisStore
    from mcp_resume_asgi.store.base import StreamKind, StreamMeta
    from mcp_resume_asgi.wire import jsonrpc as p
    from mcp_resume_asgi.wire.sse import encode_payload

    ran: list[bytes] = []
    answer = p.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": []}})

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        message = await receive()
        ran.append(message["body"])
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b"event: message\ndata: " + answer + b"\n\n"})

    prefix = redis_prefix("test-rerun")
    stores = [RedisStore(redis_url(), prefix=prefix) for _ in range(2)]
    policy = Policy(rerun_on_loss=True)
    nodes = [
        ResumeMiddleware(app, policy=policy, store=s, secret="rerun-tests-shared-secret") for s in stores
    ]
    store = stores[0]
    try:
        lost = StreamMeta(
            stream_id="s-lost",
            kind=StreamKind.REQUEST,
            session_id=None,
            principal=None,
            protocol_version="2025-11-25",
            path="/mcp",
            request_id=7,
            method="tools/call",
            owner="a-dead-node",
        )
        await store.create_stream(lost, ttl_s=TTL)
        first_run = [(seq, encode_payload(b'{"n":%d}' % seq, b"message")) for seq in (1, 2, 3)]
        await store.append("s-lost", first_run, max_events=100, max_bytes=1 << 20)
        body = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}}'
        stored = rerun.StoredRequest(
            "POST",
            "/mcp",
            b"",
            "http",
            [(b"content-type", b"application/json")],
            body,
            {"principal": None},
            stream=rerun.bound(None, None, 7, "tools/call", -1),
        )
        assert await rerun.save(store, SIGNER, "s-lost", stored, TTL)
        seen = await store.get_stream("s-lost")
        assert seen is not None and seen.last_seq == 3

        said: list[bool] = []

        async def notice(node: ResumeMiddleware) -> None:
            said.append(await node.engine.rerun(seen.copy()))

        async with anyio.create_task_group() as tg:
            for node in nodes:
                tg.start_soon(notice, node)
        assert said == [True, True], "the call goes on: here, or on the node that took it over"
        with anyio.fail_after(scaled(10)):
            while (meta := await store.get_stream("s-lost")) is None or meta.final_seq is None:
                await anyio.sleep(0.02)
        assert ran == [body], "run again once"
        assert meta.owner in {node.engine.node_id for node in nodes}
        events = await store.read("s-lost", 0)
        marker = after_loss(3)  # (past every id the lost node can have handed out)
        assert [seq for seq, _ in events] == [1, 2, 3, marker, marker + 1]
        assert meta.final_seq == marker + 1
        assert events[:3] == first_run, "the first run's events stay as they were"
        assert b'"rerun":1' in events[3][1] and b'"logger":"mcp-resume-asgi"' in events[3][1]
        assert answer in events[4][1]
        # A client holding an id the lost node handed out past its record (4, 5: events its
        # store never kept) is served the re-run from its start, its answer included.
        for held in (3, 4, 5):
            assert resume.answer(meta, held, via_link=False).kind is Resume.SERVE
            assert await store.read("s-lost", held) == events[3:], held
        with anyio.fail_after(scaled(5)):
            while await rerun.load(store, SIGNER, "s-lost") is not None:
                await anyio.sleep(0.02)
        # A node that read the record before the re-run, asking now: nothing runs; its follower
        # reads on (the answer is there), it does not end the call with an error.
        assert await nodes[0].engine.rerun(seen.copy())
        assert ran == [body], "a stale notice runs nothing"
    finally:
        await store.clear()
        for s in stores:
            await s.aclose()


def test_a_core_continues_a_lost_runs_ids() -> None:
    from mcp_resume_asgi.core.stream import IllegalTransition, StreamCore

    core = StreamCore(Policy(), version="2025-11-25", is_request=True, request_id=7)
    core.continue_from(12)
    core.open_ahead()
    recorded = core.record([(b"event: message\ndata: {}\n\n", b"{}")])
    assert recorded is not None and [seq for seq, _ in recorded.batch] == [13]
    with pytest.raises(IllegalTransition):
        core.continue_from(20)  # only before anything is recorded


async def test_a_lost_call_is_not_run_again_without_the_flag_or_its_stored_request() -> None:
    """`Engine.rerun` refuses (the follower then ends the call with today's error): on a route
    without `rerun_on_loss`, and when the stored request is gone (too large, expired)."""
    require_redis()
    from mcp_resume_asgi.http.middleware import ResumeMiddleware
    from mcp_resume_asgi.store import RedisStore
    from mcp_resume_asgi.store.base import StreamKind, StreamMeta

    ran: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        ran.append(scope)

    store = RedisStore(redis_url(), prefix=redis_prefix("test-rerun"))
    node = ResumeMiddleware(
        app,
        policy=Policy(),
        routes={"tool:again": Policy(rerun_on_loss=True)},
        store=store,
        secret="rerun-tests-shared-secret",
    )
    stored = rerun.StoredRequest("POST", "/mcp", b"", "http", [], b"{}", {"principal": None})
    try:
        for stream_id, route, keep in (("s-no-flag", -1, True), ("s-not-kept", 0, False)):
            meta = StreamMeta(
                stream_id=stream_id,
                kind=StreamKind.REQUEST,
                session_id=None,
                principal=None,
                protocol_version="2025-11-25",
                path="/mcp",
                request_id=7,
                method="tools/call",
                owner="a-dead-node",
                route=route,
            )
            await store.create_stream(meta, ttl_s=TTL)
            if keep:
                assert await rerun.save(store, SIGNER, stream_id, stored, TTL)
            assert not await node.engine.rerun(meta.copy()), stream_id
            after = await store.get_stream(stream_id)
            assert after is not None and after.owner == "a-dead-node", "left as it was"
        assert ran == []
    finally:
        await store.clear()
        await store.aclose()
