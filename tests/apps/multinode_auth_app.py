"""One node of a two-node deployment whose callers are authenticated (issue 20: a request relayed
to another node is served as the caller who sent it, whatever layer authenticated them).

The app is a stock `MCPServer` with the tools of `tests/apps/tasks_app.py` (`SEEN` says what its
slow tool did) and `whoami` (the subject the app sees in `scope["user"]`), wrapped with
`resumable(rest=True)` (the REST face and the Tasks layer) on a shared Redis store, tagged like
`multinode_app` (``x-node: <pid>``; ``GET /__seen__``). Environment as for `multinode_app`
(``MCP_RESUME_PREFIX``, ``MCP_RESUME_SECRET``, ``MCP_RESUME_POLICY_JSON``,
``MCP_RESUME_OPTIONS_JSON``), plus ``MCP_RESUME_AUTH``, where callers are authenticated, with
the tokens of `tests.apps.auth_app` (alice and bob: two subjects of one OAuth client):

* ``outside``: Starlette's `AuthenticationMiddleware` with the SDK's `BearerAuthBackend` *around*
  the wrapper: `scope["user"]` is the SDK's `AuthenticatedUser` (the stock app binds a session to
  it), or anonymous without a valid token (allowed). The app has no auth of its own.
* ``inside``: the SDK's own bearer auth in the app (`token_verifier`); no token gets 401.
* ``both``: an outer layer naming the caller from an ``x-user`` header (as the same OAuth identity
  that user's token stands for) and the SDK's bearer auth inside: a request whose two layers name
  different people is one the owner of a relayed request must refuse.

Note: no ``from __future__ import annotations`` here, so that ``MCPServer`` sees the real
annotations of the tool functions.
"""

import os

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from starlette.authentication import AuthCredentials, AuthenticationBackend, BaseUser
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.store import RedisStore
from tests.apps.auth_app import CLIENT_ID, ISSUER, Verifier
from tests.apps.multinode_app import NodeTag, _json_env
from tests.apps.multinode_tasks_app import SeenEndpoint, _seen
from tests.apps.tasks_app import confirm, echo, slow
from tests.support.stores import redis_url

AUTH_ENV = "MCP_RESUME_AUTH"
PLACEMENTS = ("outside", "inside", "both")


async def whoami(ctx: Context) -> str:
    """The subject of the caller as the app sees it in `scope["user"]`."""
    request = ctx.request_context.request
    user = request.scope.get("user") if request is not None else None
    token = getattr(user, "access_token", None)
    subject = getattr(token, "subject", None)
    return f"you are {subject or 'anonymous'}"


class NamedByHeader(AuthenticationBackend):
    """The outer layer of ``both``: ``x-user: alice`` is alice's OAuth identity (no token checked)."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        name = conn.headers.get("x-user")
        if not name:
            return None
        token = AccessToken(
            token=f"outer-{name}", client_id=CLIENT_ID, scopes=[], subject=name, claims={"iss": ISSUER}
        )
        return AuthCredentials([]), AuthenticatedUser(token)


def create_app() -> ASGIApp:
    placement = os.environ.get(AUTH_ENV, "outside")
    if placement not in PLACEMENTS:
        raise ValueError(f"{AUTH_ENV} must be one of {PLACEMENTS}, got {placement!r}")
    inner_auth = placement in ("inside", "both")
    server = MCPServer(
        "relayed-caller-test-app",
        version="0.0.1",
        log_level="WARNING",
        token_verifier=Verifier() if inner_auth else None,
        auth=(
            AuthSettings(
                issuer_url=ISSUER, resource_server_url="http://127.0.0.1/mcp", validate_token_resource=False
            )
            if inner_auth
            else None
        ),
    )
    for fn in (echo, slow, confirm, whoami):
        server.add_tool(fn, structured_output=False)
    inner = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=False,
        event_store=None,
        retry_interval=None,
        host="127.0.0.1",
    )
    app: ASGIApp = resumable(
        inner,
        policy=Policy(**_json_env("MCP_RESUME_POLICY_JSON")),
        store=RedisStore(
            os.environ.get("MCP_RESUME_REDIS_URL") or redis_url(), prefix=os.environ["MCP_RESUME_PREFIX"]
        ),
        secret=os.environ["MCP_RESUME_SECRET"],
        rest=True,
        **_json_env("MCP_RESUME_OPTIONS_JSON"),
    )
    if placement == "outside":
        app = AuthenticationMiddleware(app, backend=BearerAuthBackend(Verifier()))
    elif placement == "both":
        app = AuthenticationMiddleware(app, backend=NamedByHeader())
    return SeenEndpoint(NodeTag(app), _seen)
