"""The stock `mcp` low-level Python server (tests/apps/counted_upstream.py: unwrapped, counting the
tool calls that reach it), run as its own process behind `mcp-resume proxy` (real processes,
loopback only), gets what the middleware gives a Python app: the scenarios of
tests/support/proxy_e2e.py (chaos through cut connections, a long call become a task, the REST
face, an idempotent retry run once, a draining node, `mcp-resume inspect`) on the memory store
and on Redis. And a proxy whose upstream does not listen answers 502 with a JSON-RPC error.
The TypeScript SDK's server gets the same in tests/test_proxy_e2e_ts.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import anyio
import httpx
import pytest

from tests.support import proxy_e2e
from tests.support.processes import mcp_resume
from tests.support.proxy_e2e import Deployment, Upstream
from tests.support.raw import ACCEPT_BOTH

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with proxy_e2e.upstream_process("python") as upstream:
        yield upstream


@pytest.fixture(scope="module", params=["memory", "redis"])
def deployment(upstream: Upstream, request: pytest.FixtureRequest) -> Iterator[Deployment]:
    with proxy_e2e.proxy_nodes(upstream, request.param) as deployment:
        yield deployment


async def test_chaos_twenty_calls_exact_through_cut_connections(deployment: Deployment) -> None:
    await proxy_e2e.check_chaos_twenty_calls_exact_through_cut_connections(deployment)


async def test_a_long_call_of_an_auto_mode_client_becomes_a_task_and_completes_through_tasks_get(
    deployment: Deployment,
) -> None:
    await proxy_e2e.check_a_long_call_of_an_auto_mode_client_becomes_a_task_and_completes_through_tasks_get(
        deployment
    )


async def test_the_rest_face_serves_the_upstreams_tools(deployment: Deployment) -> None:
    await proxy_e2e.check_the_rest_face_serves_the_upstreams_tools(deployment)


async def test_a_retried_post_with_an_idempotency_key_runs_the_tool_once(deployment: Deployment) -> None:
    await proxy_e2e.check_a_retried_post_with_an_idempotency_key_runs_the_tool_once(deployment)


async def test_a_node_told_to_stop_drains_and_its_call_completes_through_the_other(
    upstream: Upstream,
) -> None:
    await proxy_e2e.check_a_node_told_to_stop_drains_and_its_call_completes_through_the_other(upstream)


async def test_inspect_shows_the_nodes_sessions_and_calls_without_principals(deployment: Deployment) -> None:
    await proxy_e2e.check_inspect_shows_the_nodes_sessions_and_calls_without_principals(deployment)


async def test_an_unreachable_upstream_is_a_502_with_a_json_rpc_error() -> None:
    with socket_port() as port:
        node = mcp_resume(
            "proxy", "--upstream", f"http://127.0.0.1:{port}/mcp", "--port", "0", "--log-level", "warning"
        )
        await anyio.to_thread.run_sync(node.start)
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(
                f"{node.url}/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={"accept": ACCEPT_BOTH},
            )
        assert response.status_code == 502, response.text
        assert response.json()["error"]["code"] == -32603 and response.json()["jsonrpc"] == "2.0"
    finally:
        await anyio.to_thread.run_sync(node.stop)


@contextlib.contextmanager
def socket_port() -> Iterator[int]:
    """A loopback port nobody listens on (bound and closed: a refused connection)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    yield port
