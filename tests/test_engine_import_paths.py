"""`engine/` (issue 21 step 4): the engine's modules in one package, every name still importable
from where it was (as the same object), and the engine's collaborators given `StreamServices`
(or a narrower part of it), never the `Engine` itself."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

import mcp_resume_asgi
from mcp_resume_asgi import ResumeMiddleware
from mcp_resume_asgi.engine import port
from mcp_resume_asgi.engine.services import OutageReporter, StreamServices
from mcp_resume_asgi.store.memory import MemoryStore
from mcp_resume_asgi.store.redis import RedisStore
from mcp_resume_asgi.wire.tokens import new_stream_id

#: Old module -> (its new home, the names it defined before the move).
MOVED = {
    "sessions": ("engine.sessions", "Sessions"),
    "store_recovery": ("engine.store_recovery", "FIRST_RETRY_S StoreRecovery"),
    "cluster": ("engine.cluster", "WARN_EVERY_S Node"),
    "admission": (
        "engine.admission",
        "MAX_REPLY_BYTES NOT_FOUND PROBE_ID_PREFIX PROBE_TIMEOUT_S SILENT Admission AppReply Refusal "
        "post_to_app",
    ),
    "relayed_caller": (
        "engine.relayed_caller",
        "MAX_SCOPES MAX_TEXT_CHARS WARN_EVERY_S CallerGuard RelayedCaller RelayedUser describe "
        "principal_with_relays seat user_from_json user_to_json",
    ),
    "scheduler": ("engine.scheduler", "Scheduler Timer spawn"),
    "connection": ("engine.connection", "Connection Delivery Flag Interruptible"),
    "hosted": ("engine.hosted", "STATUS_HOLD_S HostedStream"),
    "writer": ("engine.delivery", "READ_BATCH WATCH_CHECK_S Writer finish_answer note_detached"),
    "recording": ("engine.recorder", "LOST_TEXT WRITE_BEHIND_BYTES WRITE_BEHIND_FRAMES Recorder"),
    "expiry": ("engine.cancellation", "CANCEL_GRACE_S cancel_app check closed_by_client expire forget"),
    "follower": ("engine.follower", "follow"),
}
#: Names that moved out of a module that stays (or became the package): (old, name, new home).
SPLIT = [
    ("engine", "Engine", "engine.engine"),
    ("engine", "Delivery", "engine.port"),
    ("engine", "RetryAnswer", "engine.port"),
    ("features", "RequestContext", "engine.port"),
    ("retried_posts", "RetryAnswer", "engine.port"),
    ("admission", "Refusal", "engine.port"),
    ("admission", "NOT_FOUND", "engine.port"),
    ("connection", "Delivery", "engine.port"),
    ("sse_answers", "finish_answer", "engine.delivery"),
    ("sse_answers", "note_detached", "engine.delivery"),
]
#: Names a moved module had from elsewhere, still importable from its old path.
BORROWED = [
    ("cluster", "OutageLog", "store.health"),
    ("cluster", "describe_error", "store.health"),
    ("cluster", "RELAYED_FROM", "wire.scope_keys"),
    ("relayed_caller", "RELAYED_CALLER", "wire.scope_keys"),
    ("sessions", "DECLARED_CAPABILITIES", "wire.scope_keys"),
    ("writer", "frame_events", "wire.sse"),
    ("sse_answers", "frame_events", "wire.sse"),
    ("first_answer", "Mode", "core.answer_mode"),
]
#: Modules that must not take or import the Engine (they get `StreamServices` or less).
COLLABORATORS = [
    "engine/hosted",
    "engine/delivery",
    "engine/recorder",
    "engine/follower",
    "engine/cancellation",
    "client_answers",
    "client_cancels",
    "retried_posts",
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


def _module(name: str) -> Any:
    return importlib.import_module(f"mcp_resume_asgi.{name}")


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_module_keeps_its_names_at_its_old_path(old: str) -> None:
    new, names = MOVED[old]
    old_module, new_module = _module(old), _module(new)
    for name in names.split():
        assert getattr(old_module, name) is getattr(new_module, name), f"{old}.{name}"
        assert name in new_module.__all__, f"{new}.{name}"
    assert sorted(old_module.__all__) == sorted(names.split())


@pytest.mark.parametrize(("old", "name", "new"), SPLIT, ids=[f"{o}.{n}" for o, n, _ in SPLIT])
def test_a_moved_name_stays_importable_from_its_old_module(old: str, name: str, new: str) -> None:
    assert getattr(_module(old), name) is getattr(_module(new), name)
    assert name in _module(new).__all__


@pytest.mark.parametrize(("old", "name", "home"), BORROWED, ids=[f"{o}.{n}" for o, n, _ in BORROWED])
def test_a_name_a_moved_module_borrowed_stays_importable_from_its_old_path(
    old: str, name: str, home: str
) -> None:
    assert getattr(_module(old), name) is getattr(_module(home), name)


def test_the_engine_package_offers_what_the_engine_module_did() -> None:
    assert sorted(_module("engine").__all__) == ["Delivery", "Engine", "RetryAnswer", "STREAM_SEGMENT"]


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
PARTS = ["engine/delivery", "engine/recorder", "engine/cancellation", "engine/follower"]


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
    )
    assert stream.writer.core is stream.core and stream.writer.host.first is None
    for path in PARTS:
        text = (PACKAGE / f"{path}.py").read_text()
        tree = ast.parse(text)
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "mcp_resume_asgi.engine.hosted" not in imported, path
        assert "Provided by" not in text, path
