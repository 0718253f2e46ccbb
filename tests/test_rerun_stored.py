"""A call on a route with `Policy(rerun_on_loss=True)` keeps its request in the store (issue 22, item 2).

What another node needs to run a lost call again (`engine/rerun.py`): the request and its caller,
stored bounded, read back as they were, deleted once the call is answered; and a claim that
one node only takes per loss. On every store (`make`: memory, Redis, Redis Cluster), without
servers; then on a real uvicorn in the test's loop with the Redis store, that the engine
keeps the request of a running call on such a route (and of no other) and forgets it once
the call is answered.
"""

from __future__ import annotations

import anyio
import pytest
from starlette.authentication import SimpleUser

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.engine import rerun
from mcp_resume_asgi.engine.relayed_caller import RelayedCaller, principal_with_relays
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.wire.principal import default_principal
from mcp_resume_asgi.wire.scope_keys import RELAYED_CALLER
from tests.apps.probe_app import PROBE, create_app
from tests.support.raw import RawSession
from tests.support.server import serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled
from tests.test_store_contract import Factory, make

pytestmark = pytest.mark.anyio

__all__ = ["make"]  # the fixture, used by name

TTL = 60.0


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
    assert await rerun.load(store, "s1") is None
    assert await rerun.save(store, "s1", stored, TTL)
    assert await rerun.load(await make(peer=store), "s1") == stored, "another node reads it as it was"
    moved = rerun.StoredRequest(**{**_fields(stored), "round": 1})
    assert await rerun.save(store, "s1", moved, TTL)
    assert await rerun.load(store, "s1") == moved
    await rerun.forget(store, "s1")
    assert await rerun.load(store, "s1") is None


async def test_a_request_over_the_bound_is_not_kept(make: Factory) -> None:
    store = await make()
    large = rerun.capture(a_scope(), b"x" * rerun.MAX_REQUEST_BYTES, lambda scope: None)
    assert rerun.encode(large) is None
    assert not await rerun.save(store, "s2", large, TTL)
    assert await rerun.load(store, "s2") is None


async def test_one_node_claims_each_loss(make: Factory) -> None:
    store = await make()
    other = await make(peer=store)
    first = [
        await rerun.claim(s, node, "s3", 0, TTL) for s, node in ((store, "a"), (other, "b"), (store, "c"))
    ]
    assert first == [True, False, False]
    assert await store.get_key(keys.rerun_claim("s3", 0)) == "a"
    assert await rerun.claim(other, "b", "s3", 1, TTL), "the next loss is claimed anew"


def _fields(stored: rerun.StoredRequest) -> dict[str, object]:
    return {name: getattr(stored, name) for name in rerun.StoredRequest.__dataclass_fields__}


@pytest.mark.slow
async def test_the_engine_keeps_a_running_calls_request_only_on_a_rerun_route() -> None:
    """On a real server with the Redis store: a running call of a tool on a `rerun_on_loss` route
    has its request in the store until it is answered; a call on another route has none."""
    require_redis()
    from mcp_resume_asgi.store import RedisStore

    store = RedisStore(redis_url(), prefix=redis_prefix("test-rerun"))
    policy = Policy(retry_ms=20, max_wait_s=5.0)
    app = resumable(
        create_app(),
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
                    stored = await rerun.load(store, stream_id)
                    kept[tool] = stored is not None
                    if stored is not None:
                        assert stored.path == "/mcp" and b'"sleep"' in stored.body
                        assert dict(stored.headers).get(b"mcp-session-id") == s.session_id.encode()
                    with anyio.fail_after(scaled(10)):
                        while (meta := await store.get_stream(stream_id)) is None or meta.final_seq is None:
                            await anyio.sleep(0.05)
                        while await rerun.load(store, stream_id) is not None:
                            await anyio.sleep(0.05)  # forgotten once answered
                assert kept == {"sleep": True, "progress": False}
    finally:
        await store.clear()
        await store.aclose()
