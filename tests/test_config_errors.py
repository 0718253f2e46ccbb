"""Mistakes in how the middleware is set up fail at construction (or, for the order of the layers,
at startup), saying what to write."""

from __future__ import annotations

import functools
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.types import Message, Receive, Scope, Send

from mcp_resume_asgi import (
    MemoryStore,
    Policy,
    RestMiddleware,
    ResumableRequestsMiddleware,
    ResumeMiddleware,
    ResumeTokenMiddleware,
    Route,
    TasksMiddleware,
    resumable,
)
from mcp_resume_asgi.policy import RouteTable
from mcp_resume_asgi.wire.asgi import check_asgi_app
from tests.apps.mcpserver_app import create_server
from tests.support.timing import scaled

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


# ----------------------------------------------------------------------------- typed options


def test_a_switch_that_is_not_a_bool_nor_a_dict_is_refused() -> None:
    app = create_server().streamable_http_app()
    with pytest.raises(TypeError, match="tasks must be True or False, not 'yes'"):
        resumable(app, tasks="yes")  # type: ignore[arg-type]
    for switch in ("resumable_requests", "resume_tokens", "rest"):
        with pytest.raises(TypeError, match=f"{switch} must be True, False or a dict"):
            resumable(app, **{switch: "yes"})


def test_a_switch_dict_reaches_its_layer() -> None:
    app = resumable(create_server().streamable_http_app(), resumable_requests={"tools": ["slow*"]})
    assert isinstance(app, ResumableRequestsMiddleware) and app.tools == ("slow*",)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tool'"):
        resumable(create_server().streamable_http_app(), resumable_requests={"tool": ["x"]})  # type: ignore[typeddict-unknown-key]


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("node_timeout_s", -1, ValueError),
        ("node_timeout_s", 0, ValueError),
        ("node_timeout_s", "5", TypeError),
        ("session_ttl_s", 0, ValueError),
        ("session_ttl_s", float("inf"), ValueError),
        ("session_ttl_s", True, TypeError),
        ("drain_s", -1, ValueError),
        ("drain_s", float("nan"), ValueError),
        ("drain_s", "30", TypeError),
        ("max_body_bytes", 0, ValueError),
        ("max_body_bytes", "4096", TypeError),
        ("max_body_bytes", 4096.5, TypeError),
    ],
)
@pytest.mark.parametrize("wrap", [resumable, ResumeMiddleware], ids=["resumable", "ResumeMiddleware"])
def test_a_numeric_option_out_of_range_is_refused_on_the_memory_store(
    wrap: Any, option: str, value: object, error: type[Exception]
) -> None:
    """Checked whatever the store: the memory store has no node, so `node_timeout_s` is not used there."""
    with pytest.raises(error, match=option):
        wrap(create_server().streamable_http_app(), store=MemoryStore(), **{option: value})


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("max_bytes", 0, ValueError),
        ("max_keys", "100", TypeError),
        ("max_streams", True, TypeError),
        ("max_index_members", -1, ValueError),
        ("max_sessions", 1.5, TypeError),
    ],
)
def test_a_store_bound_out_of_range_is_refused(option: str, value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=option):
        MemoryStore(**{option: value})


def test_a_sqlite_store_bound_out_of_range_is_refused(tmp_path: Any) -> None:
    from mcp_resume_asgi.store.sqlite import SQLiteStore

    with pytest.raises(ValueError, match="max_file_bytes"):
        SQLiteStore(tmp_path / "a.db", max_file_bytes=0)
    with pytest.raises(TypeError, match="max_keys"):
        SQLiteStore(tmp_path / "a.db", max_keys="10")  # type: ignore[arg-type]


def test_a_redis_store_bound_out_of_range_is_refused() -> None:
    pytest.importorskip("redis")
    from mcp_resume_asgi.store.redis import RedisStore

    with pytest.raises(ValueError, match="partitions"):
        RedisStore(url="redis://127.0.0.1:1/0", partitions=0)
    with pytest.raises(TypeError, match="max_connections"):
        RedisStore(url="redis://127.0.0.1:1/0", max_connections="64")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_what_resumable_returns_has_its_own_drain() -> None:
    app = resumable(create_server().streamable_http_app(), tasks=True, resume_tokens=True)
    assert isinstance(app, TasksMiddleware) and "drain" not in vars(app)
    drained = await app.drain()
    assert drained.running == 0 and drained.stopped == 0


# ----------------------------------------------------------------------------- the layers' order


async def lifespan_app(scope: Scope, receive: Receive, send: Send) -> None:
    assert scope["type"] == "lifespan"
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        else:
            await send({"type": "lifespan.shutdown.complete"})
            return


async def run_lifespan(app: Any) -> list[Message]:
    """Start `app`'s lifespan, and shut it down once its startup is answered: what it sent."""
    sent: list[Message] = []
    inbox: list[Message] = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    answered = anyio.Event()

    async def receive() -> Message:
        message = inbox.pop(0)
        if message["type"] == "lifespan.shutdown":
            await answered.wait()
        return message

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"].startswith("lifespan.startup."):
            answered.set()

    with anyio.fail_after(scaled(10)):
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    return sent


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("build", "said"),
    [
        (
            lambda app: ResumeTokenMiddleware(TasksMiddleware(ResumeMiddleware(app))),
            "TasksMiddleware is inside ResumeTokenMiddleware",
        ),
        (
            lambda app: TasksMiddleware(RestMiddleware(ResumeMiddleware(app))),
            "RestMiddleware is inside TasksMiddleware",
        ),
        (
            lambda app: ResumeMiddleware(ResumableRequestsMiddleware(app)),
            "ResumableRequestsMiddleware is inside ResumeMiddleware",
        ),
        (
            lambda app: Starlette(
                routes=[Mount("/", app=app)],
                middleware=[Middleware(ResumeMiddleware), Middleware(TasksMiddleware)],
                lifespan=None,
            ),
            "TasksMiddleware is inside ResumeMiddleware",
        ),
    ],
    ids=["tasks-in-tokens", "rest-in-tasks", "layer-in-middleware", "starlette-list"],
)
async def test_layers_in_the_wrong_order_are_refused_at_startup_saying_the_order(
    build: Any, said: str
) -> None:
    sent = await run_lifespan(build(lifespan_app))
    assert [m["type"] for m in sent] == ["lifespan.startup.failed"]
    message = sent[0]["message"]
    assert said in message
    assert (
        "RestMiddleware, then TasksMiddleware, then ResumeTokenMiddleware and ResumableRequestsMiddleware"
        in message
    )
    assert "then ResumeMiddleware" in message and "resumable()" in message


@pytest.mark.anyio
async def test_layers_in_the_right_order_start() -> None:
    stack = RestMiddleware(
        TasksMiddleware(ResumeTokenMiddleware(ResumableRequestsMiddleware(ResumeMiddleware(lifespan_app))))
    )
    sent = await run_lifespan(stack)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    built = resumable(lifespan_app, resumable_requests=True, resume_tokens=True, rest=True)
    sent = await run_lifespan(built)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
