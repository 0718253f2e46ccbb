"""Node processes on one Redis prefix, behind the round-robin proxy: the multi-node harness.

`cluster(count, prefix, ...)` starts `count` uvicorn processes of an app (`multinode_app`
unless said) sharing a key prefix and the secret; `cluster_behind_proxy` puts them behind a
`CutProxy`. Which connection goes where is the round robin's choice; `steer` makes the next
connection go to a given node (the round robin's next pick, set). `prefix` is the fixture of a test's own key prefix, deleted afterwards.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.proxy import CutProxy
from tests.support.server import SubprocessServer
from tests.support.stores import delete_prefix_sync, redis_prefix, redis_unavailable, redis_url, require_redis
from tests.support.timing import scaled

__all__ = [
    "SECRET",
    "TARGET",
    "Alternation",
    "cluster",
    "cluster_behind_proxy",
    "pid_of",
    "port_of",
    "prefix",
    "steer",
]

TARGET = "tests.apps.multinode_app:create_app"
SECRET = "multinode-test-secret-0123456789"


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A Redis key prefix of the test's own; every key under it is deleted afterwards."""
    value = redis_prefix("test-multinode")
    try:
        yield value
    finally:
        if redis_unavailable() is None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(scaled(10)):
                await anyio.to_thread.run_sync(delete_prefix_sync, redis_url(), value)


@contextlib.asynccontextmanager
async def cluster(
    count: int,
    prefix: str,
    *,
    policy: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    redis_url: str | None = None,
    app: str | None = None,
    log_dir: Path | None = None,
    target: str = TARGET,
    env: dict[str, str] | None = None,
    graceful_shutdown: float = 0.5,
) -> AsyncIterator[list[SubprocessServer]]:
    """``count`` node processes sharing ``prefix`` and the secret, started in parallel, always stopped
    (``log_dir``: each node's DEBUG log there, ``node-<pid>.log``; ``target``: the app each runs,
    `multinode_app` unless said; ``env``: more of their environment; ``graceful_shutdown``: the
    server's `--timeout-graceful-shutdown`)."""
    env = {**(env or {}), "MCP_RESUME_PREFIX": prefix, "MCP_RESUME_SECRET": SECRET}
    if log_dir is not None:
        env["MCP_RESUME_NODE_LOG_DIR"] = str(log_dir)
    if app:
        env["MCP_RESUME_APP"] = app
    if policy:
        env["MCP_RESUME_POLICY_JSON"] = json.dumps(policy)
    if options:
        env["MCP_RESUME_OPTIONS_JSON"] = json.dumps(options)
    if redis_url:
        env["MCP_RESUME_REDIS_URL"] = redis_url
    servers = [SubprocessServer(target, env=env, graceful_shutdown=graceful_shutdown) for _ in range(count)]
    try:
        async with anyio.create_task_group() as tg:
            for server in servers:
                tg.start_soon(anyio.to_thread.run_sync, server.start)
        yield servers
    finally:
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for server in servers:
                    tg.start_soon(anyio.to_thread.run_sync, server.stop)
            for server in servers:
                server.kill()


def port_of(server: SubprocessServer) -> int:
    assert server.info is not None
    return server.info.port


def pid_of(server: SubprocessServer) -> int:
    assert server.pid is not None
    return server.pid


async def steer(proxy: CutProxy, port: int) -> None:
    """Make the balancer's next connection go to ``port`` (`CutProxy.send_next_to`). It used to
    burn empty connections until it was ``port``'s turn, and gave up when a client's own
    background connections (the stock client's GET, reconnecting) kept taking the turns."""
    if port not in proxy.backend_ports:
        raise AssertionError(f"port {port} is not behind the proxy ({proxy.backend_ports})")
    proxy.send_next_to(port)


class Alternation:
    """Sends the next connection (a client's answer POST) to the nodes in turn."""

    def __init__(self, proxy: CutProxy, port_by_pid: dict[int, int]) -> None:
        self.proxy = proxy
        self.port_by_pid = port_by_pid
        self.targets: list[int] = []
        """The pid each answer was steered to, in order."""

    async def steer_next(self) -> int:
        """Steer the next connection; returns how many have been steered (1, 2, ...)."""
        target = list(self.port_by_pid)[len(self.targets) % len(self.port_by_pid)]
        self.targets.append(target)
        await steer(self.proxy, self.port_by_pid[target])
        return len(self.targets)


@contextlib.asynccontextmanager
async def cluster_behind_proxy(
    count: int, prefix: str, **options: Any
) -> AsyncIterator[tuple[list[SubprocessServer], CutProxy]]:
    """`cluster(count, prefix, **options)` on Redis (skipped without it), behind a round-robin `CutProxy`."""
    require_redis()
    async with cluster(count, prefix, **options) as servers, CutProxy([port_of(s) for s in servers]) as proxy:
        yield servers, proxy
