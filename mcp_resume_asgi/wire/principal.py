"""Who is calling: the identity every stream, call and task is bound to.

An OAuth client id names an application, not a person: two users of one client
app share it. The `mcp` SDK binds a session to the whole identity a token stands
for - client id, issuer and subject - and so must we, or user B of the same
client could read user A's recorded events. The principal is read from
`scope["user"]` as Starlette's `AuthenticationMiddleware` (and the SDK's bearer
auth) set it; the engine reads it again after the app's own auth has run on the
request's scope, so apps that authenticate inside themselves are covered too. A
request relayed from another node is the caller that node vouched for
(`engine/relayed_caller.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from mcp_resume_asgi.wire.asgi import Scope

__all__ = [
    "PrincipalOf",
    "default_principal",
]

PrincipalOf = Callable[[Scope], str | None]
"""`principal(scope)`: a stable string naming the caller, or None when unauthenticated."""


def default_principal(scope: Scope) -> str | None:
    """The authenticated identity in `scope["user"]`, or None.

    For an OAuth bearer token (the SDK's `AuthenticatedUser`, or anything with an
    `access_token` carrying a `client_id`) it is the triple (client id, issuer,
    subject), as the SDK compares it; a component the token verifier does not
    supply is null, so the comparison degrades to the others as the SDK's does.
    Otherwise the user's `identity`, `username` or `display_name`.
    """
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    token = getattr(user, "access_token", None)
    client_id = getattr(token, "client_id", None)
    if isinstance(client_id, str):
        claims = getattr(token, "claims", None)
        issuer = claims.get("iss") if isinstance(claims, dict) else None
        subject = getattr(token, "subject", None)
        return json.dumps(
            [
                "oauth",
                client_id,
                None if issuer is None else str(issuer),
                subject if isinstance(subject, str) else None,
            ],
            separators=(",", ":"),
        )
    for attribute in ("identity", "username", "display_name"):
        value = getattr(user, attribute, None)
        if isinstance(value, str) and value:
            return value
    return None
