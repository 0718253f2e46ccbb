"""Two users of one OAuth client app never see each other's streams, on any resume path.

The SDK binds a session to the whole identity of its token (client id, issuer,
subject): bob, holding alice's session id, gets 404 "Session not found" from the
bare app. Every path on which the middleware answers from its store must refuse
him the same way - and keep serving alice, even after her token was refreshed.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.authentication import AuthCredentials, SimpleUser

from mcp_resume_asgi import MemoryStore, Policy, Store, default_principal, resumable
from tests.apps.auth_app import CLIENT_ID, ISSUER, create_app
from tests.support.raw import RawSession, Reply
from tests.support.server import serve
from tests.support.stores import redis_prefix, redis_url, require_redis

pytestmark = pytest.mark.anyio

POLICY = Policy(retry_ms=20, max_wait_s=10, soft_deadline_s=0.4)
CALL = {"seconds": 1.0, "steps": 5}


class Session(RawSession):
    """A raw session whose requests carry a bearer token."""

    def __init__(self, client: httpx.AsyncClient, token: str) -> None:
        super().__init__(client)
        self.token = token

    def headers(self, **extra: str) -> dict[str, str]:
        return {**super().headers(**extra), "authorization": f"Bearer {self.token}"}

    def opening_headers(self) -> dict[str, str]:
        return {**super().opening_headers(), "authorization": f"Bearer {self.token}"}

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> Reply:
        reply = await super().initialize(capabilities or {})
        assert reply.status == 200, reply.raw
        return reply

    def as_user(self, token: str) -> Session:
        """The same session id, presented by the holder of another token."""
        other = Session(self.client, token)
        other.session_id = self.session_id
        other._next_id = self._next_id
        return other


@contextlib.asynccontextmanager
async def wrapped(store_kind: str) -> AsyncIterator[httpx.AsyncClient]:
    store: Store
    if store_kind == "redis":
        require_redis()
        from mcp_resume_asgi.store.redis import RedisStore

        store = RedisStore(redis_url(), prefix=redis_prefix("test-isolation"))
    else:
        store = MemoryStore()
    app = resumable(
        create_app(),
        policy=POLICY,
        store=store,
        secret="isolation-test-secret",
        resumable_requests=True,
        resume_tokens=True,
    )
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        yield client


def seen(reply: Reply) -> str:
    """Everything the client read of an answer, whole or cut short."""
    return reply.raw.decode() + "".join(event.data or "" for event in reply.events)


def assert_refused(reply: Reply) -> None:
    """What the bare app answers bob: an HTTP 404, and nothing of alice's."""
    assert reply.status == 404, (reply.status, seen(reply))
    assert "alice" not in seen(reply) and not reply.events


def result_text(reply: Reply) -> str:
    final = [m for m in reply.messages() if "result" in m or "error" in m]
    assert final, reply.messages()
    return str(final[-1]["result"]["content"][0]["text"])


async def alice_and_bob(client: httpx.AsyncClient, capabilities: dict[str, Any] | None = None) -> Any:
    alice = Session(client, "token-alice")
    await alice.initialize(capabilities)
    return alice, alice.as_user("token-bob")


@pytest.fixture(params=["memory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.slow
async def test_link_url_and_last_event_id(store_kind: str) -> None:
    async with wrapped(store_kind) as client:
        alice, bob = await alice_and_bob(client)
        call = alice.tool_call("whoami", CALL, progress=True)
        first = await alice.exchange("POST", "/mcp", call, stop_after=1)
        assert first.link and first.last_id and "alice" in seen(first)
        assert_refused(await bob.exchange("GET", first.link, headers=bob.headers()))
        answer = [{"jsonrpc": "2.0", "id": 1, "result": {}}]
        assert_refused(await bob.exchange("POST", first.link, answer, headers=bob.headers()))
        assert_refused(await bob.exchange("GET", "/mcp", headers=bob.headers(last_event_id=first.last_id)))
        # Alice resumes, with a refreshed token: her identity, not her token string, owns it.
        refreshed = alice.as_user("token-alice-refreshed")
        reply = await refreshed.exchange(
            "GET", "/mcp", headers=refreshed.headers(last_event_id=first.last_id)
        )
        assert reply.status == 200 and result_text(reply) == "the secret of alice"
        reply = await alice.exchange("GET", first.link, headers=alice.headers())
        assert reply.status == 200 and result_text(reply) == "the secret of alice"


@pytest.mark.slow
async def test_idempotency_key_replay(store_kind: str) -> None:
    async with wrapped(store_kind) as client:
        alice, bob = await alice_and_bob(client)
        call = alice.tool_call("whoami", CALL, progress=True)
        key = {"idempotency_key": f"key-{uuid.uuid4().hex}"}
        first = await alice.exchange("POST", "/mcp", call, headers=alice.headers(**key), stop_after=1)
        assert first.status == 200
        assert_refused(await bob.exchange("POST", "/mcp", call, headers=bob.headers(**key)))
        reply = await alice.exchange("POST", "/mcp", call, headers=alice.headers(**key))
        assert reply.status == 200 and result_text(reply) == "the secret of alice"


@pytest.mark.slow
async def test_sep975_resume_and_get_status(store_kind: str) -> None:
    async with wrapped(store_kind) as client:
        alice, bob = await alice_and_bob(client, {"resumableRequests": {}})
        call = alice.tool_call("whoami", CALL, progress=True)
        first = await alice.exchange("POST", "/mcp", call, stop_after=1)
        policy = first.messages()[0]
        assert policy["method"] == "notifications/requests/resumePolicy", policy
        token = policy["params"]["resumeToken"]
        status = {
            "jsonrpc": "2.0",
            "id": alice.next_id(),
            "method": "requests/getStatus",
            "params": {"requestId": call["id"], "resumeToken": token},
        }
        resume = {
            "jsonrpc": "2.0",
            "id": call["id"],
            "method": "requests/resume",
            "params": {"resumeToken": token},
        }
        assert_refused(await bob.exchange("POST", "/mcp", status, headers=bob.headers()))
        assert_refused(await bob.exchange("POST", "/mcp", resume, headers=bob.headers()))
        reply = await alice.exchange("POST", "/mcp", status)
        assert reply.status == 200 and '"status":"processing"' in seen(reply).replace(" ", "")
        reply = await alice.exchange("POST", "/mcp", resume)
        assert reply.status == 200 and result_text(reply) == "the secret of alice"


@pytest.mark.slow
async def test_resume_token_reissue(store_kind: str) -> None:
    async with wrapped(store_kind) as client:
        alice, bob = await alice_and_bob(client, {"experimental": {"resumeTokens": {}}})
        call = alice.tool_call("whoami", {"seconds": 2.0, "steps": 5}, progress=True)
        interim = await alice.exchange("POST", "/mcp", call)
        token = interim.messages()[-1]["result"]["_meta"]["nextResumeToken"]
        params = dict(call["params"], _meta={"resumeToken": token})
        again = {"jsonrpc": "2.0", "id": alice.next_id(), "method": "tools/call", "params": params}
        assert_refused(await bob.exchange("POST", "/mcp", again, headers=bob.headers()))
        reply = await alice.exchange("POST", "/mcp", again)
        assert reply.status == 200 and "alice" in seen(reply)


def test_default_principal_is_the_whole_identity() -> None:
    class Token:
        def __init__(self, subject: str | None, issuer: str | None) -> None:
            self.client_id = CLIENT_ID
            self.subject = subject
            self.claims = {"iss": issuer} if issuer else None

    class User(SimpleUser):
        def __init__(self, token: Token) -> None:
            super().__init__(token.client_id)
            self.access_token = token

    def of(token: Token) -> str | None:
        return default_principal({"user": User(token), "auth": AuthCredentials()})

    alice, bob = of(Token("alice", ISSUER)), of(Token("bob", ISSUER))
    assert alice is not None and bob is not None and alice != bob
    assert of(Token("alice", "https://other-issuer")) != alice
    assert of(Token("alice", ISSUER)) == alice  # stable: a refreshed token is the same principal
    assert of(Token(None, None)) is not None  # a verifier without subjects: the client id alone
    assert default_principal({"user": SimpleUser("carol")}) == "carol"
    assert default_principal({}) is None
