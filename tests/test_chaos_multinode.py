"""Chaos on two nodes: connections cut at random moments while calls stream, on one Redis and on
a Redis Cluster, and a cluster primary SIGKILLed in the middle of it.

Two uvicorn nodes (`tests.apps.multinode_app`) share one store behind `CutProxy`, which hands
each new TCP connection to the next node in turn and cuts every connection 0.2-1.2 s after it
was accepted (drawn from a seeded `random.Random`; the seed is printed, and
``MCP_RESUME_CHAOS_SEED`` sets it). Clients of the package's client helper (`ResumableSession`
over `ResumableTransport`, one TCP connection per request) call a streaming tool; every cut
makes them resume - on whichever node the balancer picks next - or retry a POST under its
`Idempotency-Key`. What must hold: every call completes, and each one saw its progress events
exactly once and in order (0 lost, duplicated or reordered).

The primary-kill test runs the same chaos on a Redis Cluster of its own (the session's cluster
is shared by other tests) and SIGKILLs the primary holding most partitions' slots part-way:
the cluster promotes its replica after `cluster-node-timeout`. Replication is asynchronous, so
what that primary acknowledged but had not yet passed on is lost; a call then ends in a result
or a clear error, never a hang past `node_timeout_s` plus the failover, and later calls on the
same (never restarted) nodes succeed.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi.client import McpError, ResumableSession, ResumableTransport
from mcp_resume_asgi.store.health import STORE_RETRY_S
from tests import test_multinode as one_redis
from tests.support import stores
from tests.support.proxy import CutProxy
from tests.support.redis_server import CLUSTER_NODE_TIMEOUT_MS, RedisClusterServers, RedisServerMissing
from tests.support.timing import scaled
from tests.test_redis_cluster_multinode import _wait_for_links

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.slow]

CLIENTS = 4
CALLS = 4
STEPS = 20
SECONDS = 2.0
CUTS = (0.2, 1.2)
NODE_TIMEOUT_S = 2.0
POLICY = {"retry_ms": 20}
OPTIONS = {"node_timeout_s": NODE_TIMEOUT_S}


def _seed() -> int:
    chosen = os.environ.get("MCP_RESUME_CHAOS_SEED")
    return int(chosen) if chosen else random.SystemRandom().randrange(1 << 30)


def _text(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result.get("content", []))


@dataclass
class Outcome:
    """One call as its client saw it."""

    client: int
    call: int
    progress: list[float] = field(default_factory=list)
    result: str | None = None
    error: str | None = None
    took: float = 0.0


def _http() -> httpx.AsyncClient:
    """The client helper's httpx client over new-connection-per-request (each cut is one request's)."""
    inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
    return httpx.AsyncClient(
        transport=ResumableTransport(inner, max_attempts=20), timeout=httpx.Timeout(30, read=300)
    )


async def _client(url: str, number: int, calls: int, outcomes: list[Outcome]) -> None:
    """One client: a session, then `calls` calls of `slow_progress` one after the other.

    Whatever the client helper raises ends the call with that error (its type and message
    recorded: the chaos tests judge it), and a session that cannot be opened ends every call."""
    mine = [Outcome(number, call) for call in range(calls)]
    outcomes.extend(mine)
    started = time.monotonic()
    try:
        async with _http() as http, ResumableSession(url, http_client=http) as session:
            for outcome in mine:
                started = time.monotonic()

                async def on_progress(
                    p: float, total: float | None, message: str | None, into: Outcome = outcome
                ) -> None:
                    into.progress.append(p)

                try:
                    answer = await session.call_tool(
                        "slow_progress", {"seconds": SECONDS, "steps": STEPS}, on_progress=on_progress
                    )
                    outcome.result = _text(answer)
                except McpError as exc:
                    outcome.error = f"McpError {exc.code}: {exc.message}"
                except Exception as exc:
                    outcome.error = f"{type(exc).__name__}: {exc}"
                finally:
                    outcome.took = time.monotonic() - started
    except Exception as exc:
        for outcome in mine:
            if outcome.result is None and outcome.error is None:
                outcome.error = f"session: {type(exc).__name__}: {exc}"
                outcome.took = time.monotonic() - started


def _summary(seed: int, proxy: CutProxy, outcomes: list[Outcome], took: float) -> str:
    bad = [o for o in outcomes if o.result != f"done {STEPS}" or o.progress != _expected()]
    return (
        f"\nchaos seed={seed} (MCP_RESUME_CHAOS_SEED): {len(outcomes)} calls in {took:.1f}s, "
        f"cuts={proxy.stats.cuts} connections={proxy.stats.connections} "
        f"refused={proxy.stats.backend_failures}; not clean: {bad[:6]}"
    )


def _expected() -> list[float]:
    return [float(i) for i in range(1, STEPS + 1)]


@contextlib.asynccontextmanager
async def _chaos(prefix: str, seed: int, *, linked_on: str | None = None) -> AsyncIterator[CutProxy]:
    """Two nodes behind a proxy cutting every connection 0.2-1.2 s after it was accepted."""
    async with one_redis.cluster(2, prefix, policy=POLICY, options=OPTIONS) as (a, b):
        if linked_on is not None:
            await _wait_for_links(linked_on, prefix, 2)
        ports = [one_redis.port_of(a), one_redis.port_of(b)]
        async with CutProxy(ports, cut_after_delay=CUTS, seed=seed) as proxy:
            yield proxy


async def _run_clients(url: str, clients: int, calls: int) -> list[Outcome]:
    outcomes: list[Outcome] = []
    async with anyio.create_task_group() as tg:
        for number in range(clients):
            tg.start_soon(_client, url, number, calls, outcomes)
    return outcomes


def _assert_clean(outcomes: list[Outcome], clients: int, calls: int, summary: str) -> None:
    assert len(outcomes) == clients * calls, summary
    for outcome in outcomes:
        assert outcome.error is None, summary
        assert outcome.result == f"done {STEPS}", summary
        assert outcome.progress == _expected(), f"lost, duplicated or reordered: {outcome}{summary}"


# ----------------------------------------------------------------------------- cuts only


async def _cuts_only(prefix: str, *, linked_on: str | None = None) -> None:
    seed = _seed()
    print(f"\nchaos seed={seed}")
    started = time.monotonic()
    async with _chaos(prefix, seed, linked_on=linked_on) as proxy:
        with anyio.fail_after(scaled(60)):
            outcomes = await _run_clients(proxy.mcp_url, CLIENTS, CALLS)
    summary = _summary(seed, proxy, outcomes, time.monotonic() - started)
    print(summary)
    _assert_clean(outcomes, CLIENTS, CALLS, summary)
    assert proxy.stats.cuts >= CLIENTS * CALLS, summary


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A key prefix of the test's own on the suite's Redis; deleted afterwards."""
    value = stores.redis_prefix("test-chaos")
    try:
        yield value
    finally:
        if stores.redis_unavailable() is None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(scaled(10)):
                await anyio.to_thread.run_sync(stores.delete_prefix_sync, stores.redis_url(), value)


async def test_chaos_cuts_on_one_redis(prefix: str) -> None:
    """4 clients x 4 calls of a 2 s streaming tool, every connection cut 0.2-1.2 s in: all clean."""
    stores.require_redis()
    await _cuts_only(prefix)


@pytest.fixture
async def cluster_prefix(redis_cluster_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """A prefix of the test's own, the nodes started now pointed at the session's cluster."""
    monkeypatch.setenv(stores.SUITE_URL_ENV, redis_cluster_url)
    value = stores.redis_prefix("test-chaos-cluster")
    try:
        yield value
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(scaled(10)):
            await _delete_prefix(redis_cluster_url, value)


async def _delete_prefix(url: str, prefix: str) -> None:
    from redis.asyncio.cluster import RedisCluster

    client = RedisCluster.from_url(url)
    try:
        await client.initialize()
        found = [key async for key in client.scan_iter(match=stores.escape_glob(prefix) + "*")]
        for key in found:
            await client.unlink(key)
    finally:
        await client.aclose()


async def test_chaos_cuts_on_a_redis_cluster(cluster_prefix: str, redis_cluster_url: str) -> None:
    """The same chaos, the store on the 3-primary cluster (partitions over its slots): all clean."""
    await _cuts_only(cluster_prefix, linked_on=redis_cluster_url)


# ----------------------------------------------------------------------------- a primary killed


@pytest.fixture
def own_cluster() -> Iterator[RedisClusterServers]:
    """A 3-primary cluster of this test's own: it loses a primary."""
    try:
        servers = RedisClusterServers(name="chaos-kill")
        servers.start()
    except RedisServerMissing as exc:
        if stores.IN_CI:
            pytest.fail(f"CI=true but {exc}")
        pytest.skip(str(exc))
    try:
        yield servers
    finally:
        servers.stop()


async def test_chaos_with_a_cluster_primary_killed(
    own_cluster: RedisClusterServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kill a primary (SIGKILL) 2 s into the chaos run: every call ends (a result or a clear
    error) in bounded time, what a client saw is never duplicated or reordered, and once the
    cluster has failed over, new clients' calls on the same (never restarted) nodes succeed."""
    url = own_cluster.url
    monkeypatch.setenv(stores.SUITE_URL_ENV, url)
    prefix = stores.redis_prefix("test-chaos-kill")
    seed = _seed()
    print(f"\nchaos seed={seed}")
    victim = next(i for i in own_cluster.primaries_now() if i != 0)  # not the URL the apps were given
    # cluster-node-timeout to flag the primary failed, then its replica's election and promotion.
    failover_s = 2 * CLUSTER_NODE_TIMEOUT_MS / 1000 + 2.0
    bound = NODE_TIMEOUT_S + failover_s
    outcomes: list[Outcome] = []
    async with _chaos(prefix, seed, linked_on=url) as proxy:
        with anyio.fail_after(scaled(90)):
            async with anyio.create_task_group() as tg:
                for number in range(CLIENTS):
                    tg.start_soon(_client, proxy.mcp_url, number, CALLS, outcomes)
                await anyio.sleep(2.0)
                own_cluster.nodes[victim].kill()
                killed_at = time.monotonic()
                failed_over = await anyio.to_thread.run_sync(own_cluster.wait_failed_over, victim, scaled(30))
            ended = time.monotonic() - killed_at
            # The nodes skip a failed store for `STORE_RETRY_S` before trying it again, and
            # each one's cluster client learns the new primary at its next failed command:
            # new clients until a round of them is clean (the service recovered), bounded.
            await anyio.sleep(STORE_RETRY_S)
            deadline = time.monotonic() + scaled(30)
            while True:
                later = await _run_clients(proxy.mcp_url, 2, 2)
                if all(o.result == f"done {STEPS}" for o in later) or time.monotonic() > deadline:
                    break
                await anyio.sleep(STORE_RETRY_S)
            recovered = time.monotonic() - killed_at
    summary = _summary(seed, proxy, outcomes, 0)
    print(
        f"{summary}\nkilled node {victim} (a primary); failed over {failed_over:.1f}s later; "
        f"the first clients' calls ended {ended:.1f}s after the kill; new clients' calls all "
        f"succeeded {recovered:.1f}s after it"
    )
    for outcome in outcomes:
        print(
            f"  client {outcome.client} call {outcome.call}: {outcome.result or outcome.error} "
            f"({len(outcome.progress)} progress, {outcome.took:.1f}s)"
        )
    assert len(outcomes) == CLIENTS * CALLS, summary
    for outcome in outcomes:
        assert outcome.took <= scaled(bound + SECONDS + 10), f"a call hung: {outcome}{summary}"
        if outcome.error is None:
            assert outcome.result == f"done {STEPS}", summary
            assert outcome.progress == _expected(), f"{outcome}{summary}"
    # What a call that ended in an error saw is not held to order. Found by this test: while the
    # store was down a keyed POST was served by the app directly, not resumable, and a retry of
    # it (same `Idempotency-Key`, which only the store could match) ran it again, both answers
    # reaching the client - its progress interleaved. A keyed POST is now a 503 while the store
    # is down (`tests/test_store_down_defects.py`); still counted here, not asserted.
    garbled = [o for o in outcomes if o.error is not None and o.progress != sorted(set(o.progress))]
    print(f"calls ended in an error whose progress was out of order or doubled: {len(garbled)}")
    _assert_clean(later, 2, 2, _summary(seed, proxy, later, 0))
