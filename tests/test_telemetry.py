"""Telemetry (issue 23, part 1): the spans and instruments of what the middleware answers itself,
read with the OpenTelemetry SDK's in-memory span exporter and metric reader, on both stores.

Providers are passed (`telemetry=OpenTelemetry(...)`), never set globally: each test reads only
its own. The app (a stock `MCPServer`) reports through the global providers, which are no-ops here.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from mcp_resume_asgi import MemoryStore, Policy, ResumeMiddleware, Store, StreamMeta, resumable
from mcp_resume_asgi.store.base import StreamKind, StreamState
from mcp_resume_asgi.telemetry import OFF, OpenTelemetry, telemetry_from
from mcp_resume_asgi.telemetry import names as n
from mcp_resume_asgi.wire.sse import encode_payload
from tests.apps.tasks_app import create_app
from tests.support.server import serve, serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.test_tasks import AT_ONCE, DECLARED, Harness, created

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
CLIENT_TRACE = "00-11111111111111111111111111111111-2222222222222222-01"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # (serve_in_loop, for Redis, is asyncio's)


@pytest.fixture(params=["memory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        require_redis()
    return str(request.param)


class Otel:
    """A tracer and a meter provider of the test's own, read in memory."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.setting = OpenTelemetry(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)

    def finished(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if name is None or s.name == name]

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data is not None else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found += list(metric.data.data_points)
        return found

    def count(self, name: str, **attributes: Any) -> float:
        """A counter's value (or a histogram's sample count) where the attributes match."""
        total = 0.0
        for point in self.points(name):
            if all(
                point.attributes.get(key.replace("__", ".")) == value for key, value in attributes.items()
            ):
                total += point.value if hasattr(point, "value") else point.count
        return total


# ---------------------------------------------------------------------- tasks: one trace
@contextlib.asynccontextmanager
async def tasks_stack(
    store_kind: str, otel: Otel, factory: Callable[[], ASGIApp] = create_app
) -> AsyncIterator[Harness]:
    if store_kind == "memory":
        store: Store = MemoryStore()
        app = resumable(factory(), policy=AT_ONCE, store=store, tasks=True, telemetry=otel.setting)
        async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
            yield Harness(client, store, app)
        return
    from mcp_resume_asgi.store import RedisStore

    redis_store = RedisStore(redis_url(), prefix=redis_prefix("test-telemetry"))
    app = resumable(
        factory(),
        policy=AT_ONCE,
        store=redis_store,
        secret="telemetry-tests-shared-secret",
        tasks=True,
        telemetry=otel.setting,
    )
    try:
        async with (
            serve_in_loop(app) as info,
            httpx.AsyncClient(base_url=info.base_url, timeout=15) as client,
        ):
            yield Harness(client, redis_store, app)
    finally:
        await redis_store.clear()
        await redis_store.aclose()


async def test_a_task_submit_and_three_polls_are_one_trace_linked_to_its_creation(store_kind: str) -> None:
    otel = Otel()
    async with tasks_stack(store_kind, otel) as h:
        task_id = created(await h.call("slow", {"seconds": 0.3, "tag": "traced"}))
        stream_id = h.stream_of(task_id)
        polls = [await h.get(task_id) for _ in range(3)]
        assert all(poll["taskId"] == task_id for poll in polls)
        final = await h.until_terminal(task_id)
        assert final["status"] == "completed"
    [creation] = otel.finished("create_task slow")
    assert creation.kind is SpanKind.INTERNAL
    assert creation.attributes is not None and creation.attributes[n.ATTR_TASK_ID] == task_id
    gets = otel.finished("tasks/get")
    assert len(gets) >= 4  # three polls, and those until it ended
    for span in gets:
        assert span.kind is SpanKind.SERVER
        assert span.context.trace_id == creation.context.trace_id, "one trace"
        assert span.parent is not None and span.parent.span_id == creation.context.span_id
        [link] = span.links
        assert link.context.span_id == creation.context.span_id
        assert link.attributes == {n.ATTR_LINK_ROLE: "created_by"}
        attributes = dict(span.attributes or {})
        assert attributes["mcp.method.name"] == "tasks/get" and attributes[n.ATTR_POLL] is True
        assert attributes["mcp.protocol.version"] == "2026-07-28" and "mcp.session.id" not in attributes
        assert attributes[n.ATTR_STREAM_ID] == stream_id and attributes[n.ATTR_TASK_ID] == task_id
        assert attributes["jsonrpc.request.id"].isdigit() and attributes["client.address"] == "127.0.0.1"
        assert attributes["network.transport"] == "tcp" and "error.type" not in attributes
    assert otel.count(n.OPERATION_DURATION, mcp__method__name="tasks/get") == len(gets)
    assert otel.count(n.TASKS, mcp_resume__task__status="working") == 1
    assert otel.count(n.TASKS, mcp_resume__task__status="completed") == 1
    if store_kind == "redis":  # (a store kept in process is not timed: test_otel_samples.py)
        assert otel.count(n.STORE_OPERATION_DURATION, mcp_resume__store__name="redis") > 0
    else:
        assert otel.points(n.STORE_OPERATION_DURATION) == []


async def test_a_poll_with_its_own_trace_context_is_its_child_and_still_linked(store_kind: str) -> None:
    otel = Otel()
    async with tasks_stack(store_kind, otel) as h:
        task_id = created(await h.call("echo", {"text": "hi"}))
        body = h.body("tasks/get", {"taskId": task_id}, DECLARED)
        body["params"]["_meta"]["traceparent"] = CLIENT_TRACE
        response = await h.client.post(
            "/mcp", json=body, headers=h.headers("tasks/get", task_id, traceparent=TRACEPARENT)
        )
        assert response.status_code == 200
    [creation] = otel.finished("create_task echo")
    [poll] = otel.finished("tasks/get")
    assert poll.context.trace_id == int(CLIENT_TRACE.split("-")[1], 16), "`params._meta` is the parent"
    links = {link.attributes[n.ATTR_LINK_ROLE]: link.context for link in poll.links if link.attributes}
    assert links["created_by"].span_id == creation.context.span_id
    assert links["http"].span_id == int(TRACEPARENT.split("-")[2], 16), "the HTTP context is linked"


async def test_a_cancel_and_an_unknown_task_are_reported_with_their_outcome(store_kind: str) -> None:
    otel = Otel()
    async with tasks_stack(store_kind, otel) as h:
        task_id = created(await h.call("slow", {"seconds": 5, "tag": "cancelled"}))
        response = await h.task("tasks/cancel", task_id)
        assert response.status_code == 200, response.text
        unknown = await h.task("tasks/get", task_id[:-4] + "AAAA")
        assert unknown.json()["error"]["code"] == -32602
    assert otel.count(n.TASKS, mcp_resume__task__status="cancelled") == 1
    [cancel] = otel.finished("tasks/cancel")
    assert "error.type" not in (cancel.attributes or {})
    [failed] = otel.finished("tasks/get")
    assert failed.attributes is not None and failed.attributes["error.type"] == "-32602"
    assert not failed.links and n.ATTR_TASK_ID not in failed.attributes
    assert otel.count(n.OPERATION_DURATION, mcp__method__name="tasks/get", error__type="-32602") == 1


@pytest.mark.slow
async def test_another_principals_poll_carries_nothing_of_the_task(store_kind: str) -> None:
    from tests.apps.auth_app import create_app as auth_app

    otel = Otel()
    async with tasks_stack(store_kind, otel, factory=auth_app) as h:
        alice = {"authorization": "Bearer token-alice"}
        task_id = created(await h.call("whoami", {"seconds": 0.3, "steps": 1}, **alice))
        body = h.body("tasks/get", {"taskId": task_id}, DECLARED)
        as_bob = await h.client.post(
            "/mcp", json=body, headers=h.headers("tasks/get", task_id, authorization="Bearer token-bob")
        )
        assert as_bob.status_code == 400
        mine = await h.client.post("/mcp", json=body, headers=h.headers("tasks/get", task_id, **alice))
        assert mine.status_code == 200
    [creation] = otel.finished("create_task whoami")
    bob, alices = otel.finished("tasks/get")
    assert not bob.links and bob.context.trace_id != creation.context.trace_id
    assert n.ATTR_STREAM_ID not in (bob.attributes or {}) and n.ATTR_TASK_ID not in (bob.attributes or {})
    assert alices.context.trace_id == creation.context.trace_id and alices.links


# ---------------------------------------------------------------------- resumes of a stream
async def _auth_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers every POST (the admission probe) with an empty result; whose it is: `x-user`."""
    if scope["type"] != "http":
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": b'{"jsonrpc":"2.0","id":1,"result":{}}'})


def _user(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"x-user":
            return str(value.decode())
    return None


@contextlib.asynccontextmanager
async def resume_stack(
    store_kind: str, otel: Otel
) -> AsyncIterator[tuple[httpx.AsyncClient, ResumeMiddleware]]:
    if store_kind == "memory":
        mw = ResumeMiddleware(_auth_app, store=MemoryStore(), principal=_user, telemetry=otel.setting)
        async with serve(mw) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
            yield client, mw
        return
    from mcp_resume_asgi.store import RedisStore

    redis_store = RedisStore(redis_url(), prefix=redis_prefix("test-telemetry-resume"))
    mw = ResumeMiddleware(
        _auth_app,
        store=redis_store,
        secret="telemetry-tests-shared-secret",
        principal=_user,
        telemetry=otel.setting,
    )
    try:
        async with serve_in_loop(mw) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
            yield client, mw
    finally:
        await redis_store.clear()
        await redis_store.aclose()


async def _recorded(
    mw: ResumeMiddleware, stream_id: str, events: int, *, trace: str | None, max_events: int = 100
) -> None:
    """A finished request's stream, as the engine records it (its creating request's trace with it)."""
    store = mw.store
    meta = StreamMeta(stream_id, StreamKind.REQUEST, None, "alice", "2025-11-25", "/mcp", 7, "tools/call")
    meta.trace = trace
    await store.create_stream(meta, ttl_s=60)
    payloads = [
        (seq, encode_payload(json.dumps({"jsonrpc": "2.0", "method": "notifications/message"}).encode()))
        for seq in range(1, events + 1)
    ]
    await store.append(stream_id, payloads, max_events=max_events, max_bytes=1 << 20)
    await store.update_stream(stream_id, final_seq=events, state=StreamState.COMPLETED)


def _event_id(mw: ResumeMiddleware, stream_id: str, seq: int) -> str:
    return (mw.engine.signer.event_prefix(stream_id) + str(seq).encode()).decode()


async def test_a_resume_is_linked_to_the_request_that_created_the_stream(store_kind: str) -> None:
    otel = Otel()
    async with resume_stack(store_kind, otel) as (client, mw):
        await _recorded(mw, "streamtraced0000000001", 3, trace=TRACEPARENT)
        headers = {"accept": "text/event-stream", "mcp-protocol-version": "2025-11-25", "x-user": "alice"}
        first = _event_id(mw, "streamtraced0000000001", 1)
        resumed = await client.get("/mcp", headers={**headers, "last-event-id": first})
        assert resumed.status_code == 200 and resumed.text.count("notifications/message") == 2
        done = await client.get(
            "/mcp", headers={**headers, "last-event-id": _event_id(mw, "streamtraced0000000001", 3)}
        )
        assert done.status_code == 204
        refused = await client.get("/mcp", headers={**headers, "x-user": "bob", "last-event-id": first})
        assert refused.status_code == 404
        await _recorded(mw, "streamgapped0000000001", 5, trace=None, max_events=2)
        gap = await client.get(
            "/mcp", headers={**headers, "last-event-id": _event_id(mw, "streamgapped0000000001", 1)}
        )
        assert gap.status_code == 200 and "cannot resume" in gap.text
    spans = otel.finished("stream/resume")
    assert len(spans) == 4
    replayed, nothing, bob, gapped = spans
    creator = int(TRACEPARENT.split("-")[2], 16)
    for mine in (replayed, nothing):
        assert mine.kind is SpanKind.SERVER and mine.context.trace_id == int(TRACEPARENT.split("-")[1], 16)
        assert [link.context.span_id for link in mine.links] == [creator]
        assert mine.attributes is not None and mine.attributes[n.ATTR_POLL] is True
        assert mine.attributes[n.ATTR_STREAM_ID] == "streamtraced0000000001"
    assert nothing.attributes is not None and nothing.attributes["http.response.status_code"] == 204
    assert not bob.links and n.ATTR_STREAM_ID not in (bob.attributes or {}), "nothing of alice's stream"
    assert bob.context.trace_id != replayed.context.trace_id
    assert bob.attributes is not None and bob.attributes["error.type"] == "-32600"
    assert not gapped.links  # (created without a trace)
    for outcome, count in (("replayed", 1), ("204", 1), ("refused", 1), ("gap", 1)):
        assert otel.count(n.RESUMES, mcp_resume__resume__outcome=outcome) == count, outcome
    [size] = otel.points(n.REPLAY_SIZE)  # (the gap was answered before any replay)
    assert size.count == 1 and size.sum == 2
    assert otel.count(n.REPLAY_DURATION) == 1


async def test_a_stream_url_post_of_answers_is_a_span_too(store_kind: str) -> None:
    otel = Otel()
    async with resume_stack(store_kind, otel) as (client, mw):
        token = mw.engine.signer.link_token("nosuchstream000000001", 0)
        answer = [{"jsonrpc": "2.0", "id": 1, "result": {}}]
        response = await client.post(
            f"/mcp/streams/{token}",
            json=answer,
            headers={"x-user": "alice", "mcp-protocol-version": "2025-11-25"},
        )
        assert response.status_code == 404
    [span] = otel.finished("stream/answer")
    assert span.attributes is not None and span.attributes["error.type"] == "-32600"
    assert n.ATTR_POLL not in span.attributes and not span.links


class _Shared(MemoryStore):
    """A memory store standing for one other processes reach (as Redis), which alone is timed."""

    shared = True


async def test_the_store_is_timed_and_its_outages_counted_once() -> None:
    from mcp_resume_asgi.store.observed import ObservedStore, observed

    otel = Otel()
    telemetry = telemetry_from(otel.setting)
    inner = _Shared()
    store = observed(inner, telemetry)
    assert isinstance(store, ObservedStore) and observed(inner, OFF) is inner
    assert await store.get_stream("nothing") is None
    down = [True]

    async def get_key(key: str) -> str | None:
        if down[0]:
            raise ConnectionError("refused")
        return None

    inner.get_key = get_key  # type: ignore[method-assign]
    inner.is_unavailable_error = lambda exc: isinstance(exc, ConnectionError)  # type: ignore[method-assign]
    for _ in range(3):
        with pytest.raises(ConnectionError):
            await store.get_key("k")
    down[0] = False
    assert await store.get_key("k") is None
    down[0] = True
    with pytest.raises(ConnectionError):
        await store.get_key("k")
    assert otel.count(n.STORE_OUTAGES, mcp_resume__store__name="_shared") == 2
    assert otel.count(n.STORE_OPERATION_DURATION, mcp_resume__store__operation="get_stream") == 1
    assert otel.count(n.STORE_OPERATION_DURATION, mcp_resume__store__operation="get_key") == 5
    assert otel.count(n.STORE_OPERATION_DURATION, error__type="ConnectionError") == 4


def test_a_trace_stored_with_a_record_is_bounded_and_optional() -> None:
    from mcp_resume_asgi.tasks.record import TaskRecord

    record = TaskRecord("s", None, 1.0, 1000, 50, "/mcp", "2026-07-28")
    assert "trace" not in json.loads(record.encode()), "an earlier version reads it as before"
    traced = TaskRecord.decode(json.dumps({**json.loads(record.encode()), "trace": TRACEPARENT}))
    assert traced is not None and traced.trace == TRACEPARENT
    assert TaskRecord.decode(json.dumps({**json.loads(record.encode()), "trace": "x" * 1000})) is None


# ---------------------------------------------------------------------- the REST face
async def test_every_rest_route_is_a_span_and_counted_by_route_and_status() -> None:
    from tests.apps.rest_app import create_app as rest_app

    otel = Otel()
    app = resumable(rest_app(), store=MemoryStore(), rest=True, telemetry=otel.setting)
    async with serve_in_loop(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        tools = await client.get("/mcp/tools")
        assert tools.status_code == 200
        unknown = await client.get("/mcp/tools/nosuchtool/calls/call-1")
        assert unknown.status_code == 404
        bad = await client.delete("/mcp/tools")
        assert bad.status_code == 405
    assert otel.count(n.REST_CALLS, http__route="/mcp/tools", http__response__status_code=200) >= 1
    assert (
        otel.count(n.REST_CALLS, http__route="/mcp/tools/{tool}/calls/{id}", http__response__status_code=404)
        == 1
    )
    assert otel.count(n.REST_CALLS, http__route="(unmatched)", http__response__status_code=405) == 1
    listed = otel.finished("tools/list")
    assert listed and listed[-1].kind is SpanKind.SERVER
    assert (listed[-1].attributes or {})["http.route"] == "/mcp/tools"
    [get] = [s for s in otel.finished("tasks/get") if (s.attributes or {}).get(n.ATTR_REST_OPERATION)]
    attributes = dict(get.attributes or {})
    assert attributes["error.type"] == "404" and attributes[n.ATTR_REST_OPERATION] == "call/get"
    assert "call-1" not in str(attributes), "the route's template, not the caller's path"
    assert attributes["gen_ai.tool.name"] == n.OTHER, "a tool the app has not: not the caller's word"


async def test_an_at_will_close_of_a_resumed_stream_is_counted_by_reason() -> None:
    otel = Otel()
    policy = Policy(retry_ms=100, max_connection_s=0.3)
    mw = ResumeMiddleware(
        _auth_app, store=MemoryStore(), policy=policy, principal=_user, telemetry=otel.setting
    )
    async with serve(mw) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        store = mw.store
        meta = StreamMeta("streamrunning00000001", StreamKind.REQUEST, None, "alice", "2025-11-25", "/mcp", 7)
        await store.create_stream(meta, ttl_s=60)  # running, hosted nowhere here: served from the store
        headers = {"accept": "text/event-stream", "mcp-protocol-version": "2025-11-25", "x-user": "alice"}
        event_id = _event_id(mw, "streamrunning00000001", 0)
        with anyio.fail_after(10):
            resumed = await client.get("/mcp", headers={**headers, "last-event-id": event_id})
        assert resumed.status_code == 200 and "retry: 100" in resumed.text
    assert otel.count(n.STREAM_CLOSES, mcp_resume__close__reason="max_connection") == 1
    assert otel.count(n.RESUMES, mcp_resume__resume__outcome="replayed") == 1
    [size] = otel.points(n.REPLAY_SIZE)
    assert size.count == 1 and size.sum == 0  # (nothing was recorded before it)


# ---------------------------------------------------------------------- the engine (part 2)
def executing(otel: Otel, app: ASGIApp) -> ASGIApp:
    """The app, its execution a span of the test's tracer (as an instrumented app's own spans):
    its parent is whatever context the app's request runs in."""
    tracer = otel.tracer_provider.get_tracer("the-app")

    async def traced(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        with tracer.start_as_current_span("execute"):
            await app(scope, receive, send)

    return traced


def _span_id(traceparent: str) -> int:
    return int(traceparent.split("-")[2], 16)


def _trace_id(traceparent: str) -> int:
    return int(traceparent.split("-")[1], 16)


async def test_a_task_detached_and_its_execution_are_reported_and_in_the_callers_trace(
    store_kind: str,
) -> None:
    from tests.apps.tasks_app import open_gate

    otel = Otel()
    tag = f"traced-{store_kind}"
    async with tasks_stack(store_kind, otel, lambda: executing(otel, create_app())) as h:
        task_id = created(await h.call("gated", {"tag": tag}, traceparent=CLIENT_TRACE))
        await h.get(task_id)
        # The call became a task: its client was let go, its app runs on with nobody attached.
        assert otel.count(n.STREAMS_ATTACHED) == 0
        assert otel.count(n.STREAMS_DETACHED) == 1
        recorded = otel.count(n.EVENTS_RECORDED)
        open_gate(tag)
        final = await h.until_terminal(task_id)
        assert final["status"] == "completed"
        with anyio.fail_after(10):
            while otel.count(n.STREAMS_DETACHED) != 0:  # (the app's end is noted after its answer)
                await anyio.sleep(0.01)
        assert otel.count(n.EVENTS_RECORDED) > recorded >= 0
        assert otel.count(n.STREAMS_ATTACHED) == 0
    [creation] = otel.finished("create_task gated")
    executions = [
        s for s in otel.finished("execute") if s.parent and s.parent.span_id == _span_id(CLIENT_TRACE)
    ]
    assert len(executions) == 1, "the app's execution is a child of the request that created the task"
    [execution] = executions
    assert execution.context.trace_id == creation.context.trace_id == _trace_id(CLIENT_TRACE)
    gets = otel.finished("tasks/get")
    assert gets and all(span.context.trace_id == _trace_id(CLIENT_TRACE) for span in gets), "one trace"


async def test_the_apps_execution_is_a_child_of_an_outer_asgi_span_even_after_its_request_returned() -> None:
    from tests.apps.tasks_app import open_gate

    otel = Otel()
    tracer = otel.tracer_provider.get_tracer("outer-asgi")
    inner = resumable(
        executing(otel, create_app()), policy=AT_ONCE, store=MemoryStore(), tasks=True, telemetry=otel.setting
    )

    async def outer(
        scope: Scope, receive: Receive, send: Send
    ) -> None:  # (as OpenTelemetry's ASGI middleware)
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        with tracer.start_as_current_span(f"{scope['method']} {scope['path']}"):
            await inner(scope, receive, send)

    async with serve(outer) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        h = Harness(client, MemoryStore(), inner)
        task_id = created(await h.call("gated", {"tag": "outer"}))
        open_gate("outer")
        assert (await h.until_terminal(task_id))["status"] == "completed"
    [creation] = otel.finished("create_task gated")
    [post] = [s for s in otel.finished("POST /mcp") if s.context.trace_id == creation.context.trace_id]
    [execution] = [s for s in otel.finished("execute") if s.context.trace_id == post.context.trace_id]
    assert execution.parent is not None and execution.parent.span_id == post.context.span_id
    assert post.end_time is not None and execution.end_time is not None
    assert execution.end_time > post.end_time, "the request returned (a task) while its app ran on"
    gets = otel.finished("tasks/get")
    assert gets, "polls: each in its own request's trace (the outer span), linked to the task's creation"
    assert all([link.context.span_id for link in span.links] == [creation.context.span_id] for span in gets)


async def test_a_rest_get_of_a_running_call_is_linked_to_its_tasks_creation() -> None:
    from tests.apps.rest_app import create_app as rest_app

    otel = Otel()
    policy = Policy(task_poll_interval_ms=100, task_ttl_s=120)
    app = resumable(rest_app(), policy=policy, store=MemoryStore(), rest=True, telemetry=otel.setting)
    async with serve_in_loop(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=20) as client:
        url = "/mcp/tools/slow/calls/traced-1"
        put = await client.put(
            url,
            json={"steps": 40, "tag": "rest-traced", "step_s": 0.25},
            headers={"idempotency-key": "k-traced", "traceparent": CLIENT_TRACE},
        )
        assert put.status_code == 201 and put.json()["status"] == "running", put.text
        got = await client.get(url)
        assert got.status_code == 200 and got.json()["status"] == "running", got.text
        cancelled = await client.post(f"{url}/cancel")
        assert cancelled.status_code == 200, cancelled.text
    [creation] = [s for s in otel.finished() if s.name.startswith("create_task")]
    assert creation.context.trace_id == _trace_id(CLIENT_TRACE)
    [get] = [s for s in otel.finished("tasks/get slow") if (s.attributes or {}).get("http.route")]
    assert [link.context.span_id for link in get.links] == [creation.context.span_id]
    assert get.context.trace_id == _trace_id(CLIENT_TRACE), (
        "a REST poll joins the trace of the call's creation"
    )
    assert (get.attributes or {}).get(n.ATTR_TASK_ID) is not None


async def test_a_call_closed_at_will_and_resumed_where_it_runs_is_counted_and_replayed() -> None:
    from tests.apps.lowlevel_app import create_app as lowlevel_app
    from tests.support.raw import RawSession

    otel = Otel()
    policy = Policy(retry_ms=100, max_connection_s=0.3)
    app = resumable(lowlevel_app(), store=MemoryStore(), policy=policy, telemetry=otel.setting)
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        session = RawSession(client)
        await session.initialize()
        await session.notify("notifications/initialized")
        call = session.tool_call("slow_progress", {"seconds": 1.2, "steps": 6}, progress=True)
        reply = await session.exchange("POST", "/mcp", call)
        resumes = 0
        with anyio.fail_after(20):
            while not any('"result"' in (event.data or "") for event in reply.events):
                last = reply.last_id
                assert last is not None, reply.raw
                reply = await session.exchange("GET", "/mcp", headers=session.headers(last_event_id=last))
                resumes += 1
            while otel.count(n.STREAMS_ATTACHED) or otel.count(n.STREAMS_DETACHED):
                await anyio.sleep(0.01)  # (the last connection is noted let go after its answer)
    assert resumes >= 1, "closed at will at least once before the answer (1.2 s against 0.3 s)"
    assert otel.count(n.STREAM_CLOSES, mcp_resume__close__reason="max_connection") >= resumes
    assert otel.count(n.RESUMES, mcp_resume__resume__outcome="replayed") == resumes
    assert otel.count(n.REPLAY_DURATION) == resumes, "each resume of the stream hosted here caught up"
    assert otel.count(n.EVENTS_RECORDED) >= 7  # six progress notifications and the result


def test_counters_of_two_stacks_on_one_provider_add_up() -> None:
    """Counters are tallied in process and read when the SDK collects; the SDK keeps the first
    callback of an instrument's name per provider, so every stack on a provider shares them."""
    otel = Otel()
    first, second = telemetry_from(otel.setting), telemetry_from(otel.setting)
    other = Otel()
    third = telemetry_from(other.setting)
    first.events_recorded(3)
    second.events_recorded(2)
    third.events_recorded(7)
    first.streams_attached(1)
    second.streams_attached(1)
    first.streams_attached(-1)
    second.resumed("gap")
    first.rest_call("/mcp/tools", 200)
    assert otel.count(n.EVENTS_RECORDED) == 5 and other.count(n.EVENTS_RECORDED) == 7
    assert otel.count(n.STREAMS_ATTACHED) == 1
    assert otel.count(n.RESUMES, mcp_resume__resume__outcome="gap") == 1
    assert otel.count(n.REST_CALLS, http__route="/mcp/tools", http__response__status_code=200) == 1
    first.events_recorded(1)
    assert otel.count(n.EVENTS_RECORDED) == 6, "cumulative, read again at each collection"
