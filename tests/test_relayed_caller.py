"""The caller of a relayed request (`relayed_caller.py`) and the seal on relay messages
(`relay_seal.py`), without a network: plain data, a clock passed in, and `CallerGuard` around a
small ASGI app. The two-node tests are in tests/test_multinode_relayed_caller.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthCredentials, BaseUser, SimpleUser, UnauthenticatedUser
from starlette.types import Message, Receive, Scope, Send

from mcp_resume_asgi.engine.relayed_caller import (
    MAX_TEXT_CHARS,
    CallerGuard,
    RelayedCaller,
    RelayedUser,
    describe,
    principal_with_relays,
    seat,
)
from mcp_resume_asgi.wire.principal import default_principal
from mcp_resume_asgi.wire.relay_seal import MAX_AGE_S, RelayRequest, RelaySeal
from mcp_resume_asgi.wire.scope_keys import RELAYED_CALLER
from mcp_resume_asgi.wire.tokens import TokenSigner

SECRET = "relayed-caller-test-secret-0123"
NOW = 1_800_000_000.0
REQUEST = {"method": "POST", "path": "/mcp", "query": "", "headers": [], "body": "e30="}
ALICE = json.dumps(["oauth", "shared-app", "https://issuer.example", "alice"], separators=(",", ":"))


def sdk_user(subject: str) -> AuthenticatedUser:
    token = AccessToken(
        token=f"token-{subject}",
        client_id="shared-app",
        scopes=["read"],
        subject=subject,
        claims={"iss": "https://issuer.example"},
    )
    return AuthenticatedUser(token)


def relayed(outer: Scope) -> Scope:
    """The scope the owner builds for `outer` relayed to it (through JSON, as on the wire)."""
    caller = json.loads(json.dumps(describe(outer, default_principal)))
    scope: Scope = {"type": "http", "headers": []}
    assert seat(scope, caller)
    return scope


# ----------------------------------------------------------------------------- the seal


def seal_for(node: str, secret: str = SECRET) -> RelaySeal:
    return RelaySeal(TokenSigner(secret), node)


def message(
    relay_id: str = "r1", *, to: str = "owner", at: float = NOW, secret: str = SECRET
) -> dict[str, Any]:
    return seal_for("sender", secret).seal(
        relay_id, to=to, reply_to="node:sender", request=REQUEST, caller={"principal": ALICE}, now=at
    )


def test_a_sealed_relay_opens_on_the_node_it_is_for() -> None:
    opened = seal_for("owner").open(json.loads(json.dumps(message())), NOW + 0.01)
    assert opened == RelayRequest("r1", "node:sender", REQUEST, {"principal": ALICE})


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        (lambda m: {k: v for k, v in m.items() if k != "seal"}, "not sealed"),
        (lambda m: {**m, "seal": "x" * 43}, "does not match"),
        (lambda m: message(secret="another-cluster-secret-0123"), "does not match"),
        (lambda m: {**m, "sealed": m["sealed"].replace('"/mcp"', '"/mcp/other"')}, "does not match"),
        (lambda m: {**m, "sealed": m["sealed"].replace("alice", "bob!!")}, "does not match"),
        (lambda m: {**m, "id": "r2"}, "id"),
        (lambda m: message(to="another-node"), "another node"),
        (lambda m: message(at=NOW - MAX_AGE_S - 1), "too long ago"),
        (lambda m: message(at=NOW + MAX_AGE_S + 1), "ahead"),
    ],
)
def test_a_relay_not_sealed_as_it_is_for_this_node_now_is_refused(forge: Any, why: str) -> None:
    opened = seal_for("owner").open(forge(message()), NOW)
    assert isinstance(opened, str) and why in opened


def test_a_replayed_relay_is_refused_while_it_is_young_enough_to_be_served() -> None:
    owner = seal_for("owner")
    assert isinstance(owner.open(message(), NOW), RelayRequest)
    assert "replay" in str(owner.open(message(), NOW + 1))
    assert "too long ago" in str(owner.open(message(), NOW + MAX_AGE_S + 1))


def test_past_its_memory_a_node_refuses_relays_rather_than_forget_young_ones() -> None:
    owner = RelaySeal(TokenSigner(SECRET), "owner", max_remembered=2)
    assert isinstance(owner.open(message("r1"), NOW), RelayRequest)
    assert isinstance(owner.open(message("r2"), NOW), RelayRequest)
    assert "too many" in str(owner.open(message("r3"), NOW))
    assert isinstance(
        owner.open(message("r3", at=NOW + MAX_AGE_S + 0.5), NOW + MAX_AGE_S + 0.5), RelayRequest
    )


BODY = {"t": "body", "id": "r1", "seq": 1, "body": "eyJyZXN1bHQiOjF9", "more": False}


def test_a_relays_reply_opens_as_it_was_sealed() -> None:
    sealed = seal_for("owner").seal_message(BODY)
    assert (sealed["t"], sealed["id"]) == ("body", "r1")
    assert seal_for("sender").open_message(json.loads(json.dumps(sealed))) == BODY


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        (lambda m: {"t": "body", "id": "r1", "seq": 1, "body": "Zm9yZ2Vk", "more": False}, "not sealed"),
        (lambda m: {**m, "seal": "x" * 43}, "does not match"),
        (
            lambda m: RelaySeal(TokenSigner("another-cluster-secret-0123"), "x").seal_message(BODY),
            "does not match",
        ),
        (lambda m: {**m, "sealed": m["sealed"].replace("eyJyZXN1bHQiOjF9", "Zm9yZ2Vk")}, "does not match"),
        (lambda m: {**m, "id": "r2"}, "id"),
        (lambda m: {**m, "t": "start"}, "kind"),
    ],
)
def test_a_forged_or_moved_reply_is_refused(forge: Any, why: str) -> None:
    """Whoever can publish knows a relay's id (it is in the clear), but cannot answer it."""
    opened = seal_for("sender").open_message(forge(seal_for("owner").seal_message(BODY)))
    assert isinstance(opened, str) and why in opened


def test_a_request_seal_does_not_open_as_a_reply_nor_the_other_way() -> None:
    request = message()
    assert isinstance(seal_for("owner").open_message(request), str)
    reply = seal_for("owner").seal_message({"t": "req", "id": "r1"})
    assert isinstance(seal_for("owner").open(reply, NOW), str)


def test_the_relaying_node_takes_each_message_of_an_answer_once_and_its_parts_in_order() -> None:
    """Copies of what was taken (late, or replayed: sealed, but not new) are dropped before they
    are queued; a part past the next one is taken (the reader ends the answer there)."""
    import anyio

    from mcp_resume_asgi.engine.cluster import _Replies

    replies = _Replies(anyio.create_memory_object_stream[dict[str, Any]](1)[0])
    assert replies.new({"t": "ack"}) and not replies.new({"t": "ack"})
    assert replies.new({"t": "start"}) and not replies.new({"t": "start"})
    assert replies.new({"t": "body", "seq": 1}) and not replies.new({"t": "body", "seq": 1})
    assert replies.new({"t": "body", "seq": 3})
    for late in (2, 3, True, "4", None):
        assert not replies.new({"t": "body", "seq": late})


@pytest.mark.anyio
async def test_the_relaying_node_takes_only_sealed_replies() -> None:
    """`Node._receive`: a forged part of the answer never reaches the relay's reader; the
    sealed one does; a forged "gone" does not end a relayed request being served."""
    import anyio

    from mcp_resume_asgi.engine.cluster import Node, _Replies
    from mcp_resume_asgi.store.memory import MemoryStore

    node = Node(MemoryStore(), node_id="sender", signer=TokenSigner(SECRET))
    into, out = anyio.create_memory_object_stream[dict[str, Any]](8)
    node._replies["r1"] = _Replies(into)
    forged = {"t": "body", "id": "r1", "seq": 1, "body": "Zm9yZ2Vk", "more": False}
    node._receive(json.dumps(forged).encode())
    node._receive(json.dumps({**seal_for("owner").seal_message(BODY), "seal": "x" * 43}).encode())
    node._receive(json.dumps(seal_for("owner").seal_message(BODY)).encode())
    assert out.receive_nowait() == BODY
    with pytest.raises(anyio.WouldBlock):
        out.receive_nowait()
    gone = anyio.Event()
    node._served["r2"] = gone
    node._receive(json.dumps({"t": "gone", "id": "r2"}).encode())
    assert not gone.is_set()
    node._receive(json.dumps(seal_for("owner").seal_message({"t": "gone", "id": "r2"})).encode())
    assert gone.is_set()


# ----------------------------------------------------------------------------- the caller


def test_the_sdks_user_is_rebuilt_so_the_app_meets_the_same_credential() -> None:
    alice = sdk_user("alice")
    outer: Scope = {"type": "http", "user": alice, "auth": AuthCredentials(["read"])}
    scope = relayed(outer)
    user = scope["user"]
    assert isinstance(user, AuthenticatedUser) and authorization_context(user) == authorization_context(alice)
    assert scope["auth"].scopes == ["read"]
    assert principal_with_relays(default_principal)(scope) == default_principal(outer)


def test_starlettes_users_are_rebuilt_and_anonymous_stays_anonymous() -> None:
    simple = relayed({"type": "http", "user": SimpleUser("carol")})
    assert type(simple["user"]) is SimpleUser and simple["user"].username == "carol"
    assert principal_with_relays(default_principal)(simple) == "carol"
    anonymous = relayed({"type": "http", "user": UnauthenticatedUser(), "auth": AuthCredentials()})
    assert type(anonymous["user"]) is UnauthenticatedUser
    assert principal_with_relays(default_principal)(anonymous) is None
    bare = relayed({"type": "http"})
    assert "user" not in bare and principal_with_relays(default_principal)(bare) is None


def test_a_user_that_cannot_travel_becomes_a_relayed_user_and_the_principal_is_the_vouched_one() -> None:
    class Employee(BaseUser):
        def __init__(self, email: str) -> None:
            self.email = email

        @property
        def is_authenticated(self) -> bool:
            return True

    def by_email(scope: Scope) -> str | None:
        return str(scope["user"].email)  # would fail on anything but an Employee

    caller = json.loads(json.dumps(describe({"type": "http", "user": Employee("dan@example.com")}, by_email)))
    scope: Scope = {"type": "http"}
    assert seat(scope, caller)
    assert isinstance(scope["user"], RelayedUser) and scope["user"].identity == "dan@example.com"
    assert principal_with_relays(by_email)(scope) == "dan@example.com"


def test_the_apps_own_auth_names_the_caller_unless_it_names_someone_else() -> None:
    principal = principal_with_relays(default_principal)
    alice, bob = sdk_user("alice"), sdk_user("bob")
    agreeing = relayed({"type": "http", "user": alice})
    agreeing["user"] = sdk_user("alice")  # the app authenticated the relayed headers again
    assert principal(agreeing) == default_principal({"user": alice})
    disagreeing = relayed({"type": "http", "user": alice})
    disagreeing["user"] = bob
    served_as = principal(disagreeing)
    assert served_as not in (default_principal({"user": alice}), default_principal({"user": bob}), None)
    other = relayed({"type": "http", "user": alice})
    other["user"] = bob
    assert principal(other) != served_as, "two disagreeing requests are not one principal"
    inside = relayed({"type": "http"})  # the relaying node saw nobody: the app's auth decides
    inside["user"] = bob
    assert principal(inside) == default_principal({"user": bob})


@pytest.mark.parametrize(
    "caller",
    [
        {"principal": 7},
        {"principal": "x" * (MAX_TEXT_CHARS + 1)},
        {"principal": "alice", "user": "alice"},
        {"principal": "alice", "user": {"kind": "root"}},
        {"principal": "alice", "user": {"kind": "simple", "username": 3}},
        {"principal": "alice", "scopes": "read"},
        {"principal": "alice", "scopes": [1]},
    ],
)
def test_a_malformed_caller_is_not_seated(caller: dict[str, Any]) -> None:
    scope: Scope = {"type": "http"}
    assert not seat(scope, caller)
    assert RELAYED_CALLER not in scope


def test_an_sdk_token_that_does_not_validate_falls_back_to_a_relayed_user() -> None:
    scope: Scope = {"type": "http"}
    assert seat(scope, {"principal": ALICE, "user": {"kind": "mcp", "access_token": {"token": 1}}})
    assert isinstance(scope["user"], RelayedUser) and scope["user"].identity == ALICE
    assert isinstance(scope[RELAYED_CALLER], RelayedCaller)


# ----------------------------------------------------------------------------- the guard


class AuthThenEcho:
    """An app whose own auth names the caller from `x-user`, then echoes the body it reads."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = dict(scope["headers"]).get(b"x-user")
        if name is not None:
            scope["user"] = sdk_user(name.decode())
        message = await receive()
        if message["type"] != "http.request":
            return
        self.bodies.append(message["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": message["body"]})


async def run(app: Any, scope: Scope) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"the request", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


@pytest.mark.anyio
async def test_the_guard_refuses_a_relayed_request_whose_app_auth_names_someone_else() -> None:
    app = AuthThenEcho()
    guarded = CallerGuard(app, default_principal)
    scope = relayed({"type": "http", "user": sdk_user("alice")})
    sent = await run(guarded, {**scope, "headers": [(b"x-user", b"bob")]})
    assert sent[0]["status"] == 403 and b"alice" not in sent[1]["body"] and app.bodies == []
    sent = await run(guarded, {**scope, "headers": [(b"x-user", b"alice")]})
    assert sent[0]["status"] == 200 and app.bodies == [b"the request"]
    sent = await run(guarded, {**scope, "headers": []})  # no auth inside: the vouched caller
    assert sent[0]["status"] == 200
    sent = await run(guarded, {"type": "http", "headers": [(b"x-user", b"bob")]})  # not relayed
    assert sent[0]["status"] == 200
