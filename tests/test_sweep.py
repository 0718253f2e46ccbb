"""The sweep: a re-runnable call whose node is gone runs again though nobody follows or polls it.

Nodes A and B of `tests.apps.rerun_app` (`Policy(rerun_on_loss=True)`) on Redis, the harness of
`test_multinode_rerun.py`. A task (2026-07-28) starts on A; A is killed (SIGKILL). Nobody polls
the task: B's sweep (every `node_timeout_s`, `engine/sweep.py`) finds it, and B runs it again,
once. Only then does the client come back: the task is completed with the re-run's result.
"""

from __future__ import annotations

import time

import anyio
import pytest

from tests.support.cluster import port_of, prefix
from tests.support.modern_rpc import Raw
from tests.support.timing import scaled
from tests.test_multinode_rerun import NODE_TIMEOUT_S, runs, two_nodes

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name


async def test_a_task_nobody_polls_is_run_again_by_the_sweep(prefix: str) -> None:
    tag = "swept"
    policy = {"retry_ms": 20, "task_after_s": 0, "task_ttl_s": 60, "task_poll_interval_ms": 50}
    async with two_nodes(prefix, rerun=True, policy=policy) as (a, b, proxy):
        proxy.backend_ports = [port_of(a), port_of(b)]
        raw = Raw(proxy)
        async with raw.client:
            answer, _ = await raw.rpc(
                "tools/call",
                {"name": "counted", "arguments": {"seconds": 2, "steps": 20, "tag": tag}},
                "counted",
                a,
            )
            assert answer["result"]["resultType"] == "task", answer
            task_id = answer["result"]["taskId"]
            while await runs(prefix, tag) < 1:
                await anyio.sleep(0.05)
            a.kill()
            killed_at = time.monotonic()
            proxy.backend_ports = [port_of(b)]
            with anyio.fail_after(scaled(30)):
                while await runs(prefix, tag) < 2:  # (Redis, not the service: nobody polls)
                    await anyio.sleep(0.1)
            rerun_after = time.monotonic() - killed_at
            with anyio.fail_after(scaled(30)):
                while (task := (await raw.get(task_id, b))[0])["status"] == "working":
                    await anyio.sleep(0.1)
        ran = await runs(prefix, tag)
    print(
        f"\nswept: run again {rerun_after:.2f}s after the kill (node_timeout_s={NODE_TIMEOUT_S}); ran {ran}"
    )
    assert task["status"] == "completed", task
    assert task["result"]["content"][0]["text"] == f"counted {tag}"
    assert ran == 2, "once lost with node A, once run again by B's sweep"
