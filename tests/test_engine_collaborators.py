"""`engine/` (issue 21): the engine's collaborators are given `StreamServices` (or a narrower part
of it), never the `Engine` itself; the port and the services answer as the engine did."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from starlette.types import Message, Receive, Scope, Send

import mcp_resume_asgi
from mcp_resume_asgi import ResumeMiddleware
from mcp_resume_asgi.engine import port
from mcp_resume_asgi.engine.services import OutageReporter, StreamServices
from mcp_resume_asgi.store.memory import MemoryStore
from mcp_resume_asgi.store.redis import RedisStore
from mcp_resume_asgi.wire.tokens import new_stream_id

#: Modules that must not take or import the Engine (they get `StreamServices` or less).
COLLABORATORS = [
    "engine/hosted",
    "engine/delivery",
    "engine/recorder",
    "engine/follower",
    "engine/cancellation",
    "http/client_answers",
    "http/client_cancels",
    "engine/retried_posts",
    "engine/services",
    "engine/sessions",
    "engine/store_recovery",
    "engine/cancel_bindings",
    "engine/admission",
    "engine/connection",
    "engine/scheduler",
    "engine/cluster",
    "engine/relayed_caller",
]
PACKAGE = Path(mcp_resume_asgi.__file__).parent


@pytest.mark.parametrize("path", COLLABORATORS)
def test_a_collaborator_neither_imports_nor_names_the_engine(path: str) -> None:
    """Type-only imports count: the engine's modules must form no cycle (`.importlinter`)."""
    tree = ast.parse((PACKAGE / f"{path}.py").read_text())
    imported = [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]
    assert not [i for i in imported if i[0] == "mcp_resume_asgi.engine.engine" or i[1] == "Engine"]
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert "Engine" not in names


def test_the_engine_hands_its_collaborators_its_services_not_itself() -> None:
    middleware = ResumeMiddleware(_app)
    engine = middleware.engine
    services = engine.services
    assert isinstance(services, StreamServices)
    assert engine.live is services.live and engine.recovery is services.recovery
    # The HTTP front's answerers are built by the middleware (issue 21, step 6), with the
    # engine's services and port, never the engine itself; so is the port's `host`.
    retried = engine.port.host.__self__  # type: ignore[attr-defined]
    built = [middleware.answers, middleware.cancels, middleware.resumes, retried]
    built += [services.sessions, services.recovery, services.cancel_bindings]
    for part in [*built, services]:
        held = [getattr(part, name) for name in getattr(part, "__slots__", ()) or vars(part)]
        assert not [value for value in held if value is engine], type(part).__name__
    assert middleware.answers.port is engine.port and middleware.cancels.services is services
    assert middleware.resumes.port is engine.port and retried.services is services


@pytest.mark.anyio
async def test_the_port_answers_a_missing_stream_with_not_found() -> None:
    engine = ResumeMiddleware(_app).engine
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    assert await engine.port.admitted({"type": "http", "headers": []}, send, None) is None
    assert sent[0]["status"] == 404 and sent[1]["body"] == port.NOT_FOUND.body


def test_the_outage_reporter_tells_only_of_errors_that_say_the_store_is_down() -> None:
    told: list[BaseException] = []
    redis = OutageReporter(RedisStore("redis://127.0.0.1:1/0"), told.append)
    down, other = ConnectionRefusedError("refused"), ValueError("a bug")
    assert redis(down) and told == [down]
    assert not redis(other) and told == [down]
    assert not OutageReporter(MemoryStore(), told.append)(down) and told == [down]  # (never down)
    assert OutageReporter(RedisStore("redis://127.0.0.1:1/0"), None)(down)


def test_the_services_build_an_engine_answer_s_headers_with_a_signed_link() -> None:
    services = ResumeMiddleware(_app, secret="s" * 32).engine.services
    stream_id = new_stream_id()
    headers = dict(services.sse_headers("session-1", "/mcp/", stream_id, 7))
    assert headers[b"content-type"] == b"text/event-stream"
    assert headers[b"mcp-session-id"] == b"session-1"
    link = headers[b"link"].decode()
    token = link.removeprefix("</mcp/streams/").removesuffix('>; rel="stream"')
    assert services.signer.parse_link_token(token) == (stream_id, 7)
    assert b"link" not in dict(services.sse_headers(None, "/mcp", stream_id, 7, link=False))


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("the app is not called here")


#: The hosted stream's parts: each knows the stream only through a Protocol of its own.
PARTS = ["engine/delivery", "engine/recorder", "engine/cancellation", "engine/follower", "engine/upgraded"]


@pytest.mark.anyio
async def test_the_hosted_stream_is_one_class_that_owns_its_parts() -> None:
    """Issue 21: no mixins (no class split across files whose attributes another provides)."""
    from mcp_resume_asgi.engine.delivery import Writer
    from mcp_resume_asgi.engine.hosted import HostedStream
    from mcp_resume_asgi.engine.recorder import Recorder
    from mcp_resume_asgi.policy import Policy
    from mcp_resume_asgi.store.base import StreamKind

    assert HostedStream.__bases__ == (object,)
    assert Writer.__bases__ == (object,) and Recorder.__bases__ == (object,)
    stream = HostedStream(
        ResumeMiddleware(_app).engine.services,
        kind=StreamKind.REQUEST,
        scope={"type": "http", "path": "/mcp", "headers": []},
        body=b"",
        route=0,
        policy=Policy(),
        version="2025-06-18",
        session_id=None,
        principal=None,
    )
    assert stream.writer.core is stream.core and stream.writer.host.first is None
    for path in PARTS:
        text = (PACKAGE / f"{path}.py").read_text()
        tree = ast.parse(text)
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "mcp_resume_asgi.engine.hosted" not in imported, path
        assert "Provided by" not in text, path


def test_a_hosted_stream_is_made_by_one_constructor_per_way_it_comes_to_be() -> None:
    """`HostedStream.request`, `.standalone` and `.rerun` share one path (`__init__`): each sets
    what its way of coming to be says, and nothing else."""
    from mcp_resume_asgi.core.lifecycle import Origin
    from mcp_resume_asgi.core.orphans import after_loss
    from mcp_resume_asgi.engine import rerun
    from mcp_resume_asgi.engine.hosted import HostedStream
    from mcp_resume_asgi.policy import Policy
    from mcp_resume_asgi.store.base import StreamKind, StreamMeta

    services = ResumeMiddleware(_app).engine.services
    scope: Scope = {
        "type": "http",
        "path": "/mcp",
        "headers": [(b"last-event-id", b"s-3"), (b"accept", b"text/event-stream")],
    }
    standalone = HostedStream.standalone(
        services, scope, route=0, policy=Policy(), version="2025-11-25", session_id="session"
    )
    assert standalone.kind is StreamKind.STANDALONE and standalone.request_id is None
    assert standalone.scope["headers"] == [(b"accept", b"text/event-stream")]  # (a resume is the store's)
    assert scope["headers"][0] == (b"last-event-id", b"s-3")  # (the server's scope untouched)
    assert standalone.core.origin is Origin.LOCAL and standalone.delivery is None

    meta = StreamMeta(
        new_stream_id(), StreamKind.REQUEST, "session", "alice", "2025-11-25", "/mcp", request_id=7
    )
    meta.last_seq = 12
    meta.resumable_opt_in = True
    again = HostedStream.rerun(services, meta, scope, b"{}", Policy(), round_=2)
    assert again.stream_id == meta.stream_id and again.request_id == 7 and again.principal == "alice"
    assert again.core.origin is Origin.RERUN and again.core.seq == after_loss(12) - 1
    assert again.opted_in and "rerun" in repr(again)
    assert again.delivery is not None and again.delivery.survives_close
    assert again.first_messages == (rerun.marker(2),)
