"""The official TypeScript SDK's `McpServer` over `StreamableHTTPServerTransport`
(tests/ts_server/server.mjs, `@modelcontextprotocol/sdk` pinned there), run as its own process
behind `mcp-resume proxy` (real processes, loopback only), gets what the middleware gives a
Python app: the scenarios of tests/support/proxy_e2e.py (chaos through cut connections, a long
call become a task, the REST face, an idempotent retry run once, a draining node, `mcp-resume
inspect`) on the memory store and on Redis. The stock Python server gets the same in
tests/test_proxy_e2e.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import proxy_e2e
from tests.support.proxy_e2e import Deployment, Upstream

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with proxy_e2e.upstream_process("ts") as upstream:
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
