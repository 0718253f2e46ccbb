"""Who a relayed request comes from: the caller the relaying node vouches for, served as such.

A request relayed to the node that holds its session or task (`cluster.py`) enters that
node below any ASGI auth layer placed *outside* the wrapper: on its own it would arrive
anonymous, its caller's work out of reach and its own work anyone's. The node that received
it knows the caller: its principal as the middleware computes it (`wire/principal.py`, or the
configured function) and the user the auth layer put in `scope["user"]`. Both travel in
the relay message, sealed with the cluster's secret for that one request
(`wire/relay_seal.py`), and the owner serves the request as that caller:

* Everything the middleware decides - the session's and the stream's principal, task and
  call ownership, `Idempotency-Key` scopes, cancel notices, the REST face's calls - takes
  the vouched principal (`principal_with_relays`).
* The app sees the caller's user rebuilt in `scope["user"]` (and its credentials' scopes
  in `scope["auth"]`): Starlette's `SimpleUser` and `UnauthenticatedUser` and the `mcp`
  SDK's `AuthenticatedUser` (its access token) as they were, so the app's own checks (the
  SDK binds a session to the token's client, issuer and subject) meet the same caller. A
  user of any other class cannot travel between processes: the app sees a `RelayedUser`
  naming the principal (`identity`, `display_name`) instead.
* With auth inside the app, the app authenticates the relayed headers again, as it does
  every request, and its word is the principal, as on the node that received it. If its
  auth names someone other than the principal vouched for (an outer layer and the app
  disagreeing about one request), the request is served as neither: `CallerGuard` answers
  403 in the app's place at its first read or answer, and the middleware's view of it
  names nobody.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from cachetools import TTLCache
from starlette.authentication import AuthCredentials, BaseUser, SimpleUser, UnauthenticatedUser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.principal import PrincipalOf, default_principal
from mcp_resume_asgi.wire.replies import send_json
from mcp_resume_asgi.wire.scope_keys import RELAYED_CALLER

__all__ = [
    "MAX_SCOPES",
    "MAX_TEXT_CHARS",
    "WARN_EVERY_S",
    "CallerGuard",
    "RelayedCaller",
    "RelayedUser",
    "describe",
    "principal_with_relays",
    "seat",
    "user_from_json",
    "user_to_json",
]

logger = logging.getLogger(__name__)

#: Bounds of what a caller's description may hold (sealed by a node of the cluster, but
#: parsed all the same): generous, since a caller past them cannot be relayed at all.
MAX_TEXT_CHARS = 16384
MAX_SCOPES = 1024
#: The `mcp` SDK's user class (checked by name: the SDK is not a dependency).
_SDK_USER = ("mcp.server.auth.middleware.bearer_auth", "AuthenticatedUser")
#: How often, at most, one kind of trouble is logged as a warning.
WARN_EVERY_S = 60.0

_warned: TTLCache[str, bool] = TTLCache(maxsize=256, ttl=WARN_EVERY_S)


def _warn(kind: str, text: str, *args: Any) -> None:
    level = logging.DEBUG if kind in _warned else logging.WARNING
    _warned[kind] = True
    logger.log(level, text, *args)


class RelayedUser(BaseUser):
    """`scope["user"]` on the owner for a caller whose user object could not travel with the
    request: authenticated, named by its principal."""

    def __init__(self, principal: str) -> None:
        self.principal = principal

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return self.principal

    @property
    def identity(self) -> str:
        return self.principal


@dataclass(frozen=True, slots=True)
class RelayedCaller:
    """The caller of a relayed request, as the node that relayed it vouched (the seal checked)."""

    principal: str | None
    user: Any
    """What this node put in `scope["user"]` for it (None: nothing, the relaying node had none)."""
    nobody: str = field(default_factory=lambda: f"\x00disagreeing-auth:{secrets.token_hex(16)}")
    """The principal it is served as where the app's auth names someone else: no one's."""

    def principal_in(self, scope: Scope, principal_of: PrincipalOf) -> str | None:
        """Whom the request in `scope` (or a copy of it the app saw) is served as."""
        if scope.get("user") is self.user:
            return self.principal  # nobody authenticated it again on this node
        own = principal_of(scope)  # the app's own auth did
        if self.principal is None or own == self.principal:
            return own
        return self.nobody


def principal_with_relays(principal_of: PrincipalOf) -> PrincipalOf:
    """`principal_of`, except for a relayed request: its vouched caller (see the module doc)."""

    def principal(scope: Scope) -> str | None:
        caller = scope.get(RELAYED_CALLER)
        if isinstance(caller, RelayedCaller):
            return caller.principal_in(scope, principal_of)
        return principal_of(scope)

    if principal_of is not default_principal:
        return principal

    def default(scope: Scope) -> str | None:
        # (`principal` of `default_principal`, read three times per request: without a user,
        # nobody - what `default_principal` says - without calling it)
        caller = scope.get(RELAYED_CALLER)
        if isinstance(caller, RelayedCaller):
            return caller.principal_in(scope, default_principal)
        if scope.get("user") is None:
            return None
        return default_principal(scope)

    return default


# ---------------------------------------------------------------------------- the relaying node
def describe(scope: Scope, principal_of: PrincipalOf) -> dict[str, Any]:
    """The caller of a request about to be relayed, as JSON: its principal, its user, the
    scopes its credentials grant."""
    caller: dict[str, Any] = {"principal": principal_of(scope)}
    user = scope.get("user")
    if user is not None:
        caller["user"] = user_to_json(user)
    scopes = getattr(scope.get("auth"), "scopes", None)
    if isinstance(scopes, list) and all(isinstance(s, str) for s in scopes):
        caller["scopes"] = scopes
    return caller


def user_to_json(user: Any) -> dict[str, Any]:
    kind = type(user)
    if kind is UnauthenticatedUser:
        return {"kind": "anonymous"}
    if kind is SimpleUser:
        return {"kind": "simple", "username": user.username}
    token: Any = getattr(user, "access_token", None)
    if (kind.__module__, kind.__qualname__) == _SDK_USER and hasattr(token, "model_dump"):
        return {"kind": "mcp", "access_token": token.model_dump(mode="json")}
    _warn(
        f"class:{kind.__module__}.{kind.__qualname__}",
        "a user of class %s.%s cannot travel with a relayed request: the app on the node it is "
        "relayed to sees a RelayedUser naming its principal instead",
        kind.__module__,
        kind.__qualname__,
    )
    return {"kind": "other"}


# ---------------------------------------------------------------------------- the owner
def seat(scope: Scope, caller: dict[str, Any]) -> bool:
    """Give a relayed request's scope its caller (`describe`'s JSON); False if malformed."""
    principal = caller.get("principal")
    if principal is not None and not _text(principal):
        return False
    user: Any = None
    if "user" in caller:
        described = caller["user"]
        if not isinstance(described, dict):
            return False
        user = user_from_json(described, principal)
        if user is None:
            return False
        scope["user"] = user
    if "scopes" in caller:
        scopes = caller["scopes"]
        if not isinstance(scopes, list) or len(scopes) > MAX_SCOPES or not all(_text(s) for s in scopes):
            return False
        scope["auth"] = AuthCredentials(scopes)
    scope[RELAYED_CALLER] = RelayedCaller(principal, user)
    return True


def user_from_json(described: dict[str, Any], principal: str | None) -> BaseUser | None:
    """The user `user_to_json` described (None: malformed)."""
    kind = described.get("kind")
    if kind == "anonymous":
        return UnauthenticatedUser()
    if kind == "simple":
        username = described.get("username")
        return SimpleUser(username) if isinstance(username, str) and _text(username) else None
    if kind == "mcp":
        token = described.get("access_token")
        rebuilt = _sdk_user(token) if isinstance(token, dict) else None
        if rebuilt is not None:
            return rebuilt
    elif kind != "other":
        return None
    return RelayedUser(principal) if principal is not None else UnauthenticatedUser()


def _sdk_user(token: dict[str, Any]) -> BaseUser | None:
    """The SDK's `AuthenticatedUser` of `token` (the SDK is there: the relaying node's user was one)."""
    try:
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken
    except ImportError:
        _warn(
            "sdk-missing",
            "a relayed request's caller holds an mcp access token, but mcp is not installed here",
        )
        return None
    try:
        return AuthenticatedUser(AccessToken.model_validate(token))
    except ValueError as exc:
        _warn("sdk-token", "a relayed request's mcp access token does not validate here: %s", exc)
        return None


def _text(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_TEXT_CHARS


# ---------------------------------------------------------------------------- the app's guard
class CallerGuard:
    """Wraps the app: a relayed request whose app's auth names someone other than the caller the
    relaying node vouched for is answered 403, in the app's place, the app told its client left.

    Checked when the app first reads the request (its auth has run) or starts its answer.
    Requests that were not relayed, or whose relaying node vouched for nobody, pass untouched.
    """

    def __init__(self, app: ASGIApp, principal_of: PrincipalOf) -> None:
        self.app = app
        self.principal_of = principal_of

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """The app's own call when the request was not relayed (no frame of ours, no closures,
        held for as long as the app runs: an idle stream's app runs for its resume window)."""
        caller = scope.get(RELAYED_CALLER) if scope["type"] == "http" else None
        if not isinstance(caller, RelayedCaller) or caller.principal is None:
            return self.app(scope, receive, send)
        return self._guarded(caller, scope, receive, send)

    async def _guarded(self, caller: RelayedCaller, scope: Scope, receive: Receive, send: Send) -> None:
        refused = False
        started = False

        async def refuse() -> None:
            nonlocal refused, started
            refused = True
            _warn(
                "disagreeing-auth",
                "a relayed request was refused (403): the app's auth names another principal than "
                "the node that relayed it vouched for (an auth layer outside the wrapper and the "
                "app's own disagree about one request)",
            )
            if started:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            started = True
            message = p.error_message(
                None, p.INVALID_REQUEST, "the caller's credentials name different principals"
            )
            await send_json(send, 403, message)

        agreeing = caller.user  # the user last found to name the vouched principal (or, None, none)

        def disagrees() -> bool:
            nonlocal agreeing
            user = scope.get("user")
            if user is agreeing:
                return False  # (checked once per user object, not on every message)
            if caller.principal_in(scope, self.principal_of) == caller.nobody:
                return True
            agreeing = user
            return False

        async def guarded_receive() -> Message:
            if not refused and disagrees():
                await refuse()
            if refused:
                return {"type": "http.disconnect"}
            return await receive()

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if not refused and disagrees():
                await refuse()
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, guarded_receive, guarded_send)
