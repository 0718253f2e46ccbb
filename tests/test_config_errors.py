"""Mistakes in how the middleware is set up fail at construction, saying what to write (issue 11)."""

from __future__ import annotations

import functools
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from mcp_resume_asgi import (
    Policy,
    ResumableRequestsMiddleware,
    ResumeMiddleware,
    ResumeTokenMiddleware,
    Route,
    resumable,
)
from mcp_resume_asgi.policy import RouteTable
from mcp_resume_asgi.wire.asgi import check_asgi_app
from tests.apps.mcpserver_app import create_server

# ----------------------------------------------------------------------------- routes keys


@pytest.mark.parametrize(
    ("key", "hint"),
    [("slow", "tool:slow"), ("tools/call", "method:tools/call"), ("/admin/*", "path:/admin/*")],
)
def test_a_routes_key_without_a_prefix_is_refused_with_a_hint(key: str, hint: str) -> None:
    with pytest.raises(ValueError) as caught:
        resumable(create_server().streamable_http_app(), routes={key: Policy()})
    message = str(caught.value)
    assert "'tool:<glob>'" in message and "'method:<glob>'" in message and "'path:<glob>'" in message
    assert f"did you mean '{hint}'?" in message


def test_prefixed_routes_keys_still_work() -> None:
    table = RouteTable(
        Policy(),
        {
            "tool:slow": Policy(retry_ms=1),
            "method:resources/*": Policy(retry_ms=2),
            "path:/x/*": Policy(retry_ms=3),
        },
    )
    assert table.choose("/mcp", "tools/call", "slow")[1].retry_ms == 1
    assert table.choose("/mcp", "resources/read")[1].retry_ms == 2
    assert table.choose("/x/mcp", "ping")[1].retry_ms == 3
    with pytest.raises(ValueError, match="must look like"):
        RouteTable(Policy(), {"bogus:x": Policy()})


def test_a_route_policy_overrides_only_what_it_names() -> None:
    """A route naming only `max_connection_s` keeps the default's `retry_ms` and every other field."""
    default = Policy(retry_ms=500, max_wait_s=120, keepalive_s=5)
    table = RouteTable(
        default,
        [
            Route(tool="report", policy=Policy(max_connection_s=20)),
            Route(tool="quiet", policy=Policy(keepalive_s=None, retry_ms=1000)),
        ],
    )
    report = table.choose("/mcp", "tools/call", "report")[1]
    assert (report.max_connection_s, report.retry_ms, report.max_wait_s, report.keepalive_s) == (
        20,
        500,
        120,
        5,
    )
    quiet = table.choose("/mcp", "tools/call", "quiet")[1]
    # named explicitly, even at the class default's value: the route's value wins
    assert (quiet.keepalive_s, quiet.retry_ms, quiet.max_wait_s) == (None, 1000, 120)
    assert table.choose("/mcp", "tools/list")[1] is default
    assert table.by_index(0) == report


def test_a_route_policy_made_by_replace_is_taken_whole() -> None:
    """`default.replace(...)` names every field: nothing more is inherited from another default."""
    own = Policy(retry_ms=7).replace(max_connection_s=3)
    table = RouteTable(Policy(retry_ms=500), {"tool:x": own})
    assert table.choose("/mcp", "tools/call", "x")[1] == own


# ----------------------------------------------------------------------------- what is wrapped


async def asgi_function(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("never called here")


async def asgi_with_options(options: dict[str, Any], scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("never called here")


class AsgiClass:
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("never called here")


WRAPPERS = pytest.mark.parametrize(
    "wrap",
    [resumable, ResumeMiddleware, ResumableRequestsMiddleware, ResumeTokenMiddleware],
    ids=["resumable", "ResumeMiddleware", "ResumableRequestsMiddleware", "ResumeTokenMiddleware"],
)


@WRAPPERS
def test_the_mcpserver_object_is_refused_naming_what_to_pass(wrap: Any) -> None:
    with pytest.raises(TypeError, match=r"not the MCPServer") as caught:
        wrap(create_server())
    assert "streamable_http_app()" in str(caught.value)


@WRAPPERS
def test_the_uncalled_streamable_http_app_method_is_refused(wrap: Any) -> None:
    server = create_server()
    for method in (server.streamable_http_app, type(server).streamable_http_app):
        with pytest.raises(TypeError, match=r"call streamable_http_app\(\) first"):
            wrap(method)


@WRAPPERS
def test_what_cannot_be_called_with_scope_receive_send_is_refused(wrap: Any) -> None:
    with pytest.raises(TypeError, match="not callable"):
        wrap(42)
    with pytest.raises(TypeError, match=r"app\(scope, receive, send\)"):
        wrap(lambda scope: None)


@pytest.mark.parametrize(
    "app",
    [
        asgi_function,
        AsgiClass(),
        functools.partial(asgi_with_options, {}),
        min,  # a builtin whose signature cannot be read: given the benefit of the doubt
        lambda *args: None,
    ],
    ids=["function", "instance", "partial", "builtin", "varargs"],
)
def test_asgi_callables_are_accepted(app: Any) -> None:
    check_asgi_app(app)
    ResumeMiddleware(app)


@pytest.mark.anyio
async def test_the_built_app_is_accepted_and_answers() -> None:
    server = create_server()
    app = resumable(server.streamable_http_app(host="127.0.0.1"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        reply = await client.get("/not-mcp")
    assert reply.status_code == 404
