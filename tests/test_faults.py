"""Faults: tool calls with progress while the network cuts connections and the server closes them at will.

Every call runs `progress(steps)` through a proxy that cuts connections at random
byte offsets, while the middleware closes every connection `max_connection_s`
after it attached. Each test tallies, over all calls: results delivered,
progress notifications lost, duplicated and reordered, and how often the app ran
a call more than once; it prints the tally and requires it exact.

The size is `CALLS` (200, several sessions at once) and 1000 with `--soak`.

Clients:

* the stock `mcp` client. It can resume only once it holds an event id (the
  priming event's); a cut before that is unrecoverable for it. One variant cuts
  only after the priming event (every call must succeed); one cuts anywhere,
  counts the cuts before and after the first event id separately, and requires
  that exactly the calls whose POST was cut before the first event id failed.
  Only `tools/call` POSTs are cut: the stock client gives up its whole session
  when a notification POST fails, and counts a resume GET cut mid-body as a
  failed reconnect (it gives up after two), which is its own business;
  the at-will closes exercise its resumes.
* the client helper (`ResumableSession` over `ResumableTransport`): every
  connection is cut, resumes and Link GETs included. After the response headers
  it must always win; at ANY offset (also before the headers, where only a
  retried POST with the same `Idempotency-Key` can recover) it must win once the
  server supports `Idempotency-Key`.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import anyio
import anyio.abc
import httpx
import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from starlette.types import Message, Receive, Scope, Send

from mcp_resume_asgi import MemoryStore, Policy, resumable
from mcp_resume_asgi.client import ResumableSession, ResumableTransport
from tests.apps.probe_app import create_app
from tests.support.counting import Counting
from tests.support.mcp_client import call_with_progress, result_text, stock_session
from tests.support.proxy import ConnectionRecord, CutProxy
from tests.support.server import serve
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CALLS = 200
SOAK_CALLS = 1000
SESSIONS = 10
STEPS = 5
SECONDS = 0.15
POLICY = Policy(retry_ms=10, max_connection_s=0.05, max_wait_s=30)
TAP_BYTES = 64 * 1024
_TAG = re.compile(rb'"tag"\s*:\s*"([^"]+)"')
_TOOLS_CALL = re.compile(rb'"method"\s*:\s*"tools/call"')


@pytest.fixture
def calls(request: pytest.FixtureRequest) -> int:
    return SOAK_CALLS if request.config.getoption("--soak") else CALLS


# --------------------------------------------------------------------------- the proxy


def first_event_end(data: bytes) -> int | None:
    """Offset just past the first complete SSE event (the priming event) of an HTTP response, if any."""
    head = data.find(b"\r\n\r\n")
    if head < 0:
        return None
    start = data.find(b"id:", head)
    if start < 0:
        return None
    end = data.find(b"\n\n", start)
    return None if end < 0 else end + 2


def headers_end(data: bytes) -> int | None:
    head = data.find(b"\r\n\r\n")
    return None if head < 0 else head + 4


def event_ends(data: bytes, start: int) -> list[int]:
    """`start` and every offset just past a complete SSE event after it."""
    ends = [start]
    while (end := data.find(b"\n\n", ends[-1])) >= 0:
        ends.append(end + 2)
    return ends


def response_complete(data: bytes, head: int) -> bool:
    """Whether a chunked HTTP response (headers end at `head`) has its last chunk."""
    return data[head:] == b"0\r\n\r\n" or data.endswith(b"\r\n0\r\n\r\n")


class _Tap:
    """An async iterator over a socket stream that keeps the first bytes it passes on."""

    def __init__(
        self, stream: anyio.abc.ByteReceiveStream, keep: bytearray, hook: Callable[[], None]
    ) -> None:
        self.stream = stream
        self.keep = keep
        self.hook = hook
        self.pending: list[bytes] = []

    def __aiter__(self) -> _Tap:
        return self

    async def __anext__(self) -> bytes:
        if self.pending:
            return self.pending.pop(0)
        return await self.read()

    async def read(self) -> bytes:
        try:
            chunk = await self.stream.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
        if len(self.keep) < TAP_BYTES:
            self.keep += chunk[: TAP_BYTES - len(self.keep)]
        self.hook()
        return chunk


class FaultProxy(CutProxy):
    """`CutProxy` that sees what it forwards.

    * `only_calls`: cut only connections carrying a `tools/call` POST;
    * `cut_from`: where the random offset counts from - `"start"` (any byte of the
      response), `"headers"` (after the response headers) or `"priming"` (after the
      first SSE event, i.e. once the client holds an event id).

    With `"priming"` every SSE response is cut, however little the server said before its
    at-will close (which comes sooner, in events, on a slower machine): the response is held
    until the offset is reached or the response is complete, and then cut at one of its
    event boundaries after the priming event, drawn by the proxy's seeded random.
    """

    def __init__(self, *args: Any, only_calls: bool = False, cut_from: str = "start", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.only_calls = only_calls
        self.cut_from = cut_from
        if only_calls:
            self.cut_methods = {b"CALL"}
        self.up: dict[int, bytearray] = {}
        self.tool_calls: set[int] = set()
        """Indexes of the connections whose request is a `tools/call`."""
        self.down: dict[int, bytearray] = {}

    async def _pump_up(self, record: ConnectionRecord, client: Any, backend: Any, scope: Any) -> None:
        keep = self.up[record.index] = bytearray()

        def classify() -> None:
            # Runs before the chunk is forwarded, so before the server can answer it.
            if record.index not in self.tool_calls and _TOOLS_CALL.search(keep):
                self.tool_calls.add(record.index)
                if self.only_calls:
                    record.method = b"CALL"

        await super()._pump_up(record, _Tap(client, keep, classify), backend, scope)

    async def _pump_down(
        self, record: ConnectionRecord, backend: Any, client: Any, limit: int | None, scope: Any
    ) -> None:
        keep = self.down[record.index] = bytearray()
        tap = _Tap(backend, keep, lambda: None)
        if limit is not None and self.cut_from != "start":
            # Hold the response back until the point the offset counts from is known. A
            # response without such a point (a 202, a 204, a JSON answer) is not cut.
            offset: int | None = None
            try:
                while offset is None:
                    tap.pending.append(await tap.read())
                    if self.only_calls and record.method != b"CALL":
                        break
                    head = headers_end(bytes(keep))
                    if head is None:
                        continue
                    if self.cut_from == "headers":
                        offset = head
                    elif b"text/event-stream" not in bytes(keep[:head]).lower():
                        break
                    else:
                        offset = first_event_end(bytes(keep))
                if offset is not None and self.cut_from == "priming":
                    limit = await self._priming_cut(tap, keep, offset, limit)
                    offset = 0
            except (StopAsyncIteration, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                offset = None
            limit = None if offset is None else limit + offset
        await super()._pump_down(record, tap, client, limit, scope)

    async def _priming_cut(self, tap: _Tap, keep: bytearray, priming_end: int, after: int) -> int:
        """Where to cut a response whose priming event ends at `priming_end`: `after` bytes past
        it if the response gets that far, else at one of its event boundaries past it."""
        head = headers_end(bytes(keep))
        assert head is not None
        target = priming_end + after
        try:
            while len(keep) < target and not response_complete(bytes(keep), head):
                tap.pending.append(await tap.read())
        except StopAsyncIteration:
            pass
        if len(keep) >= target:
            return target
        return self.rng.choice(event_ends(bytes(keep), priming_end))

    # -- what happened, per connection --------------------------------------------------
    def tag(self, record: ConnectionRecord) -> str | None:
        match = _TAG.search(self.up.get(record.index, b""))
        return match.group(1).decode() if match else None

    def received(self, record: ConnectionRecord) -> bytes:
        return bytes(self.down.get(record.index, b""))[: record.bytes_down]

    def call_cuts(self) -> tuple[set[str], set[str], set[str]]:
        """Tags of the tools/call POSTs cut before the headers / before the first event id / after it."""
        before_headers: set[str] = set()
        before_id: set[str] = set()
        after_id: set[str] = set()
        for record in self.records:
            tag = self.tag(record)
            if not record.cut or record.index not in self.tool_calls or tag is None:
                continue
            got = self.received(record)
            if headers_end(got) is None:
                before_headers.add(tag)
                before_id.add(tag)
            elif first_event_end(got) is None:
                before_id.add(tag)
            else:
                after_id.add(tag)
        return before_headers, before_id, after_id


# --------------------------------------------------------------------------- the app side


class Executions:
    """An ASGI layer between the middleware and the app: how often each tagged tool call reached the app."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.runs: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()

        async def tapped() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    match = _TAG.search(body) if _TOOLS_CALL.search(body) else None
                    if match:
                        self.runs[match.group(1).decode()] += 1
            return message

        await self.app(scope, tapped, send)


@contextlib.asynccontextmanager
async def wrapped_server(policy: Policy = POLICY) -> AsyncIterator[tuple[int, Counting, Executions]]:
    executions = Executions(create_app())
    counting = Counting(resumable(executions, policy=policy, store=MemoryStore()))
    async with serve(counting) as info:
        yield info.port, counting, executions


# --------------------------------------------------------------------------- the tally


@dataclass
class Tally:
    calls: int = 0
    results: int = 0
    failed: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    """tag -> why, for every call that did not deliver its result."""

    def record(self, tag: str, text: str | None, progress: list[int], error: str | None = None) -> None:
        self.calls += 1
        if error is not None or text != f"done {STEPS}":
            self.failed += 1
            self.failures[tag] = error or f"wrong result {text!r}"
            return
        self.results += 1
        counts = Counter(progress)
        self.lost += sum(1 for step in range(1, STEPS + 1) if counts[step] == 0)
        self.duplicated += sum(n - 1 for n in counts.values()) + sum(
            n for step, n in counts.items() if not 1 <= step <= STEPS
        )
        firsts = list(dict.fromkeys(progress))
        self.reordered += sum(1 for a, b in pairwise(firsts) if b < a)

    def line(self) -> str:
        return (
            f"calls={self.calls} results={self.results} failed={self.failed} "
            f"notifications lost={self.lost} duplicated={self.duplicated} reordered={self.reordered}"
        )


def report(name: str, tally: Tally, proxy: FaultProxy, counting: Counting, executions: Executions) -> int:
    before_headers, before_id, after_id = proxy.call_cuts()
    twice = sum(n - 1 for n in executions.runs.values() if n > 1)
    print(
        f"\n[{name}] {tally.line()} executed_twice={twice} | cuts={proxy.stats.cuts} "
        f"(tools/call POSTs cut before headers={len(before_headers)}, before first event id={len(before_id)}, "
        f"after it={len(after_id)}) connections={proxy.stats.connections} "
        f"resumes={counting.counts['GET resume'] + counting.counts['GET resume link'] + counting.counts['GET link']}",
        file=sys.stderr,
    )
    print(f"[{name}] {tally.line()} executed_twice={twice}")
    return twice


def arguments(tag: str) -> dict[str, Any]:
    return {"steps": STEPS, "seconds": SECONDS, "tag": tag}


# --------------------------------------------------------------------------- stock client


async def run_stock(calls: int, proxy: FaultProxy, tally: Tally) -> int:
    """Run the calls; returns how many sessions the stock client lost (and were opened again)."""
    per_session = calls // SESSIONS
    lost_sessions = 0

    async def worker(n: int) -> None:
        nonlocal lost_sessions
        i = 0
        while i < per_session:
            tag = ""
            try:
                http = httpx2.AsyncClient(limits=httpx2.Limits(max_keepalive_connections=0), timeout=30)
                async with (
                    http,
                    stock_session(proxy.mcp_url, http_client=http) as session,
                ):
                    while i < per_session:
                        tag = f"s{n}c{i}"
                        i += 1
                        try:
                            result, updates = await call_with_progress(session, "progress", arguments(tag))
                        except MCPError as exc:
                            tally.record(tag, None, [], f"MCPError: {exc}")
                            continue
                        tally.record(tag, result_text(result), [int(u[0]) for u in updates])
            except (httpx2.TransportError, BaseExceptionGroup) as exc:
                # A POST that breaks before its response headers takes the stock client's whole
                # session down (the error escapes its transport's task group): the call in
                # flight is lost, and the worker carries on with a new session.
                if (
                    isinstance(exc, BaseExceptionGroup)
                    and exc.subgroup(lambda e: isinstance(e, httpx2.TransportError)) is None
                ):
                    raise
                lost_sessions += 1
                tally.record(tag, None, [], f"session lost: {exc!r}"[:200])

    with anyio.fail_after(scaled(20 + calls * 0.3)):
        async with anyio.create_task_group() as tg:
            for n in range(SESSIONS):
                tg.start_soon(worker, n)
    return lost_sessions


async def test_stock_client_cut_after_the_priming_event(calls: int) -> None:
    """Cut after the first event id: the stock client resumes every call, every notification exact."""
    async with (
        wrapped_server() as (port, counting, executions),
        FaultProxy(port, cut_after_bytes=(0, 400), seed=11, only_calls=True, cut_from="priming") as proxy,
    ):
        tally = Tally()
        assert await run_stock(calls, proxy, tally) == 0
    twice = report("stock, cut after priming", tally, proxy, counting, executions)
    _before_headers, before_id, after_id = proxy.call_cuts()
    assert not before_id, "the proxy was to cut after the priming event only"
    assert len(after_id) == calls, "every call's POST is cut after its priming event"
    assert tally.results == calls, tally.failures
    assert (tally.lost, tally.duplicated, tally.reordered, twice) == (0, 0, 0, 0)


async def test_stock_client_cut_anywhere_fails_only_before_the_first_event_id(calls: int) -> None:
    """Cut anywhere: exactly the calls whose POST was cut before the first event id fail."""
    async with (
        wrapped_server() as (port, counting, executions),
        FaultProxy(port, cut_after_bytes=(0, 900), seed=12, only_calls=True) as proxy,
    ):
        tally = Tally()
        lost_sessions = await run_stock(calls, proxy, tally)
    twice = report("stock, cut anywhere", tally, proxy, counting, executions)
    before_headers, before_id, after_id = proxy.call_cuts()
    print(
        f"[stock, cut anywhere] tools/call POSTs cut before the first event id: {len(before_id)} "
        f"(of which before the response headers: {len(before_headers)}, each taking the stock client's "
        f"session down: sessions lost={lost_sessions}), after it: {len(after_id)}; failed calls: {tally.failed}"
    )
    assert before_id and after_id, "the offsets should land on both sides of the priming event"
    # The stock client cannot resume without an event id: those calls fail, and only those.
    assert set(tally.failures) == before_id, {
        "failed but not cut before an id": {t: tally.failures[t] for t in set(tally.failures) - before_id},
        "cut before an id but succeeded": sorted(before_id - set(tally.failures)),
    }
    assert tally.results == calls - len(before_id)
    assert (tally.lost, tally.duplicated, tally.reordered, twice) == (0, 0, 0, 0)


# --------------------------------------------------------------------------- client helper


async def run_helper(calls: int, proxy: FaultProxy, tally: Tally, cuts: tuple[int, int]) -> None:
    per_session = calls // SESSIONS
    sessions: list[ResumableSession] = []
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(SESSIONS):
            inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
            http = httpx.AsyncClient(
                transport=ResumableTransport(inner, max_attempts=20), timeout=httpx.Timeout(30.0)
            )
            await stack.enter_async_context(http)
            sessions.append(
                await stack.enter_async_context(ResumableSession(proxy.mcp_url, http_client=http))
            )
        proxy.cut_after_bytes = cuts  # sessions are up: from now on every connection is cut

        async def worker(n: int, session: ResumableSession) -> None:
            for i in range(per_session):
                tag = f"s{n}c{i}"
                seen: list[int] = []

                async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                    seen.append(int(progress))  # noqa: B023 - consumed before the next iteration

                try:
                    result = await session.call_tool("progress", arguments(tag), on_progress=on_progress)
                except Exception as exc:  # SessionError, McpError: a failed call, counted
                    tally.record(tag, None, [], f"{type(exc).__name__}: {exc}")
                    continue
                text = "".join(block.get("text", "") for block in result.get("content", []))
                tally.record(tag, text, seen)

        with anyio.fail_after(scaled(20 + calls * 0.3)):
            async with anyio.create_task_group() as tg:
                for n, session in enumerate(sessions):
                    tg.start_soon(worker, n, session)
        proxy.cut_after_bytes = None  # let the DELETEs through


async def test_client_helper_every_connection_cut_after_its_headers(calls: int) -> None:
    """The helper, every connection (POSTs, resume GETs, Link GETs) cut after its response headers."""
    async with (
        wrapped_server() as (port, counting, executions),
        FaultProxy(port, seed=21, cut_from="headers") as proxy,
    ):
        tally = Tally()
        await run_helper(calls, proxy, tally, (0, 1500))
    twice = report("helper, cut after headers", tally, proxy, counting, executions)
    assert proxy.stats.cuts >= calls
    assert tally.results == calls, tally.failures
    assert (tally.lost, tally.duplicated, tally.reordered, twice) == (0, 0, 0, 0)


async def test_client_helper_every_connection_cut_at_any_offset(calls: int) -> None:
    """The helper, every connection cut at any offset, before the headers too: Idempotency-Key territory."""
    async with (
        wrapped_server() as (port, counting, executions),
        FaultProxy(port, seed=22) as proxy,
    ):
        tally = Tally()
        await run_helper(calls, proxy, tally, (0, 1800))
    twice = report("helper, cut anywhere", tally, proxy, counting, executions)
    before_headers, _, _ = proxy.call_cuts()
    assert before_headers, "some POSTs should have been cut before their headers"
    assert tally.results == calls, {
        "failed calls": len(tally.failures),
        "of which the POST was cut before its headers": len(set(tally.failures) & before_headers),
        "examples": dict(list(tally.failures.items())[:5]),
    }
    assert (tally.lost, tally.duplicated, tally.reordered, twice) == (0, 0, 0, 0)
