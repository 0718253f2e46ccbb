"""A cancel notice (the resumable-streams opt-in) landing on the node that does not run the call.

Two uvicorn processes (`tests.apps.multinode_tasks_app`: the stock `MCPServer` app with a
slow tool that records its cancellation, on one Redis) behind the round-robin `CutProxy`.
A 2026-07-28 call opted into resumable streams runs on node A; its client's
`notifications/cancelled` reaches node B, which finds the call's stream in the store and
relays the notice to A (as `tasks/cancel` is relayed): the tool stops on A, B answers 202.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

from tests.support.cluster import pid_of, port_of, prefix, steer
from tests.support.modern_rpc import Raw
from tests.support.raw import SSEReader
from tests.support.timing import scaled
from tests.test_cancel_notices import call, headers, notice
from tests.test_multinode_tasks import nodes

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

POLICY = {"retry_ms": 20, "max_wait_s": 60}


@pytest.mark.parametrize("attached", [True, False], ids=["attached", "detached"])
async def test_a_notice_sent_to_node_b_cancels_the_call_running_on_node_a(
    prefix: str, attached: bool
) -> None:
    tag = f"elsewhere-{attached}"
    key = uuid.uuid4().hex
    async with nodes(prefix, POLICY) as ((a, b), proxy):
        raw = Raw(proxy)
        ended = anyio.Event()
        answers: list[object] = []

        async def run_call() -> None:
            body = call(1, "slow", {"seconds": 30, "tag": tag})
            h = headers("tools/call", "slow", idempotency_key=key)
            try:
                async with raw.client.stream("POST", "/mcp", json=body, headers=h) as response:
                    assert response.status_code == 200 and int(response.headers["x-node"]) == pid_of(a)
                    async for event in SSEReader(response):
                        if event.data:
                            answers.append(event.message)
                        if not attached:
                            return  # the priming event: the opt-in keeps the call running
            finally:
                ended.set()

        async with raw.client, anyio.create_task_group() as tg:
            await steer(proxy, port_of(a))
            tg.start_soon(run_call)
            with anyio.fail_after(scaled(10)):
                while tag not in (await raw.seen(a))["started"]:
                    await anyio.sleep(0.05)
            if not attached:
                await ended.wait()
            await steer(proxy, port_of(b))
            response = await raw.client.post(
                "/mcp", json=notice(1), headers=headers("notifications/cancelled", idempotency_key=key)
            )
            assert response.status_code == 202 and int(response.headers["x-node"]) == pid_of(b)
            with anyio.fail_after(scaled(2)):
                while tag not in (await raw.seen(a))["cancelled"]:
                    await anyio.sleep(0.05)
            with anyio.fail_after(scaled(5)):
                await ended.wait()
            on_a, on_b = await raw.seen(a), await raw.seen(b)
    assert answers == [], "a cancelled call was answered"
    assert on_a["finished"] == [] and on_b["started"] == []


async def test_a_notice_on_node_b_naming_nothing_running_is_202(prefix: str) -> None:
    async with nodes(prefix, POLICY) as ((_, b), proxy):
        raw = Raw(proxy)
        async with raw.client:
            await steer(proxy, port_of(b))
            response = await raw.client.post(
                "/mcp", json=notice(99), headers=headers("notifications/cancelled", idempotency_key="k")
            )
            assert response.status_code == 202 and int(response.headers["x-node"]) == pid_of(b)
