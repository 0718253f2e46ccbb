"""Garbage on the nodes' channels does not break relays between real nodes.

Two uvicorn nodes A and B (`tests.apps.multinode_app` on Redis, each logging to a file of
its own). A session lives on A; its calls go to B, which relays them to A over A's channel
and takes the answers off its own. Meanwhile JSON nested 100,000 deep, and other garbage, is
PUBLISHed to both channels every 0.1 s, as anyone who can publish on the store may.

Every relayed call is answered; neither node's cluster link fails (its inbox never stops and
rejoins); each node logs one warning per kind of message it dropped, however many came.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
import httpx
import pytest

from tests.support.cluster import cluster, port_of, prefix
from tests.support.raw import RawSession
from tests.support.server import HOST
from tests.support.stores import redis_url, require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name

GARBAGE = [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"id": "x", "t": "req", "sealed": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b"\xff not json",
    b'{"id": "x", "t": "body", "sealed": "{}", "seal": "forged"}',
]
CALLS = 30


async def test_relays_go_on_while_garbage_floods_the_channels(prefix: str) -> None:
    import redis.asyncio as aioredis

    require_redis()
    with tempfile.TemporaryDirectory() as logs:
        async with (
            cluster(2, prefix, log_dir=Path(logs)) as (a, b),
            httpx.AsyncClient(base_url=f"http://{HOST}:{port_of(a)}", timeout=scaled(20)) as on_a,
            httpx.AsyncClient(base_url=f"http://{HOST}:{port_of(b)}", timeout=scaled(20)) as on_b,
        ):
            alice = RawSession(on_a)
            assert (await alice.initialize()).status == 200
            through_b = RawSession(on_b)
            through_b.session_id = alice.session_id
            redis = aioredis.Redis.from_url(redis_url())
            channels = [key.decode() async for key in redis.scan_iter(f"{prefix}k:node:*")]
            assert len(channels) == 2, channels
            published = 0

            async def flood() -> None:
                nonlocal published
                while True:
                    for key in channels:
                        for raw in GARBAGE:
                            await redis.publish(key.replace(f"{prefix}k:", f"{prefix}ch:", 1), raw)
                            published += 1
                    await anyio.sleep(0.1)

            answers: list[int] = []
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(flood)
                    for i in range(CALLS):
                        call = through_b.tool_call("echo", {"text": f"call {i}"})
                        reply = await through_b.exchange("POST", "/mcp", call)
                        answers.append(reply.status)
                        assert reply.status == 200, (i, reply.status, reply.raw)
                        [message] = [m for m in reply.messages() if m.get("id") == call["id"]]
                        assert message["result"]["content"][0]["text"] == f"call {i}"
                    tg.cancel_scope.cancel()
            finally:
                await redis.aclose()
        text = {path.name: await path.read_text() async for path in anyio.Path(logs).glob("node-*.log")}
    print(
        f"\n{CALLS} calls relayed through B, {published} garbage messages published: {answers.count(200)} 200s"
    )
    assert len(text) == 2
    for name, log in text.items():
        warnings = [line for line in log.splitlines() if " WARNING " in line or " ERROR " in line]
        assert not [w for w in warnings if "cluster link" in w], (name, warnings)
        deep = [w for w in warnings if "nests too deep" in w]
        assert len(deep) == 1, (name, warnings)
