"""Several processes, one service: a shared Redis store behind a load balancer without affinity.

Two uvicorn processes A and B (`tests.apps.multinode_app`, the low-level app wrapped
with a `RedisStore` under a per-test prefix and a shared secret) listen on two
loopback ports behind `CutProxy`, which hands each TCP connection to the next
backend in turn (it cuts nothing here). The clients open a new connection for
every HTTP request, so consecutive requests alternate between the processes.
Every response carries ``x-node: <pid>`` (the app's outer layer): the tests know
which process answered each request, and the *owner* of a session is the one
that answered its ``initialize``.

What the middleware must make true (README, "Redis store"):

* a request of a session that lands on the non-owner is relayed to the owner and
  answered as if it had landed there (stock client and client helper, tool calls
  with progress, elicitation answers to ``/mcp`` and to the Link URL);
* a resume lands anywhere and is served from Redis;
* when the owner dies (SIGKILL) during a call, a client resuming elsewhere gets
  every event recorded before the kill, then a terminal JSON-RPC error (-32000)
  within ``node_timeout_s`` or so: never a hang;
* when Redis is down, requests are served by the app directly (not resumable),
  answers say ``mcp-resume: unavailable``, and resumability comes back with Redis.

Which connection goes where is decided by the round robin; where a test needs a
request on a given process it *steers* the balancer (:func:`steer`: one empty
connection to the proxy moves the turn on), which is still the round robin.

The first two tests check the harness itself (they pass without multi-node
support): the balancer alternates processes, and one process on Redis behind it
serves the stock client.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from mcp_resume_asgi.client import McpError, ResumableSession
from tests.apps import ELICIT_MESSAGE
from tests.support.cluster import Alternation, cluster, pid_of, port_of, prefix, steer
from tests.support.exchanges import Exchange, Recorder, helper_http_client, owner_of, recorded_session
from tests.support.mcp_client import call_with_progress, result_text, stock_session, text
from tests.support.proxy import CutProxy
from tests.support.redis_server import own_redis
from tests.support.server import HOST
from tests.support.stores import (
    escape_glob,
    redis_url,
    require_redis,
)
from tests.support.timing import scaled

__all__ = ["prefix"]  # the fixture, used by name

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90), pytest.mark.slow]

NODE_TIMEOUT_S = 2.0
"""`node_timeout_s` of the node-death tests: a dead owner must be noticed about this fast."""
CLIENT_SIDE_ERRORS = ("SSE stream", "Session terminated", "Server returned an error response")
"""Messages of errors the stock client makes up itself (all -32000 or -32600): not the server's answer."""


# ----------------------------------------------------------------------------- Redis


def _messages_in(payload: bytes) -> list[Any]:
    """The JSON-RPC messages in one recorded event (an SSE event's ``data:`` lines, or bare JSON)."""
    with contextlib.suppress(ValueError):
        return [json.loads(payload)]
    data = [line[5:].removeprefix(b" ") for line in payload.splitlines() if line.startswith(b"data:")]
    if not data:
        return []
    with contextlib.suppress(ValueError):
        return [json.loads(b"\n".join(data))]
    return []


async def recorded_messages(prefix: str, url: str | None = None) -> dict[str, list[Any]]:
    """Every JSON-RPC message recorded in Redis under ``prefix``, per event stream key, in order.

    Relies on the documented `RedisStore` layout: events of stream ``s`` in the Redis
    Stream ``<prefix>s:<s>:e``, payload in field ``d``.
    """
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url or redis_url(), socket_connect_timeout=2, socket_timeout=5)
    found: dict[str, list[Any]] = {}
    try:
        async for key in client.scan_iter(match=escape_glob(prefix) + "s:*:e", count=500):
            if await client.type(key) != b"stream":
                continue
            messages: list[Any] = []
            for _entry_id, fields in await client.xrange(key):
                messages.extend(_messages_in(fields.get(b"d", b"")))
            found[key.decode()] = messages
    finally:
        await client.aclose()
    return found


def progress_values(messages: list[Any]) -> list[float]:
    return [
        m["params"]["progress"]
        for m in messages
        if isinstance(m, dict) and m.get("method") == "notifications/progress"
    ]


# ----------------------------------------------------------------------------- the harness itself


async def test_harness_the_balancer_alternates_processes(prefix: str) -> None:
    """The harness: two nodes start, each tags its answers, the proxy alternates between them."""
    require_redis()
    async with cluster(2, prefix) as (a, b), CutProxy([port_of(a), port_of(b)]) as proxy:
        recorder = Recorder()
        async with recorder.httpx2_client() as http:
            for _ in range(4):
                response = await http.get(f"{proxy.base_url}/__node__")
                assert response.status_code == 200
                assert int(response.headers["x-node"]) == response.json()["pid"]
            await steer(proxy, port_of(b))
            steered = await http.get(f"{proxy.base_url}/__node__")
        seen = [e.node for e in recorder.exchanges]
        assert seen == [pid_of(a), pid_of(b), pid_of(a), pid_of(b), pid_of(b)], seen
        assert int(steered.headers["x-node"]) == pid_of(b)


async def test_harness_one_node_on_redis_serves_the_stock_client_through_the_proxy(prefix: str) -> None:
    """The harness: one node behind the proxy, the stock client, at-will closes: all resumes work."""
    require_redis()
    policy = {"retry_ms": 50, "max_connection_s": 0.3}
    async with cluster(1, prefix, policy=policy) as (a,), CutProxy([port_of(a)]) as proxy:
        recorder = Recorder()
        async with (
            recorder.httpx2_client() as http,
            stock_session(proxy.mcp_url, http_client=http) as session,
        ):
            with anyio.fail_after(scaled(20)):
                for _ in range(2):
                    result, progress = await call_with_progress(
                        session, "slow_progress", {"seconds": 1.0, "steps": 10}
                    )
                    assert result_text(result) == "done 10"
                    assert [p[0] for p in progress] == [float(i) for i in range(1, 11)]
        print(f"\n{recorder.summary()}")
        assert set(recorder.nodes()) == {pid_of(a)}
        assert len(recorder.where(method="GET", resume=True, status=200)) >= 4
        call_posts = recorder.where(method="POST", rpc="tools/call")
        assert call_posts and all(e.link for e in call_posts), "a Redis-backed answer carries a Link"
    assert proxy.stats.connections >= 8


# ----------------------------------------------------------------------------- a. round robin, stock client


async def test_stock_client_calls_with_progress_across_two_nodes(prefix: str) -> None:
    """5 calls of a 1.5 s tool, the middleware closing every 0.3 s; requests and resumes alternate nodes."""
    require_redis()
    policy = {"retry_ms": 50, "max_connection_s": 0.3}
    started = time.monotonic()
    async with cluster(2, prefix, policy=policy) as (a, b), CutProxy([port_of(a), port_of(b)]) as proxy:
        recorder = Recorder()
        outcomes: list[tuple[str, list[float]]] = []
        async with (
            recorder.httpx2_client() as http,
            stock_session(proxy.mcp_url, http_client=http) as session,
        ):
            owner = owner_of(recorder)
            other = pid_of(b) if owner == pid_of(a) else pid_of(a)
            port_by_pid = {pid_of(a): port_of(a), pid_of(b): port_of(b)}
            with anyio.fail_after(scaled(25)):
                for i in range(5):
                    # Alternate where each tools/call POST lands: the owner, then the other node.
                    await steer(proxy, port_by_pid[owner if i % 2 == 0 else other])
                    result, progress = await call_with_progress(
                        session, "slow_progress", {"seconds": 1.5, "steps": 15}
                    )
                    outcomes.append((result_text(result), [p[0] for p in progress]))
        print(f"\nowner={owner} other={other} in {time.monotonic() - started:.1f}s\n{recorder.summary()}")
        assert outcomes == [("done 15", [float(i) for i in range(1, 16)])] * 5
        assert set(recorder.nodes()) == {pid_of(a), pid_of(b)}, "both processes answered"
        call_nodes = recorder.nodes(method="POST", rpc="tools/call")
        assert call_nodes[owner] >= 1 and call_nodes[other] >= 1, call_nodes
        assert all(e.status == 200 for e in recorder.where(method="POST", rpc="tools/call"))
        resumes_elsewhere = [e for e in recorder.where(method="GET", resume=True) if e.node == other]
        assert resumes_elsewhere, "no resume landed on the non-owner"
        assert all(e.status == 200 for e in resumes_elsewhere), [e.status for e in resumes_elsewhere]


# ----------------------------------------------------------------------------- b. elicitation


async def test_elicitation_with_the_stock_client_across_two_nodes(prefix: str) -> None:
    """`ask_name` 4 times; the answer POSTs (to /mcp) land on the owner and on the other node."""
    require_redis()
    policy = {"retry_ms": 50}
    async with cluster(2, prefix, policy=policy) as (a, b), CutProxy([port_of(a), port_of(b)]) as proxy:
        recorder = Recorder()
        port_by_pid = {pid_of(a): port_of(a), pid_of(b): port_of(b)}
        answers_to = Alternation(proxy, port_by_pid)

        async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            assert params.message == ELICIT_MESSAGE
            n = await answers_to.steer_next()
            return types.ElicitResult(action="accept", content={"name": f"carol{n}"})

        results: list[str] = []
        async with (
            recorder.httpx2_client() as http,
            stock_session(proxy.mcp_url, http_client=http, elicitation_callback=elicit) as session,
        ):
            owner = owner_of(recorder)
            other = pid_of(b) if owner == pid_of(a) else pid_of(a)
            with anyio.fail_after(scaled(20)):
                for i in range(4):
                    # The call's POST: owner, other, owner, other (the answers alternate on their own).
                    await steer(proxy, port_by_pid[owner if i % 2 == 0 else other])
                    results.append(result_text(await session.call_tool("ask_name", {})))
        print(f"\nowner={owner}\n{recorder.summary()}")
        assert results == [f"hello carol{i}" for i in range(1, 5)]
        answers = recorder.where(method="POST", rpc="response")
        # Each answer went where the proxy's next connection went: its steered node, unless the
        # client's own resume GET (its `retry:` is 50 ms) took that connection first, as it may on
        # a loaded machine (seen: 3 and 1 for 2 and 2). What this test is about holds either way:
        # all four answers landed, on both nodes, and each reached the app (the results above).
        landed = Counter(e.node for e in answers)
        assert sum(landed.values()) == 4 and set(landed) == set(port_by_pid), f"answers landed: {landed}"
        assert all(200 <= e.status < 300 for e in answers), [(e.node, e.status) for e in answers]


def print_node_logs(log_dir: Path) -> None:
    """Each node's DEBUG log (`cluster(log_dir=...)`), for a test that failed."""
    for log in sorted(log_dir.glob("node-*.log")):
        print(f"\n----- {log.name}\n{log.read_text(errors='replace')[-60_000:]}")


async def test_elicitation_with_the_client_helper_across_two_nodes(prefix: str) -> None:
    """`ResumableSession`: answers POSTed to the Link URL land on both nodes; Link GETs anywhere."""
    require_redis()
    policy = {"retry_ms": 50}
    log_dir = Path(tempfile.mkdtemp(prefix="nodes-"))  # (`tmp_path` would not reach the cluster variant)
    async with (
        cluster(2, prefix, policy=policy, log_dir=log_dir) as (a, b),
        CutProxy([port_of(a), port_of(b)]) as proxy,
    ):
        recorder = Recorder()
        answers_to = Alternation(proxy, {pid_of(a): port_of(a), pid_of(b): port_of(b)})

        async def on_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
            n = await answers_to.steer_next()
            return {"action": "accept", "content": {"name": f"dora{n}"}}

        results: list[str] = []
        owner = None
        try:
            async with helper_http_client(recorder) as http:
                with anyio.fail_after(scaled(20)):
                    async with ResumableSession(
                        proxy.mcp_url, http_client=http, on_request=on_request
                    ) as session:
                        owner = owner_of(recorder)
                        for _ in range(4):
                            results.append(text(await session.call_tool("ask_name", {})))
        finally:  # (what the client saw, also when it waited in vain: seen once in a full run)
            print(f"\nowner={owner} results={results} steered={answers_to.targets}\n{recorder.summary()}")
            if len(results) < 4:
                print_node_logs(log_dir)
            shutil.rmtree(log_dir, ignore_errors=True)
        assert results == [f"hello dora{i}" for i in range(1, 5)]
        link_posts = [e for e in recorder.where(method="POST") if "/streams/" in e.path]
        assert len(link_posts) == 4, recorder.summary()
        assert {e.node for e in link_posts} == {pid_of(a), pid_of(b)}, "answers landed on both nodes"
        assert all(e.status == 200 for e in link_posts), [(e.node, e.status) for e in link_posts]
        link_gets = [e for e in recorder.where(method="GET") if "/streams/" in e.path]
        assert all(e.status in (200, 204) for e in link_gets), [(e.node, e.status) for e in link_gets]


@dataclass
class HelperCall:
    """One `slow_progress` call by the client helper through the balancer in front of two nodes."""

    result: dict[str, Any]
    progress: list[int]
    recorder: Recorder
    nodes: set[int]


async def helper_call_across_two_nodes(
    prefix: str,
    policy: dict[str, Any],
    options: dict[str, Any],
    alongside: Callable[[ResumableSession], Awaitable[None]] | None = None,
    **session_options: Any,
) -> HelperCall:
    async with (
        cluster(2, prefix, policy=policy, options=options) as (a, b),
        CutProxy([port_of(a), port_of(b)]) as proxy,
    ):
        recorder = Recorder()
        progress: list[int] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(int(value))

        async with helper_http_client(recorder) as http:
            with anyio.fail_after(scaled(30)):
                async with (
                    ResumableSession(proxy.mcp_url, http_client=http, **session_options) as session,
                    anyio.create_task_group() as tg,
                ):
                    owner = owner_of(recorder)
                    if alongside is not None:
                        tg.start_soon(alongside, session)
                    result = await session.call_tool(
                        "slow_progress", {"seconds": 2, "steps": 10}, on_progress=on_progress
                    )
        print(f"\nowner={owner}\n{recorder.summary()}")
        return HelperCall(result, progress, recorder, {pid_of(a), pid_of(b)})


async def test_sep975_resumes_and_status_checks_land_on_any_node(prefix: str) -> None:
    """SEP-975 across nodes: `requests/resume` and `requests/getStatus` POSTs reach the owner wherever they land."""
    require_redis()
    statuses: list[dict[str, Any]] = []

    async def ask_status(session: ResumableSession) -> None:
        while not session.in_flight:
            await anyio.sleep(0.02)
        (request_id,) = session.in_flight
        for _ in range(4):
            await anyio.sleep(0.25)
            statuses.append(await session.request_status(request_id))

    call = await helper_call_across_two_nodes(
        prefix, {"retry_ms": 20, "max_connection_s": 0.3}, {"resumable_requests": True}, ask_status
    )
    assert text(call.result) == "done 10"
    assert call.progress == list(range(1, 11)), call.progress
    resumes = call.recorder.where(method="POST", rpc="requests/resume")
    checks = call.recorder.where(method="POST", rpc="requests/getStatus")
    assert resumes and all(e.status == 200 for e in resumes), call.recorder.summary()
    assert {e.node for e in resumes + checks} == call.nodes, call.recorder.summary()
    assert [s["status"] for s in statuses] == ["processing"] * 4, statuses


async def test_resume_tokens_reissued_on_any_node(prefix: str) -> None:
    """`_meta.resumeToken` re-issues land on both nodes; the owner's detached work answers them."""
    require_redis()
    call = await helper_call_across_two_nodes(
        prefix, {"retry_ms": 20, "soft_deadline_s": 0.3}, {"resume_tokens": True}, resume_poll_s=0.05
    )
    assert text(call.result) == "done 10"
    assert call.progress == list(range(1, 11)), call.progress
    calls = call.recorder.where(method="POST", rpc="tools/call")
    assert len(calls) >= 3, call.recorder.summary()  # the first call and at least two re-issues
    assert {e.node for e in calls} == call.nodes, call.recorder.summary()
    assert all(e.status == 200 for e in calls), call.recorder.summary()


# ----------------------------------------------------------------------------- c. node death


@pytest.mark.parametrize(
    ("client", "post_on"),
    [("stock", "owner"), ("stock", "other"), ("helper", "owner")],
    ids=["stock-post-on-owner", "stock-post-relayed", "helper-post-on-owner"],
)
async def test_owner_killed_during_a_call_ends_it_with_an_error(
    prefix: str, client: str, post_on: str
) -> None:
    """SIGKILL the owner 1 s into a 10 s call: every recorded event, then -32000, within bounded time.

    The balancer sends the session's ``initialize`` to A (the owner), and the call's
    POST to A (``post_on="owner"``: the client's connection dies with A and it resumes
    on B) or to B (``"other"``: B relays it to A and holds the client's connection).
    At the kill the balancer drops A, as a health check would.
    """
    require_redis()
    policy = {"retry_ms": 50}
    options = {"node_timeout_s": NODE_TIMEOUT_S}
    recorder = Recorder()
    progress: list[float] = []
    errors: list[tuple[int, str]] = []
    got_some = anyio.Event()
    finished = anyio.Event()
    seen_at_kill = 0
    took = -1.0

    async def on_progress(p: float, total: float | None = None, message: str | None = None) -> None:
        progress.append(p)
        if len(progress) >= 10:
            got_some.set()

    async def run_call(session: Any) -> None:
        try:
            if client == "stock":
                result = await session.call_tool(
                    "slow_progress",
                    {"seconds": 10, "steps": 100},
                    progress_callback=on_progress,
                    read_timeout_seconds=scaled(25),
                )
                errors.append((0, f"the call succeeded: {result_text(result)!r}"))
            else:
                answer = await session.call_tool(
                    "slow_progress", {"seconds": 10, "steps": 100}, on_progress=on_progress
                )
                errors.append((0, f"the call succeeded: {text(answer)!r}"))
        except MCPError as exc:
            errors.append((exc.error.code, exc.error.message))
        except McpError as exc:
            errors.append((exc.code, exc.message))
        except Exception as exc:
            errors.append((1, f"{type(exc).__name__}: {exc}"))
        finally:
            finished.set()

    async with cluster(2, prefix, policy=policy, options=options) as (a, b), CutProxy([port_of(a)]) as proxy:
        # Bounded, teardown included: a client stuck on a dead stream must not stall the test.
        with anyio.fail_after(scaled(45)):
            async with recorded_session(client, proxy.mcp_url, recorder) as session:
                assert owner_of(recorder) == pid_of(a)
                if post_on == "other":
                    proxy.backend_ports = [port_of(b)]
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run_call, session)
                    with anyio.fail_after(scaled(5)):
                        await got_some.wait()
                    a.kill()
                    killed_at = time.monotonic()
                    seen_at_kill = len(progress)
                    proxy.backend_ports = [port_of(b)]
                    with anyio.move_on_after(scaled(15)):
                        await finished.wait()
                    took = time.monotonic() - killed_at
                    tg.cancel_scope.cancel()
                # (read before the session's end: its DELETE, taken over by B, deletes its streams)
                recorded = await recorded_messages(prefix)
    with_progress = {key: msgs for key, msgs in recorded.items() if progress_values(msgs)}
    recorded_progress = [p for msgs in with_progress.values() for p in progress_values(msgs)]
    terminal = [m for msgs in with_progress.values() for m in msgs if isinstance(m, dict) and "error" in m]
    print(
        f"\n{client}, POST on {post_on}: killed the owner after {seen_at_kill} progress events; "
        f"the call ended {took:.2f}s later with {errors}; the client saw {len(progress)} progress "
        f"events, Redis holds {len(recorded_progress)} (in {len(with_progress)} stream(s)), "
        f"recorded errors {terminal}\n{recorder.summary()}"
    )
    assert finished.is_set(), f"the call hung for {took:.1f}s after its owner died"
    assert len(with_progress) == 1, list(with_progress)
    assert 10 <= len(recorded_progress) < 100
    assert recorded_progress == [float(i) for i in range(1, len(recorded_progress) + 1)], "gap in Redis"
    assert progress == recorded_progress, "the client must get every recorded event, once, in order"
    assert len(errors) == 1
    code, message = errors[0]
    assert code == -32000, errors
    assert not message.startswith(CLIENT_SIDE_ERRORS), f"the client gave up by itself: {message!r}"
    assert took <= NODE_TIMEOUT_S + scaled(8), f"took {took:.1f}s"


# ----------------------------------------------------------------------------- d. Redis down


async def test_redis_down_calls_are_served_directly_and_resumability_comes_back(prefix: str) -> None:
    """Kill the node's Redis between calls: calls still succeed, marked unavailable; restart: Link again."""
    require_redis()
    policy = {"retry_ms": 50}
    recorder = Recorder()
    started = time.monotonic()
    with own_redis() as redis_server:
        async with (
            cluster(1, prefix, policy=policy, redis_url=redis_server.url) as (a,),
            recorder.httpx2_client() as http,
            stock_session(f"http://{HOST}:{port_of(a)}/mcp", http_client=http) as session,
        ):

            async def call(phase: str) -> Exchange:
                before = len(recorder.exchanges)
                with anyio.fail_after(scaled(10)):
                    result, progress = await call_with_progress(
                        session, "slow_progress", {"seconds": 0.3, "steps": 3}
                    )
                assert (result_text(result), [p[0] for p in progress]) == ("done 3", [1.0, 2.0, 3.0]), phase
                posts = [e for e in recorder.exchanges[before:] if e.rpc == "tools/call"]
                assert len(posts) == 1, (phase, recorder.summary())
                return posts[0]

            for _ in range(2):
                up = await call("redis up")
                assert up.link and up.resume_header != "unavailable", up
            redis_server.kill()
            down_at = time.monotonic()
            for _ in range(3):
                down = await call("redis down")
                assert down.resume_header == "unavailable", down
                assert not down.link, down
            assert (await session.call_tool("echo", {"text": "still here"})).content
            redis_server.start()
            back: Exchange | None = None
            with anyio.fail_after(scaled(15)):
                while back is None:
                    answer = await call("redis back")
                    if answer.link and answer.resume_header != "unavailable":
                        back = answer
                    else:
                        await anyio.sleep(0.2)
            print(
                f"\nresumable again {time.monotonic() - down_at:.1f}s after Redis went down, "
                f"total {time.monotonic() - started:.1f}s\n{recorder.summary()}"
            )


async def test_redis_dying_during_a_call_does_not_hang_it(prefix: str) -> None:
    """Kill the node's Redis in the middle of a 2 s call: the call ends (result or error), never hangs.

    Then the session goes on without Redis. (Beyond the brief's item d, which kills Redis
    between calls; what the running call gets is the implementation's choice: only a
    hang is wrong.)
    """
    require_redis()
    policy = {"retry_ms": 50}
    recorder = Recorder()
    with own_redis() as redis_server:
        async with (
            cluster(1, prefix, policy=policy, redis_url=redis_server.url) as (a,),
            recorder.httpx2_client() as http,
            stock_session(
                f"http://{HOST}:{port_of(a)}/mcp", http_client=http, read_timeout_seconds=scaled(12)
            ) as session,
        ):
            progress: list[float] = []
            outcome: list[str] = []

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                progress.append(p)

            async def run_call() -> None:
                try:
                    result = await session.call_tool(
                        "slow_progress", {"seconds": 2, "steps": 20}, progress_callback=on_progress
                    )
                    outcome.append(f"result {result_text(result)!r}")
                except MCPError as exc:
                    outcome.append(f"error {exc.error.code} {exc.error.message!r}")

            killed_at = 0.0
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_call)
                with anyio.fail_after(scaled(5)):
                    while len(progress) < 5:
                        await anyio.sleep(0.02)
                redis_server.kill()
                killed_at = time.monotonic()
            took = time.monotonic() - killed_at
            print(f"\nRedis killed after {len(progress)} progress events: {outcome} {took:.2f}s later")
            assert outcome and "Timed out" not in outcome[0], outcome
            assert took < scaled(10), "the call hung after Redis died"
            assert progress == [float(i) for i in range(1, len(progress) + 1)]
            with anyio.fail_after(scaled(10)):
                after = await session.call_tool("echo", {"text": "after"})
            assert result_text(after) == "after"


async def test_another_user_of_the_same_client_is_refused_on_every_node(prefix: str) -> None:
    """Alice's session lives on A. Bob (same OAuth client, another subject) with her session id
    and event id is refused on A (the app judges the session) and on B (which probes without
    the session and compares identities); alice resumes on either."""
    require_redis()
    from tests.test_isolation import CALL, Session, assert_refused, result_text

    async with (
        cluster(2, prefix, policy={"retry_ms": 20}, app="auth") as (a, b),
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port_of(a)}", timeout=15) as on_a,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port_of(b)}", timeout=15) as on_b,
    ):
        alice = Session(on_a, "token-alice")
        await alice.initialize()
        call = alice.tool_call("whoami", CALL, progress=True)
        first = await alice.exchange("POST", "/mcp", call, stop_after=1)
        assert first.link and first.last_id
        for client in (on_a, on_b):
            bob = alice.as_user("token-bob")
            bob.client = client
            assert_refused(await bob.exchange("GET", first.link, headers=bob.headers()))
            assert_refused(
                await bob.exchange("GET", "/mcp", headers=bob.headers(last_event_id=first.last_id))
            )
        alice_on_b = alice.as_user("token-alice-refreshed")
        alice_on_b.client = on_b
        reply = await alice_on_b.exchange("GET", first.link, headers=alice_on_b.headers())
        assert reply.status == 200 and result_text(reply) == "the secret of alice"
