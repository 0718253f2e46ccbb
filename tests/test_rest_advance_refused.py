"""A REST advance the app refuses ends the call, as `tasks/update` ends the task (issue 20,
item 6); a `NaN` in an advance is refused before the app and the call still waits.

Against the wrapped stock `MCPServer` of `test_rest.py`, in both eras the face speaks to it.
On 2026-07-28 an advance is the `tasks/update` of the call's task, and the app refuses an
answer its schema rejects when the call is issued again (HTTP 400, -32602): the call is
`failed` with that error, at once in the advance's own answer. On a 2025-11-25 session the
answer goes to the app's waiting elicitation, and the app decides (here a tool error).
"""

from __future__ import annotations

import uuid

import anyio
import pytest

import tests.test_rest as rest
from tests.support.rest_calls import settled
from tests.test_rest import era, face

pytestmark = pytest.mark.anyio
__all__ = ["era"]  # both eras (the fixture of test_rest.py)

URL = "/mcp/tools/confirm/calls/refused-1"


async def test_an_advance_the_app_refuses_ends_the_call() -> None:
    async with face() as client:
        put = await client.put(
            URL, json={"filename": "a.txt"}, headers={"idempotency-key": str(uuid.uuid4())}
        )
        assert put.status_code == 201, put.text
        put = await settled(client, put, URL)
        assert put.json()["status"] == "awaitingElicitationResult", put.text
        with anyio.fail_after(15):
            advanced = await client.post(
                f"{URL}/advance", json={"action": "bogus"}, headers={"if-match": put.headers["etag"]}
            )
        assert advanced.status_code == 200, advanced.text
        state = advanced.json()
        assert state["status"] == "failed", state
        if rest.ERA == "2026-07-28":
            assert state["error"]["code"] == -32602 and "result" not in state
        else:
            assert state["result"]["isError"] is True
        assert "retry-after" not in advanced.headers
        assert (await client.get(URL)).json() == state


async def test_a_nan_advance_is_a_parse_error_and_the_call_still_waits() -> None:
    async with face() as client:
        put = await client.put(
            URL, json={"filename": "b.txt"}, headers={"idempotency-key": str(uuid.uuid4())}
        )
        asking = put.json()
        assert asking["status"] == "awaitingElicitationResult", asking
        refused = await client.post(
            f"{URL}/advance",
            content=b'{"action": NaN}',
            headers={"if-match": put.headers["etag"], "content-type": "application/json"},
        )
        assert refused.status_code == 400, refused.text
        still = await client.get(URL)
        assert still.json()["status"] == "awaitingElicitationResult"
        assert still.json()["elicitationRequest"] == asking["elicitationRequest"]
        with anyio.fail_after(15):
            done = await client.post(
                f"{URL}/advance",
                json={"action": "accept", "content": {"confirm": True}},
                headers={"if-match": still.headers["etag"]},
            )
            while done.json()["status"] not in rest.TERMINAL:
                await anyio.sleep(0.1)
                done = await client.get(URL)
        assert (
            done.json()["status"] == "success"
            and done.json()["result"]["content"][0]["text"] == "deleted b.txt"
        )
