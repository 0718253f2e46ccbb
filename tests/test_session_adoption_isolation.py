"""Only a session's principal takes it over: bob cannot adopt, read or end alice's session once
its node is gone, and an unknown or forged session id stays a 404.

Two nodes of `tests.apps.multinode_auth_app` (alice and bob: two subjects of one OAuth client),
authenticated by a layer outside the wrapper or by the app's own auth inside it. alice opens a
session on A and sets its log level; A is killed (SIGKILL). Through B, bob's requests naming
alice's session (a call, the GET stream, a DELETE) are refused as the app refuses a session it
does not hold, and take nothing over (no adoption claim in the store); a forged record in the
store (not sealed with the cluster's secret) adopts nothing either. Then alice's own request
through B takes the session over: the app there sees alice, the id she knows is the one she
gets back, and her DELETE through B ends it.
"""

from __future__ import annotations

import json
import signal
import uuid

import pytest
import redis.asyncio as aioredis

from tests.support.cluster import pid_of, prefix
from tests.support.stores import redis_url
from tests.test_multinode_relayed_caller import ALICE, BOB, Session, direct, final, nodes

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.slow]

__all__ = ["prefix"]  # the fixture, used by name


async def _keys(prefix: str, part: str) -> list[bytes]:
    client = aioredis.Redis.from_url(redis_url())
    try:
        return [key async for key in client.scan_iter(match=f"{prefix}k:{part}*")]
    finally:
        await client.aclose()


@pytest.mark.parametrize("auth", ["outside", "inside"])
async def test_bob_cannot_adopt_read_or_end_alices_session(prefix: str, auth: str) -> None:
    async with nodes(prefix, auth, {"retry_ms": 20}) as c, direct(c) as (on_a, on_b):
        alice = Session(on_a, ALICE)
        assert (await alice.initialize()).status == 200
        assert (await alice.rpc("logging/setLevel", level="debug")).status == 200
        session_id = alice.session_id
        assert session_id is not None
        c.a.signal(signal.SIGKILL)
        c.a.wait(10)

        bob = alice.via(on_b, BOB)
        called = await bob.exchange("POST", "/mcp", bob.tool_call("whoami"))
        assert called.status in (401, 404) and "alice" not in called.raw.decode(), called.raw
        stream = await on_b.get("/mcp", headers={**bob.headers(), "accept": "text/event-stream"})
        assert stream.status_code in (401, 404, 405), stream.text
        ended = await on_b.delete("/mcp", headers=bob.headers())
        assert ended.status_code in (401, 404), ended.text
        assert await _keys(prefix, "session-adoption") == [], "bob's requests took nothing over"

        forged = alice.via(on_b)
        forged.session_id = uuid.uuid4().hex
        unknown = await forged.exchange("POST", "/mcp", forged.tool_call("whoami"))
        assert unknown.status == 404, unknown.raw
        record = await _keys(prefix, f"session-record:{session_id}")
        assert len(record) == 1
        client = aioredis.Redis.from_url(redis_url())
        try:
            sealed = (await client.get(record[0])) or b""
            kept = json.loads(sealed)
            body = json.loads(kept["r"])
            body["p"] = None  # nobody's: anyone could adopt it, if it were taken at its word
            await client.set(
                record[0].decode().replace(session_id, "forged"),
                json.dumps({"r": json.dumps(body).replace(session_id, "forged"), "m": kept["m"]}),
            )
        finally:
            await client.aclose()
        forged.session_id = "forged"
        assert (await forged.exchange("POST", "/mcp", forged.tool_call("whoami"))).status == 404

        through_b = alice.via(on_b)
        called = await through_b.exchange("POST", "/mcp", through_b.tool_call("whoami"))
        assert called.status == 200, called.raw
        assert int(called.headers["x-node"]) == pid_of(c.b)
        assert called.headers.get("mcp-session-id") in (None, session_id)
        assert final(called)["result"]["content"][0]["text"] == "you are alice"
        assert len(await _keys(prefix, "session-adoption")) == 1, await _keys(prefix, "session-adoption")
        assert (await through_b.rpc("tools/list")).status == 200

        assert (await on_b.delete("/mcp", headers=bob.headers())).status_code in (401, 404)
        assert (await through_b.rpc("tools/list")).status == 200, "bob's DELETE ended nothing"
        ended = await on_b.delete("/mcp", headers=through_b.headers())
        assert ended.status_code in (200, 204), ended.text
        assert (await through_b.rpc("tools/list")).status == 404
