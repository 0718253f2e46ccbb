"""The REST face in front of a stock mcp 1.x server keeps one MCP session per caller.

mcp 1.x (stateful `FastMCP`) opens a session - a transport and a server task that stay -
for every POST that comes without an `Mcp-Session-Id`, even one it then refuses with 400.
So the face must send the app nothing outside the caller's session but its `initialize`
(and, once per process, the `server/discover` that tells the era). It used to open 2-5 per
REST request: the probes asking the app who calls (the face's own before each request, the
Tasks layer's before answering from a task's record) went without a session.

The server runs in the mcp 1.x venv of tests/test_mcp1_client.py (`tests.apps.mcp1_app:
create_rest_app`), which counts at the app what reaches it.
"""

from __future__ import annotations

import anyio
import httpx
import pytest

from tests.support.server import SubprocessServer
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]  # may build the venv


async def put(client: httpx.AsyncClient, call_id: str, text: str, **headers: str) -> str:
    """PUT an `echo` call; the status it answered (the call is over by then: `success`)."""
    response = await client.put(
        f"/mcp/tools/echo/calls/{call_id}",
        json={"text": text},
        headers={"Idempotency-Key": f"key-{call_id}", **headers},
    )
    assert response.status_code == 201, response.text
    status: str = response.json()["status"]
    return status


async def get(client: httpx.AsyncClient, call_id: str, text: str, **headers: str) -> None:
    response = await client.get(f"/mcp/tools/echo/calls/{call_id}", headers=headers)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["status"] == "success" and answer["result"]["content"][0]["text"] == text, answer


async def test_one_session_per_caller_reused_by_every_rest_request() -> None:
    from tests.test_mcp1_client import mcp1_python

    child = SubprocessServer("tests.apps.mcp1_app:create_rest_app")
    child.PYTHON = str(await anyio.to_thread.run_sync(mcp1_python))
    info = await anyio.to_thread.run_sync(child.start)
    try:
        async with httpx.AsyncClient(base_url=info.base_url, timeout=scaled(20)) as client:
            put_said: dict[str, str] = {}
            for n in range(3):  # one caller: three PUTs, three GETs
                put_said[f"alice-{n}"] = await put(client, f"alice-{n}", f"hello {n}")
                await get(client, f"alice-{n}", f"hello {n}")
            bob = {"Authorization": "Bearer bob"}  # another caller (other credentials)
            put_said["bob-0"] = await put(client, "bob-0", "hi bob", **bob)
            await get(client, "bob-0", "hi bob", **bob)
            counts = (await client.get("/__sessions__")).json()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(child.stop)
            child.kill()
    print(f"\nat the mcp 1.x app: {counts}; the PUTs said {put_said}")
    assert counts["initialize"] == 2, f"one session per caller: {counts}"
    # Nothing else without a session, but the era's discovery (once per process).
    assert counts["sessionless"] in ({}, {"server/discover": 1}), counts
    # The calls were over before their PUTs answered. (They answered `failed`, "the task's result
    # is no longer available", with the app asked who calls in the session: see
    # `Store.read_key_and_stream`, whose metadata could be live.)
    assert set(put_said.values()) == {"success"}, put_said
