"""Requests the middleware answers itself are refused for their headers as the stock server
refuses them (issue 20, item 10), end to end on both stores.

The bare stock `MCPServer` and the same app wrapped (`tasks=True`, `resumable_requests=True`)
are sent the same hostile requests - a garbage or repeated `MCP-Protocol-Version`, an
`Accept` without JSON, a 2026-07-28 body without its `_meta` envelope or whose version or
method disagree with the headers, an unsupported revision, a session's request without its
session or with one nobody holds - for every method the middleware answers in the app's
place. The bare app does not know these methods, but it judges the headers before it looks
for the method: the wrapped app must give the same status and JSON-RPC error code.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from mcp_resume_asgi import MemoryStore, Policy, Store, resumable
from mcp_resume_asgi.tasks.record import EXTENSION
from tests.apps.tasks_app import create_app
from tests.support.raw import RawSession
from tests.support.server import serve, serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
BOTH = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
DECLARED = {"extensions": {EXTENSION: {}}}
OWN_METHODS = ("tasks/get", "tasks/update", "tasks/cancel", "requests/resume", "requests/getStatus")


@pytest.fixture(params=["memory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        require_redis()
    return str(request.param)


@contextlib.asynccontextmanager
async def bare_and_wrapped(store_kind: str) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    store: Store
    if store_kind == "memory":
        store = MemoryStore()
    else:
        from mcp_resume_asgi.store import RedisStore

        store = RedisStore(redis_url(), prefix=redis_prefix("test-tasks-headers"))
    wrapped = resumable(
        create_app(),
        policy=Policy(task_after_s=0),
        store=store,
        secret="tasks-headers-tests-secret",
        tasks=True,
        resumable_requests=True,
    )
    try:
        async with (
            serve(create_app()) as bare_info,
            serve_in_loop(wrapped) as wrapped_info,
            httpx.AsyncClient(base_url=bare_info.base_url, timeout=15) as bare,
            httpx.AsyncClient(base_url=wrapped_info.base_url, timeout=15) as client,
        ):
            yield bare, client
    finally:
        if store_kind == "redis":
            await store.clear()  # type: ignore[attr-defined]
            await store.aclose()  # type: ignore[attr-defined]


def body(method: str, *, version: str | None = MODERN, meta: bool = True) -> dict[str, Any]:
    params: dict[str, Any] = {"taskId": "t-1", "inputResponses": {}, "resumeToken": "x", "requestId": 1}
    if meta:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": DECLARED,
        }
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


def cases(method: str, session_id: str) -> list[tuple[str, list[tuple[str, str]], dict[str, Any]]]:
    """(what, headers, body): each breaks one of the transport's rules."""
    routing = [*BOTH.items(), ("mcp-method", method), ("mcp-name", "t-1")]
    legacy_body = body(method, meta=False)
    session = [*BOTH.items(), ("mcp-session-id", session_id)]
    return [
        ("garbage version", [*routing, ("mcp-protocol-version", "garbage")], body(method)),
        ("repeated version", [*routing, ("mcp-protocol-version", MODERN), ("mcp-protocol-version", MODERN)], body(method)),
        ("repeated version, second garbage", [*routing, ("mcp-protocol-version", MODERN), ("mcp-protocol-version", "x")], body(method)),
        ("repeated Mcp-Method", [*routing, ("mcp-method", method), ("mcp-protocol-version", MODERN)], body(method)),
        ("SSE alone accepted", [("accept", "text/event-stream"), ("content-type", "application/json"), ("mcp-method", method), ("mcp-name", "t-1"), ("mcp-protocol-version", MODERN)], body(method)),
        ("no _meta", [*routing, ("mcp-protocol-version", MODERN)], body(method, meta=False)),
        ("_meta says another version", [*routing, ("mcp-protocol-version", MODERN)], body(method, version=LEGACY)),
        ("unsupported version", [*routing, ("mcp-protocol-version", "2099-01-01")], body(method, version="2099-01-01")),
        ("Mcp-Method of another method", [*BOTH.items(), ("mcp-method", "tools/list"), ("mcp-protocol-version", MODERN)], body(method)),
        ("no version, no session", list(BOTH.items()), legacy_body),
        ("session: garbage version", [*session, ("mcp-protocol-version", "garbage")], legacy_body),
        ("session: 2026-07-28 header", [*session, ("mcp-protocol-version", MODERN)], legacy_body),
        ("session: SSE alone accepted", [("accept", "text/event-stream"), ("content-type", "application/json"), ("mcp-session-id", session_id), ("mcp-protocol-version", LEGACY)], legacy_body),
        ("session: none named", [*BOTH.items(), ("mcp-protocol-version", LEGACY)], legacy_body),
        ("session: unknown", [*BOTH.items(), ("mcp-session-id", "no-such-session"), ("mcp-protocol-version", LEGACY)], legacy_body),
    ]  # fmt: skip


def outcome(response: httpx.Response) -> tuple[int, Any]:
    """The status and the JSON-RPC error code (None without one)."""
    try:
        answer = json.loads(response.content)
    except ValueError:
        return response.status_code, None
    error = answer.get("error") if isinstance(answer, dict) else None
    return response.status_code, error.get("code") if isinstance(error, dict) else None


async def test_own_methods_are_refused_for_their_headers_as_the_stock_server_refuses_them(
    store_kind: str,
) -> None:
    async with bare_and_wrapped(store_kind) as (bare, wrapped):
        sessions = {}
        for name, client in (("bare", bare), ("wrapped", wrapped)):
            session = RawSession(client)
            await session.initialize(capabilities={"extensions": {EXTENSION: {}}, "resumableRequests": {}})
            assert session.session_id is not None
            sessions[name] = session.session_id
        differences = []
        for method in OWN_METHODS:
            for (what, headers, payload), (_, wrapped_headers, _) in zip(
                cases(method, sessions["bare"]), cases(method, sessions["wrapped"]), strict=True
            ):
                expected = outcome(await bare.post("/mcp", content=json.dumps(payload), headers=headers))
                assert expected[0] >= 400, (method, what, expected)
                got = outcome(
                    await wrapped.post("/mcp", content=json.dumps(payload), headers=wrapped_headers)
                )
                if got != expected:
                    differences.append(f"{method}, {what}: bare {expected}, wrapped {got}")
        assert not differences, "\n".join(differences)


async def test_a_session_whose_repeated_header_names_its_revision_is_served_as_the_app_serves_it(
    store_kind: str,
) -> None:
    """The session transport reads the first `MCP-Protocol-Version` only (the stock server
    serves a repeated one): the middleware does not refuse what the app would answer."""
    async with bare_and_wrapped(store_kind) as (_, wrapped):
        session = RawSession(wrapped)
        await session.initialize(capabilities={"extensions": {EXTENSION: {}}})
        assert session.session_id is not None
        headers = [*BOTH.items(), ("mcp-session-id", session.session_id)]
        headers += [("mcp-protocol-version", LEGACY)] * 2
        response = await wrapped.post(
            "/mcp", content=json.dumps(body("tasks/get", meta=False)), headers=headers
        )
        assert outcome(response) == (200, -32602), response.text  # "Task not found": served


async def test_errors_the_middleware_answers_have_the_status_of_their_revision(store_kind: str) -> None:
    """A 2026-07-28 server answers -32602 with a 400 (the stock server's table), a session's
    request with a 200: SEP-975's requests as the Tasks layer's."""
    async with bare_and_wrapped(store_kind) as (_, wrapped):
        session = RawSession(wrapped)
        await session.initialize(capabilities={"extensions": {EXTENSION: {}}, "resumableRequests": {}})
        assert session.session_id is not None
        for method in OWN_METHODS:
            headers = [
                *BOTH.items(),
                ("mcp-method", method),
                ("mcp-name", "t-1"),
                ("mcp-protocol-version", MODERN),
            ]
            modern = await wrapped.post("/mcp", content=json.dumps(body(method)), headers=headers)
            assert outcome(modern) == (400, -32602), (method, modern.text)
            headers = [
                *BOTH.items(),
                ("mcp-session-id", session.session_id),
                ("mcp-protocol-version", LEGACY),
            ]
            legacy = await wrapped.post("/mcp", content=json.dumps(body(method, meta=False)), headers=headers)
            assert outcome(legacy) == (200, -32602), (method, legacy.text)
