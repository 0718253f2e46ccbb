"""Regression tests for the defects found by trying the middleware as users and attackers would.

Each compares the wrapped app with the bare one where the bare app sets the bar:
the app's refusals reach the client as the app's own statuses, hostile JSON gets
the app's own 400 (never a 500 from us), and a store outage degrades to service
without resumability instead of failing new clients.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import MemoryStore, Policy, resumable
from tests.apps.mcpserver_app import create_app
from tests.support.raw import ACCEPT_BOTH, RawSession, Reply
from tests.support.redis_server import own_redis
from tests.support.server import HOST, serve
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

POLICY = Policy(retry_ms=20, max_wait_s=10, soft_deadline_s=0.3)
SECRET = "defects-test-secret"


@contextlib.asynccontextmanager
async def servers(
    policy: Policy = POLICY, **options: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """(bare, wrapped) clients of the same app, side by side."""
    options.setdefault("store", MemoryStore())
    wrapped_app = resumable(
        create_app(), policy=policy, resumable_requests=True, resume_tokens=True, **options
    )
    async with (
        serve(create_app()) as bare_info,
        serve(wrapped_app) as info,
        httpx.AsyncClient(base_url=bare_info.base_url, timeout=15) as bare,
        httpx.AsyncClient(base_url=info.base_url, timeout=15) as wrapped,
    ):
        yield bare, wrapped


async def post_raw(session: RawSession, body: bytes, **headers: str) -> httpx.Response:
    return await session.client.post("/mcp", content=body, headers=session.headers(**headers))


# ---------------------------------------------------------------- the app's statuses pass through
@pytest.mark.parametrize("how", ["idempotency-key", "resumable-requests"])
async def test_the_apps_404_and_400_reach_the_client_as_such(how: str) -> None:
    """A stream opened before the app answers must not turn the app's refusal into a 200."""
    async with servers() as (bare, wrapped):
        for client in (bare, wrapped):
            s = RawSession(client)
            await s.initialize()
            call = s.tool_call("echo", {"text": "hi"})
            headers: dict[str, str] = {}
            if how == "idempotency-key":
                headers["idempotency_key"] = f"k-{uuid.uuid4().hex}"
            else:
                meta = {"io.modelcontextprotocol/clientCapabilities": {"resumableRequests": {}}}
                call["params"]["_meta"] = meta
            # An unknown session: the SDK answers 404 "Session not found".
            s.session_id = "no-such-session"
            reply = await s.exchange("POST", "/mcp", call, headers=s.headers(**headers))
            assert reply.status == 404, (client is wrapped, reply.status, reply.raw, reply.messages())
            # No session at all on a tools/call: the SDK answers 400.
            s.session_id = None
            reply = await s.exchange("POST", "/mcp", call, headers=s.headers(**headers))
            assert reply.status == 400, (client is wrapped, reply.status, reply.raw, reply.messages())


async def test_a_refused_request_does_not_spend_its_idempotency_key() -> None:
    async with servers() as (_, wrapped):
        s = RawSession(wrapped)
        await s.initialize()
        good = s.session_id
        call = s.tool_call("echo", {"text": "hi"})
        key = {"idempotency_key": f"k-{uuid.uuid4().hex}"}
        s.session_id = "no-such-session"
        assert (await s.exchange("POST", "/mcp", call, headers=s.headers(**key))).status == 404
        s.session_id = good
        reply = await s.exchange("POST", "/mcp", call, headers=s.headers(**key))
        assert reply.status == 200 and reply.messages()[-1]["result"]["content"][0]["text"] == "hi"


# ---------------------------------------------------------------- hostile JSON: the app's 400, never our 500
LONE = '"\\ud800"'


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "case",
    ["request-id", "progress-token", "deep-arguments", "reissue-params", "reissue-id", "reissue-progress"],
)
async def test_hostile_json_gets_the_apps_answer(case: str) -> None:
    async with servers() as (bare, wrapped):
        statuses = []
        for client in (bare, wrapped):
            s = RawSession(client)
            await s.initialize({"resumableRequests": {}, "experimental": {"resumeTokens": {}}})
            token = "none"
            if case.startswith("reissue"):
                # A real interim token from the wrapped server (the bare one never issues any).
                call = s.tool_call("slow_progress", {"seconds": 1, "steps": 2})
                if client is wrapped:
                    reply = await s.exchange("POST", "/mcp", call)
                    token = reply.messages()[-1]["result"]["_meta"]["nextResumeToken"]
            request_id, arguments, progress = f"{s.next_id()}", '{"seconds":1,"steps":2}', '"p"'
            if case == "request-id" or case == "reissue-id":
                request_id = LONE
            elif case == "progress-token" or case == "reissue-progress":
                progress = LONE
            elif case == "deep-arguments":
                arguments = '{"x":' + deep(960) + "}"
            elif case == "reissue-params":
                arguments = '{"seconds":1,"steps":2,"x":' + LONE + "}"
            meta = f'{{"progressToken":{progress},"resumeToken":"{token}"}}'
            body = (
                f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
                f'"params":{{"name":"slow_progress","arguments":{arguments},"_meta":{meta}}}}}'
            )
            response = await post_raw(s, body.encode())
            statuses.append(response.status_code)
            assert response.status_code < 500, (client is wrapped, response.status_code, response.text)
        assert statuses[1] == statuses[0], f"bare {statuses[0]}, wrapped {statuses[1]}"


async def test_hostile_answers_on_the_link_url_are_a_400() -> None:
    async with servers() as (_, wrapped):
        s = RawSession(wrapped)
        await s.initialize()
        # The elicitation's request ends the first connection (SEP-1335): answers go to the Link URL.
        first = await s.exchange("POST", "/mcp", s.tool_call("ask_name"))
        asked = [m for m in first.messages() if m.get("method") == "elicitation/create"]
        assert first.link and asked, first.messages()
        issued = json.dumps(asked[0]["id"])
        for body in (
            f'[{{"jsonrpc":"2.0","id":{issued},"result":{{"action":"accept","content":{{"name":{LONE}}}}}}}]',
            f'[{{"jsonrpc":"2.0","id":{issued},"result":{{"x":{deep(960)}}}}}]',
        ):
            response = await wrapped.post(first.link, content=body.encode(), headers=s.headers())
            assert response.status_code == 400, response.text
        # The stream is intact: a well-formed answer still completes the call.
        answer = [
            {
                "jsonrpc": "2.0",
                "id": asked[0]["id"],
                "result": {"action": "accept", "content": {"name": "ok"}},
            }
        ]
        reply = await s.exchange("POST", first.link, answer)
        assert reply.status == 200 and reply.messages()[-1]["result"]["content"][0]["text"] == "hello ok"


# ---------------------------------------------------------------- the standalone GET stream
async def test_someone_elses_get_stream_is_refused_and_leaves_the_owners_alone() -> None:
    from tests.apps.auth_app import create_app as create_auth_app

    app = resumable(create_auth_app(), policy=POLICY, store=MemoryStore())
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        alice = RawSession(client)
        alice_auth = {"authorization": "Bearer token-alice"}
        reply = await client.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "a", "version": "0"},
                },
            },
            headers={"accept": ACCEPT_BOTH, "content-type": "application/json", **alice_auth},
        )
        alice.session_id = reply.headers["mcp-session-id"]
        await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**alice.headers(), **alice_auth},
        )

        async def open_get(headers: dict[str, str]) -> Reply:
            return await alice.exchange(
                "GET", "/mcp", headers={**alice.headers(), **headers}, stop_after=0, timeout=3
            )

        # Alice's GET stream is open (read its head, then drop the connection: it stays running).
        async with alice.open("GET", "/mcp", headers={**alice.headers(), **alice_auth}) as (response, _):
            assert response.status_code == 200
        for _ in range(3):
            for intruder in ({"authorization": "Bearer token-bob"}, {}):
                async with alice.open("GET", "/mcp", headers={**alice.headers(), **intruder}) as (
                    response,
                    _,
                ):
                    assert response.status_code in (401, 404), response.status_code
        # The owner comes back at once and is served (before the fix: 409 for max_wait_s).
        with anyio.fail_after(scaled(3)):
            async with alice.open("GET", "/mcp", headers={**alice.headers(), **alice_auth}) as (response, _):
                assert response.status_code == 200
        del open_get


# ---------------------------------------------------------------- Redis down: service without resumability
async def initialize_and_call(client: httpx.AsyncClient) -> tuple[Reply, Reply]:
    s = RawSession(client)
    init = await s.initialize()
    reply = await s.exchange("POST", "/mcp", s.tool_call("echo", {"text": "still here"}))
    return init, reply


@pytest.mark.parametrize("how", ["never-up", "killed"])
async def test_new_clients_connect_while_redis_is_down(how: str, caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("redis")
    from mcp_resume_asgi.store.redis import RedisStore

    with own_redis() as redis_server:
        url = redis_server.url
        store = RedisStore(url, prefix=f"defects:{uuid.uuid4().hex}:")
        if how == "never-up":
            store = RedisStore(f"redis://{HOST}:1/0", prefix="defects:")
        app = resumable(create_app(), policy=POLICY, store=store, secret=SECRET)
        async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
            if how == "killed":
                init, reply = await initialize_and_call(client)
                assert init.status == 200 and reply.headers.get("mcp-resume") is None
                await anyio.run_process(["redis-cli", "-u", url, "shutdown", "nosave"], check=False)
                await anyio.sleep(0.2)
            for round_ in range(3):
                if round_ == 2:
                    await anyio.sleep(2.2)  # the middleware tries the store again: it fails again
                init, reply = await initialize_and_call(client)
                assert init.status == 200, (init.status, init.raw)
                assert init.headers.get("mcp-resume") == "unavailable"
                assert reply.status == 200, (reply.status, reply.raw)
                assert reply.messages()[-1]["result"]["content"][0]["text"] == "still here"
        # The outage is logged once, with its cause, however many requests meet it.
        errors = [
            r.getMessage()
            for r in caplog.records
            if r.name == "mcp_resume_asgi.store.health"
            and r.levelno >= logging.ERROR
            and "the store" in r.getMessage()
        ]
        assert len(errors) == 1 and "ConnectionError" in errors[0], errors


# ---------------------------------------------------------------- minor agreements
async def test_duplicated_last_event_id_is_a_400_on_the_link_url_too() -> None:
    async with servers() as (_, wrapped):
        s = RawSession(wrapped)
        await s.initialize()
        first = await s.exchange(
            "POST", "/mcp", s.tool_call("slow_progress", {"seconds": 1, "steps": 4}), stop_after=1
        )
        assert first.link and first.last_id
        headers = list(s.headers().items()) + [("last-event-id", first.last_id)] * 2
        for url in ("/mcp", first.link):
            response = await wrapped.get(url, headers=headers)
            assert response.status_code == 400, (url, response.status_code)


async def test_idempotency_key_answers() -> None:
    async with servers() as (_, wrapped):
        s = RawSession(wrapped)
        await s.initialize()
        key = {"idempotency_key": f"k-{uuid.uuid4().hex}"}
        call = s.tool_call("echo", {"text": "one"})
        assert (await s.exchange("POST", "/mcp", call, headers=s.headers(**key))).status == 200
        other = s.tool_call("echo", {"text": "two"})
        # The stream is retained (retain_completed_s): another body is a 422 while it lives.
        reply = await s.exchange("POST", "/mcp", other, headers=s.headers(**key))
        assert reply.status == 422, reply.raw
        assert json.loads(reply.raw)["error"]["message"]


async def test_a_key_reused_with_another_body_after_its_stream_is_gone_is_a_409() -> None:
    async with servers(Policy(retry_ms=20, max_wait_s=10, retain_completed_s=0)) as (_, wrapped):
        s = RawSession(wrapped)
        await s.initialize()
        key = {"idempotency_key": f"k-{uuid.uuid4().hex}"}
        assert (
            await s.exchange("POST", "/mcp", s.tool_call("echo", {"text": "1"}), headers=s.headers(**key))
        ).status == 200
        await anyio.sleep(0.1)
        reply = await s.exchange("POST", "/mcp", s.tool_call("echo", {"text": "2"}), headers=s.headers(**key))
        assert reply.status == 409, (reply.status, reply.raw)
