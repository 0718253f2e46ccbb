"""An `MCPServer` behind the SDK's own bearer auth, with two users of one OAuth client.

`alice` and `bob` hold tokens of the same client app (`client_id="shared-app"`),
from the same issuer, for different subjects: the SDK binds a session to all
three, so bob presenting alice's session id gets 404 "Session not found". The
middleware must refuse him everything of alice's that it serves from its store.

Note: no ``from __future__ import annotations`` here, so that ``MCPServer``
sees the real ``Context`` annotation on the tool functions.
"""

import anyio
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from starlette.applications import Starlette

ISSUER = "https://issuer.example"
CLIENT_ID = "shared-app"
TOKENS = {"token-alice": "alice", "token-bob": "bob", "token-alice-refreshed": "alice"}


class Verifier:
    """Tokens for two subjects of one client id (a stand-in for an introspection endpoint)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        subject = TOKENS.get(token)
        if subject is None:
            return None
        return AccessToken(
            token=token, client_id=CLIENT_ID, scopes=[], subject=subject, claims={"iss": ISSUER}
        )


async def whoami(ctx: Context, seconds: float = 0.5, steps: int = 5) -> str:
    """Stream `steps` progress notifications naming the caller, then a result naming it."""
    user = ctx.request_context.request.scope["user"] if ctx.request_context.request else None
    subject = user.access_token.subject if user is not None else "nobody"
    for i in range(1, steps + 1):
        await anyio.sleep(seconds / steps)
        await ctx.report_progress(i, steps, f"secret of {subject} #{i}")
    return f"the secret of {subject}"


def create_app() -> Starlette:
    server = MCPServer(
        "auth-test-app",
        token_verifier=Verifier(),
        auth=AuthSettings(
            issuer_url=ISSUER, resource_server_url="http://127.0.0.1/mcp", validate_token_resource=False
        ),
        log_level="WARNING",
    )
    server.add_tool(whoami, structured_output=False)
    app = server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=False, retry_interval=None, host="127.0.0.1"
    )
    app.state.mcp_server = server
    return app
