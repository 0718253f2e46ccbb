"""Hostile input, generated: everything the middleware parses, against the same app wrapped and bare.

Two stacks of the probe app run in-process on one event loop (a blocking portal):

* wrapped: `resumable(Recorder(app))` - the recorder sits between the middleware and
  the app and notes every request that reaches the app (method, path, headers, body);
* bare: `Recorder(app)`, the same app unwrapped.

Each generated request goes to both (a real ASGI call: scope, receive, send; a
response still streaming after a short while is left, the way a client
disconnects). Invariants, for every input:

1. never a 5xx from the middleware: the wrapped stack answers >= 500 only when the
   bare app does so for the same input (its own error);
2. never another session's data: a victim session (in the wrapped stack) has a
   running stream, a finished one, a standalone stream and an Idempotency-Key;
   their event ids, Link URLs and key are fed to the generators, and no response to
   the attacker contains the victim's session id, event ids, or the marker that only
   the victim's events carry; at the end the victim's stream is intact;
3. the app sees nothing it would not have seen unwrapped: every request reaching the
   app behind the middleware equals one the bare app received for the same input
   (session ids normalised).

Generated: `Last-Event-ID` values (mutated genuine ids, odd digits, huge, garbage),
Link URL tokens, JSON-RPC bodies (non-JSON, wrong types, batches, deep nesting,
sizes around `max_body_bytes`), and the headers (`mcp-session-id`,
`mcp-protocol-version`, `accept`, `content-type`, `idempotency-key`, duplicates).

`max_examples` is modest so the file runs in well under a minute; with `CI=true`
the examples are derandomised (the same inputs on every run).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_resume_asgi import MemoryStore, Policy, resumable
from mcp_resume_asgi.engine.admission import PROBE_ID_PREFIX
from tests.apps.probe_app import create_app
from tests.support.timing import scaled

CI = os.environ.get("CI") == "true"
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")),
    deadline=None,
    derandomize=CI,
    database=None if CI else settings.default.database,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
MAX_BODY = 64 * 1024
WAIT_S = 0.3
"""How long a response may stream before the client leaves (most answers come at once)."""
VERSION = "2025-11-25"
ACCEPT_BOTH = b"application/json, text/event-stream"
EXAMPLE_HEADER = b"x-fuzz-example"


# --------------------------------------------------------------------------- in-process ASGI


@dataclass
class Seen:
    """One request as it reached the app."""

    method: str
    path: str
    headers: list[tuple[bytes, bytes]]
    body: bytearray = field(default_factory=bytearray)


class Recorder:
    """Between the middleware and the app: notes what the app receives."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[Seen] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seen = Seen(scope["method"], scope["path"], list(scope["headers"]))
        self.seen.append(seen)

        async def tapped() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen.body.extend(message.get("body", b""))
            return message

        await self.app(scope, tapped, send)


@dataclass
class Answer:
    status: int | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    complete: bool = False
    error: BaseException | None = None
    """An exception that escaped the ASGI call (a server answers 500 for it)."""

    @property
    def server_error(self) -> bool:
        return self.error is not None or (self.status is not None and self.status >= 500)

    def text(self) -> bytes:
        return b"\n".join(
            [str(self.status).encode(), *(k + b": " + v for k, v in self.headers), bytes(self.body)]
        )

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k.lower() == name), None)

    def events(self) -> list[dict[str, bytes]]:
        out = []
        for block in bytes(self.body).replace(b"\r\n", b"\n").split(b"\n\n"):
            fields: dict[str, bytes] = {}
            for line in block.split(b"\n"):
                name, _, value = line.partition(b": ")
                if name in (b"id", b"data", b"retry"):
                    fields[name.decode()] = fields.get(name.decode(), b"") + value
            if fields:
                out.append(fields)
        return out


async def call(
    tg: anyio.abc.TaskGroup,
    app: ASGIApp,
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]],
    body: bytes = b"",
    *,
    wait_s: float = WAIT_S,
    until: Any = None,
) -> Answer:
    """One HTTP request as a server would make it. The ASGI call runs on in `tg` (the engine's
    work outlives the response); after `wait_s` (or once `until(answer)` holds) the client leaves."""
    answer = Answer()
    gone = anyio.Event()
    finished = anyio.Event()
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    sent_body = False

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if gone.is_set():
            return  # the connection is closed: the server drops what is written to it
        if message["type"] == "http.response.start":
            answer.status = int(message["status"])
            answer.headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            answer.body.extend(message.get("body", b""))
            if not message.get("more_body", False):
                answer.complete = True
                finished.set()
            elif until is not None and until(answer):
                finished.set()

    async def run() -> None:
        try:
            await app(scope, receive, send)
        except Exception as exc:
            answer.error = exc
        finally:
            finished.set()

    tg.start_soon(run)
    with anyio.move_on_after(scaled(wait_s)):
        await finished.wait()
    gone.set()
    return answer


# --------------------------------------------------------------------------- the two stacks


class Session:
    """A session id placeholder in generated headers, filled in per stack."""

    def __init__(self, prefix: bytes = b"", suffix: bytes = b"") -> None:
        self.prefix = prefix
        self.suffix = suffix

    def __repr__(self) -> str:
        return f"Session({self.prefix!r}, {self.suffix!r})"


HeaderValue = bytes | Session


@dataclass
class Stack:
    name: str
    app: ASGIApp
    recorder: Recorder
    session_id: bytes = b""

    def headers(self, generated: list[tuple[bytes, HeaderValue]], example: int) -> list[tuple[bytes, bytes]]:
        out = [(EXAMPLE_HEADER, str(example).encode())]
        for name, value in generated:
            if isinstance(value, Session):
                value = value.prefix + self.session_id + value.suffix
            out.append((name, value))
        return out

    def normalised(self, seen: Seen) -> tuple[str, str, tuple[tuple[bytes, bytes], ...], bytes]:
        sid = self.session_id
        headers = tuple((k, v.replace(sid, b"<SID>") if sid else v) for k, v in seen.headers)
        return seen.method, seen.path, headers, bytes(seen.body)


@dataclass
class Victim:
    session_id: bytes
    marker: bytes
    """Only the victim's events carry it (its progress token, its echo text)."""
    stream_prefix: bytes
    """`<stream id>.<signature>:` of the victim's running stream."""
    event_ids: list[str]
    links: list[str]
    idempotency_key: str
    call_body: bytes

    @property
    def stream_ids(self) -> set[bytes]:
        ids = {e.split(".", 1)[0].encode() for e in self.event_ids}
        return ids | {link.rsplit("/", 1)[1].split("~", 1)[0].encode() for link in self.links}

    def leaks(self, request: bytes, answer: Answer) -> list[str]:
        """What of the victim's is in the answer (and was not in the request)."""
        text = answer.text()
        found = []
        if self.session_id in text:
            found.append("the victim's session id")
        # The marker is in the victim's POST body, which the attacker may replay (Idempotency-Key):
        # then its own call carries the marker too, and only the victim's stream ids tell.
        if self.marker in text and self.marker not in request:
            found.append("the victim's data")
        for stream_id in self.stream_ids:
            if stream_id in text and stream_id not in request:
                found.append(f"a victim stream id ({stream_id!r})")
        return found


class Harness:
    def __init__(self, portal: BlockingPortal, tg: anyio.abc.TaskGroup, wrapped: Stack, bare: Stack) -> None:
        self.portal = portal
        self.tg = tg
        self.wrapped = wrapped
        self.bare = bare
        self.victim: Victim | None = None
        self.examples = 0

    def exchange(
        self, method: str, path: str, headers: list[tuple[bytes, HeaderValue]], body: bytes = b""
    ) -> tuple[Answer, Answer]:
        """Send one generated request to both stacks and check the invariants; returns (wrapped, bare)."""
        self.examples += 1
        return self.portal.call(self._exchange, method, path, headers, body, self.examples)

    async def _exchange(
        self, method: str, path: str, generated: list[tuple[bytes, HeaderValue]], body: bytes, example: int
    ) -> tuple[Answer, Answer]:
        results: dict[str, Answer] = {}
        marks = {s.name: len(s.recorder.seen) for s in (self.wrapped, self.bare)}

        async def one(stack: Stack) -> None:
            results[stack.name] = await call(
                self.tg, stack.app, method, path, stack.headers(generated, example), body
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, self.wrapped)
            tg.start_soon(one, self.bare)
        await anyio.sleep(0.01)  # let requests the engine detached reach the app
        wrapped, bare = results["wrapped"], results["bare"]
        request = method.encode() + path.encode("utf-8", "surrogateescape") + body
        request += b"".join(v if isinstance(v, bytes) else v.prefix + v.suffix for _, v in generated)

        # 1. No 5xx of the middleware's own.
        assert not wrapped.server_error or bare.server_error, (
            f"the middleware answered {wrapped.status} / raised {wrapped.error!r} "
            f"where the bare app answered {bare.status}: {bytes(wrapped.body[:300])!r}"
        )
        # 2. Nothing of the victim's.
        assert self.victim is not None
        leaks = self.victim.leaks(request, wrapped)
        assert not leaks, f"response to the attacker contains {leaks}: {wrapped.text()[:600]!r}"

        # 3. The app sees only what it would have seen unwrapped - and the admission checks
        # (a `ping` with the requester's own headers, asking the app before the store answers).
        def mine(stack: Stack) -> list[Seen]:
            return [
                s
                for s in stack.recorder.seen[marks[stack.name] :]
                if (EXAMPLE_HEADER, str(example).encode()) in s.headers
                and PROBE_ID_PREFIX.encode() not in s.body
            ]

        bare_seen = [self.bare.normalised(s) for s in mine(self.bare)]
        for seen in mine(self.wrapped):
            got = self.wrapped.normalised(seen)
            assert got in bare_seen, (
                "the app behind the middleware received a request the bare app did not:\n"
                f"  wrapped: {got!r}\n  bare:    {bare_seen!r}"
            )
        return wrapped, bare

    def ensure_sessions(self) -> None:
        """Re-open the attacker's sessions if an input ended them (a valid DELETE)."""
        self.portal.call(self._ensure_sessions)

    async def _ensure_sessions(self) -> None:
        for stack in (self.wrapped, self.bare):
            probe = await call(
                self.tg,
                stack.app,
                "POST",
                "/mcp",
                jsonrpc_headers(stack.session_id),
                json.dumps({"jsonrpc": "2.0", "id": 0, "method": "ping"}).encode(),
            )
            if probe.status != 200:
                stack.session_id = await initialize(self.tg, stack.app)


def jsonrpc_headers(session_id: bytes | None) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"content-type", b"application/json"),
        (b"accept", ACCEPT_BOTH),
        (b"mcp-protocol-version", VERSION.encode()),
    ]
    if session_id:
        headers.append((b"mcp-session-id", session_id))
    return headers


async def initialize(tg: anyio.abc.TaskGroup, app: ASGIApp) -> bytes:
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": VERSION,
            "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "0"},
        },
    }
    answer = await call(tg, app, "POST", "/mcp", jsonrpc_headers(None), json.dumps(body).encode(), wait_s=5)
    assert answer.status == 200, answer.text()
    session_id = answer.header(b"mcp-session-id")
    assert session_id
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    assert (await call(tg, app, "POST", "/mcp", jsonrpc_headers(session_id), note, wait_s=5)).status == 202
    return session_id


async def make_victim(tg: anyio.abc.TaskGroup, app: ASGIApp) -> Victim:
    session_id = await initialize(tg, app)
    marker = secrets.token_hex(12).encode()
    key = "victim-" + secrets.token_hex(8)
    running = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {
                "name": "progress",
                "arguments": {"steps": 600, "seconds": 300},
                "_meta": {"progressToken": marker.decode()},
            },
        }
    ).encode()
    headers = [*jsonrpc_headers(session_id), (b"idempotency-key", key.encode())]
    first = await call(
        tg,
        app,
        "POST",
        "/mcp",
        headers,
        running,
        wait_s=5,
        until=lambda a: a.body.count(b"progressToken") >= 1,
    )
    assert first.status == 200 and marker in first.body, first.text()
    done = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 8,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": marker.decode()}},
        }
    ).encode()
    finished = await call(tg, app, "POST", "/mcp", jsonrpc_headers(session_id), done, wait_s=5)
    assert finished.complete and marker in finished.body, finished.text()
    standalone = await call(
        tg,
        app,
        "GET",
        "/mcp",
        [
            (b"accept", b"text/event-stream"),
            (b"mcp-session-id", session_id),
            (b"mcp-protocol-version", VERSION.encode()),
        ],
        wait_s=0.3,
    )
    assert standalone.status == 200, standalone.text()
    event_ids, links = [], []
    for answer in (first, finished, standalone):
        event_ids += [e["id"].decode() for e in answer.events() if "id" in e]
        link = answer.header(b"link")
        if link:
            links.append(link.decode().split(">")[0].lstrip("<"))
    prefix = event_ids[0].rsplit(":", 1)[0].encode() + b":"
    return Victim(session_id, marker, prefix, event_ids, links, key, running)


@contextlib.asynccontextmanager
async def stacks() -> AsyncIterator[tuple[anyio.abc.TaskGroup, Stack, Stack]]:
    bare_app = create_app()
    wrapped_app = create_app()
    bare_recorder = Recorder(bare_app)
    bare = Stack("bare", bare_recorder, bare_recorder)
    recorder = Recorder(wrapped_app)
    policy = Policy(retry_ms=10, max_wait_s=300, max_connection_s=5)
    wrapped = Stack(
        "wrapped",
        resumable(recorder, policy=policy, store=MemoryStore(), max_body_bytes=MAX_BODY),
        recorder,
    )
    async with (
        bare_app.router.lifespan_context(bare_app),
        wrapped_app.router.lifespan_context(wrapped_app),
        anyio.create_task_group() as tg,
    ):
        wrapped.session_id = await initialize(tg, wrapped.app)
        bare.session_id = await initialize(tg, bare.app)
        yield tg, wrapped, bare
        tg.cancel_scope.cancel()


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(stacks()) as (tg, wrapped, bare),
    ):
        h = Harness(portal, tg, wrapped, bare)
        h.victim = portal.call(make_victim, tg, wrapped.app)
        yield h


# --------------------------------------------------------------------------- strategies

LATIN1 = st.characters(min_codepoint=1, max_codepoint=255, blacklist_characters="\r\n")
"""What a header value can carry through an HTTP/1.1 server (no CR, LF, NUL)."""
header_text = st.text(LATIN1, max_size=40)
ODD_DIGITS = [
    "²",
    "³",
    "¹",
    "0",
    "00",
    "-1",
    "+1",
    " 1",
    "1 ",
    "1_000",
    "9" * 19,
    "9" * 40,
    "",
    "x",
    "½",
    "٣",
]


@st.composite
def event_id_values(draw: st.DrawFn, pool: list[str]) -> bytes:
    """Last-Event-ID values: genuine ids (the victim's), mutated; and garbage."""
    kind = draw(st.sampled_from(["genuine", "seq", "mutate", "garbage", "huge"]))
    genuine = draw(st.sampled_from(pool))
    prefix, _, _seq = genuine.rpartition(":")
    if kind == "genuine":
        value = genuine
    elif kind == "seq":
        value = prefix + ":" + draw(st.sampled_from(ODD_DIGITS) | st.sampled_from(ODD_DIGITS) | header_text)
    elif kind == "mutate":
        i = draw(st.integers(0, len(genuine)))
        value = genuine[:i] + draw(header_text) + genuine[i + draw(st.integers(0, 3)) :]
    elif kind == "huge":
        value = genuine + draw(st.sampled_from(["0", "a", ":"])) * draw(st.integers(200, 2000))
    else:
        value = draw(header_text)
    # Non-latin-1 characters (from a mutation) cannot be in a header: replace them.
    return value.encode("latin-1", "replace")


def session_values() -> st.SearchStrategy[HeaderValue]:
    return st.one_of(
        st.just(Session()),
        st.builds(Session, suffix=st.sampled_from([b"x", b" ", b"\t", b"\xff"])),
        header_text.map(lambda t: t.encode("latin-1")),
        st.just(b"x" * 300),
    )


accept_values = st.sampled_from(
    [
        ACCEPT_BOTH,
        b"text/event-stream",
        b"application/json",
        b"*/*",
        b"text/*",
        b"",
        b"text/html",
        b"TEXT/EVENT-STREAM;q=0.1",
    ]
) | header_text.map(lambda t: t.encode("latin-1"))
content_types = st.sampled_from(
    [
        b"application/json",
        b"application/json; charset=utf-8",
        b"APPLICATION/JSON",
        b"text/plain",
        b"",
        b"application/json, text/plain",
        b"application/jsonx",
    ]
) | header_text.map(lambda t: t.encode("latin-1"))
versions = st.sampled_from(
    [VERSION.encode(), b"2025-06-18", b"2025-03-26", b"2026-07-28", b"9999-99-99", b"", b"2025-11-25 "]
) | header_text.map(lambda t: t.encode("latin-1"))

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
ids = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=300),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
methods = (
    st.sampled_from(
        [
            "tools/call",
            "tools/list",
            "ping",
            "initialize",
            "notifications/initialized",
            "notifications/cancelled",
            "resources/list",
        ]
    )
    | st.text(max_size=20)
    | json_values
)
params = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"name": st.just("echo"), "arguments": st.fixed_dictionaries({"text": st.text(max_size=30)})}
    ),
    st.fixed_dictionaries(
        {"name": st.sampled_from(["echo", "nope", ""]) | json_leaves, "arguments": json_values}
    ),
)


@st.composite
def jsonrpc_messages(draw: st.DrawFn) -> Any:
    message: dict[str, Any] = {}
    if draw(st.integers(0, 5)):
        message["jsonrpc"] = draw(st.sampled_from(["2.0", "1.0", 2, None, "2.0 "]))
    if draw(st.integers(0, 4)):
        message["id"] = draw(ids)
    if draw(st.integers(0, 5)):
        message["method"] = draw(methods)
    if draw(st.booleans()):
        message["params"] = draw(params)
    if draw(st.integers(0, 6)) == 0:
        message[draw(st.sampled_from(["result", "error"]))] = draw(json_values)
    return message


@st.composite
def bodies(draw: st.DrawFn, victim_body: bytes) -> bytes:
    kind = draw(
        st.sampled_from(
            [
                "message",
                "message",
                "message",
                "batch",
                "json",
                "bytes",
                "deep",
                "huge",
                "victim",
                "empty",
                "trailing",
            ]
        )
    )
    if kind == "message":
        return json.dumps(draw(jsonrpc_messages())).encode()
    if kind == "batch":
        return json.dumps(draw(st.lists(jsonrpc_messages(), max_size=5))).encode()
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "deep":
        depth = draw(st.integers(50, 60_000))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        inner = opener * depth + b"1" + closer * depth
        return b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + inner + b"}"
    if kind == "huge":
        size = draw(st.sampled_from([MAX_BODY - 200, MAX_BODY - 60, MAX_BODY + 1, MAX_BODY * 3]))
        pad = "a" * max(size - 80, 0)
        return json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": pad}},
            }
        ).encode()
    if kind == "victim":
        return victim_body
    if kind == "trailing":
        return json.dumps(draw(jsonrpc_messages())).encode() + draw(
            st.sampled_from([b" ", b"x", b"\n{}", b"\x00"])
        )
    return b""


@st.composite
def header_sets(draw: st.DrawFn, victim: Victim) -> list[tuple[bytes, HeaderValue]]:
    """Header lists: the usual MCP headers, each absent, odd or duplicated, in any order."""
    out: list[tuple[bytes, HeaderValue]] = []
    options: list[tuple[bytes, st.SearchStrategy[Any]]] = [
        (b"content-type", content_types),
        (b"accept", accept_values),
        (b"mcp-session-id", session_values()),
        (b"mcp-protocol-version", versions),
        (b"last-event-id", event_id_values(victim.event_ids)),
        (
            b"idempotency-key",
            st.sampled_from([victim.idempotency_key.encode(), b"k1", b"", b"\x7f", b"a" * 300])
            | header_text.map(lambda t: t.encode("latin-1")),
        ),
    ]
    for name, values in options:
        for _ in range(draw(st.sampled_from([1, 1, 1, 0, 2]))):
            out.append((name, draw(values)))
    if draw(st.booleans()):
        out.append(
            (
                draw(st.sampled_from([b"x-other", b"mcp-session-id ", b"MCP-SESSION-ID"])),
                draw(header_text).encode("latin-1"),
            )
        )
    return draw(st.permutations(out))


# --------------------------------------------------------------------------- the tests


@FUZZ
@given(data=st.data())
@pytest.mark.slow
def test_last_event_id(harness: Harness, data: st.DataObject) -> None:
    victim = harness.victim
    assert victim is not None
    value = data.draw(event_id_values(victim.event_ids), label="last-event-id")
    path = data.draw(st.sampled_from(["/mcp", "/mcp/", *victim.links]), label="path")
    headers: list[tuple[bytes, HeaderValue]] = [
        (b"accept", data.draw(st.sampled_from([b"text/event-stream", ACCEPT_BOTH, b"*/*"]))),
        (b"mcp-protocol-version", VERSION.encode()),
        (b"last-event-id", value),
    ]
    session = data.draw(session_values() | st.none(), label="session")
    if session is not None:
        headers.append((b"mcp-session-id", session))
    if data.draw(st.integers(0, 9)) == 0:
        headers.append((b"last-event-id", data.draw(event_id_values(victim.event_ids))))
    harness.exchange("GET", path, headers)


@FUZZ
@given(data=st.data())
@pytest.mark.slow
def test_link_url_tokens(harness: Harness, data: st.DataObject) -> None:
    victim = harness.victim
    assert victim is not None
    token = data.draw(
        st.one_of(
            st.sampled_from([link.rsplit("/", 1)[1] for link in victim.links]).flatmap(
                lambda t: st.tuples(st.integers(0, len(t)), st.text(max_size=8), st.integers(0, 3)).map(
                    lambda m: t[: m[0]] + m[1] + t[m[0] + m[2] :]
                )
            ),
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=80),
            st.text("abcdefABCDEF0123456789-_.~", min_size=20, max_size=120),
            st.just("x" * 600),
        ),
        label="token",
    )
    prefix = data.draw(
        st.sampled_from(["/mcp/streams/", "/mcp//streams/", "/mcp/streams//", "/mcp/streams/../streams/"])
    )
    method = data.draw(
        st.sampled_from(["GET", "GET", "POST", "POST", "DELETE", "PUT", "HEAD", "OPTIONS"]), label="method"
    )
    headers: list[tuple[bytes, HeaderValue]] = [
        (b"accept", ACCEPT_BOTH),
        (b"content-type", data.draw(st.sampled_from([b"application/json", b"text/plain"]))),
        (b"mcp-protocol-version", VERSION.encode()),
    ]
    session = data.draw(session_values() | st.none(), label="session")
    if session is not None:
        headers.append((b"mcp-session-id", session))
    if data.draw(st.booleans()):
        headers.append((b"last-event-id", data.draw(event_id_values(victim.event_ids))))
    body = b""
    if method == "POST":
        body = data.draw(
            st.one_of(
                bodies(victim.call_body),
                st.lists(
                    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": ids, "result": json_values}),
                    max_size=120,
                ).map(lambda answers: json.dumps(answers).encode()),
            ),
            label="body",
        )
    harness.exchange(method, prefix + token, headers, body)


@FUZZ
@given(data=st.data())
@pytest.mark.slow
def test_jsonrpc_bodies(harness: Harness, data: st.DataObject) -> None:
    victim = harness.victim
    assert victim is not None
    body = data.draw(bodies(victim.call_body), label="body")
    headers: list[tuple[bytes, HeaderValue]] = [
        (
            b"content-type",
            data.draw(
                st.sampled_from([b"application/json", b"application/json; charset=utf-8"]) | content_types
            ),
        ),
        (b"accept", data.draw(st.sampled_from([ACCEPT_BOTH, b"text/event-stream"]) | accept_values)),
        (b"mcp-protocol-version", VERSION.encode()),
    ]
    session = data.draw(st.just(Session()) | session_values() | st.none(), label="session")
    if session is not None:
        headers.append((b"mcp-session-id", session))
    if data.draw(st.integers(0, 3)) == 0:
        headers.append(
            (b"idempotency-key", data.draw(st.sampled_from([victim.idempotency_key.encode(), b"k-1"])))
        )
    harness.exchange("POST", "/mcp", headers, body)


@FUZZ
@given(data=st.data())
@pytest.mark.slow
def test_headers(harness: Harness, data: st.DataObject) -> None:
    victim = harness.victim
    assert victim is not None
    method = data.draw(st.sampled_from(["POST", "POST", "GET", "GET", "DELETE"]), label="method")
    headers = data.draw(header_sets(victim), label="headers")
    body = b""
    if method == "POST":
        body = data.draw(
            st.sampled_from(
                [
                    victim.call_body,
                    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}',
                    b'{"jsonrpc":"2.0","id":2,"method":"ping"}',
                    b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
                    b'{"jsonrpc":"2.0","id":99,"result":{}}',
                ]
            ),
            label="body",
        )
    harness.exchange(method, "/mcp", headers, body)
    if method == "DELETE":
        harness.ensure_sessions()


@pytest.mark.slow
def test_the_victims_stream_is_intact(harness: Harness) -> None:
    """After all that, the victim resumes its running stream and gets its own events."""
    victim = harness.victim
    assert victim is not None

    async def resume() -> Answer:
        headers = [
            (b"accept", b"text/event-stream"),
            (b"mcp-session-id", victim.session_id),
            (b"mcp-protocol-version", VERSION.encode()),
            (b"last-event-id", victim.event_ids[0].encode()),
        ]
        return await call(
            harness.tg,
            harness.wrapped.app,
            "GET",
            "/mcp",
            headers,
            wait_s=3,
            until=lambda a: a.body.count(b"progressToken") >= 1,
        )

    answer = harness.portal.call(resume)
    assert answer.status == 200, answer.text()
    assert victim.marker in answer.body


# --------------------------------------------------------------------------- found by the fuzzer


@pytest.mark.parametrize("digit", ["²", "³", "¹"])
@pytest.mark.slow
def test_a_last_event_id_with_a_superscript_digit_is_a_400(harness: Harness, digit: str) -> None:
    """`str.isdigit()` accepts superscripts that `int()` refuses: must be a 400, not a 500."""
    victim = harness.victim
    assert victim is not None
    value = (victim.stream_prefix.decode() + digit).encode("latin-1")
    wrapped, _ = harness.exchange(
        "GET",
        "/mcp",
        [(b"accept", b"text/event-stream"), (b"mcp-session-id", Session()), (b"last-event-id", value)],
    )
    assert wrapped.status == 400
