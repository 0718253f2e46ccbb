"""The REST face while its store is down: `503` + `Retry-After` as problem+json, never a `500`,
and the call that was running when the store went away ends `success` once it is back.

The store is `tests/support/down_store.py`'s: the memory store refusing every call while the
test says it is down.
"""

from __future__ import annotations

import uuid

import anyio
import httpx
import pytest

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.store import health
from tests.apps.rest_app import RUNS, create_app
from tests.support.down_store import DownStore
from tests.support.server import serve_in_loop
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _is_outage_problem(response: httpx.Response) -> bool:
    return (
        response.status_code == 503
        and response.headers["content-type"].startswith("application/problem+json")
        and response.headers.get("retry-after") is not None
        and response.json()["status"] == 503
    )


async def test_a_store_outage_is_a_503_to_retry_and_the_running_call_still_succeeds() -> None:
    store = DownStore()
    tag = f"outage-{uuid.uuid4().hex[:8]}"
    app = resumable(
        create_app(), policy=Policy(task_poll_interval_ms=100, task_ttl_s=120), store=store, rest=True
    )
    async with serve_in_loop(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=20) as client:
        url = "/mcp/tools/slow/calls/outage-1"
        put = await client.put(
            url, json={"steps": 10, "tag": tag, "step_s": 0.2}, headers={"Idempotency-Key": tag}
        )
        assert put.status_code == 201 and put.json()["status"] == "running", put.text
        store.down = True
        try:
            during = [
                await client.get(url),
                await client.put(
                    "/mcp/tools/echo/calls/outage-2", json={"text": "x"}, headers={"Idempotency-Key": "k2"}
                ),
                await client.post(f"{url}/cancel"),
                await client.get("/mcp/tools/slow/calls"),
            ]
            await anyio.sleep(1.0)  # the tool goes on meanwhile; what it says is held
        finally:
            store.down = False
        for response in during:
            assert _is_outage_problem(response), (response.status_code, response.text)
        outage_answers = 0
        with anyio.fail_after(scaled(20)):
            while True:  # the SEP's loop: 503 is "retry", as Retry-After says; running is "poll"
                response = await client.get(url)
                if response.status_code == 503:
                    assert _is_outage_problem(response), response.text
                    outage_answers += 1
                    await anyio.sleep(float(response.headers["retry-after"]))
                    continue
                state = response.json()
                if state["status"] != "running":
                    break
                await anyio.sleep(0.1)
        print(f"\n503s after the store came back (until the node noticed): {outage_answers}")
        assert state["status"] == "success", state
        assert state["result"]["content"][0]["text"] == f"done {tag}"
        assert RUNS[tag] == 1, "the call ran once; the outage cancelled nothing"
        again = await client.put(
            url, json={"steps": 10, "tag": tag, "step_s": 0.2}, headers={"Idempotency-Key": tag}
        )
        assert again.status_code == 200 and again.json()["status"] == "success", "its record survived"


#: A request in a session: the front looks the session up in the store, before any feature layer.
_MCP_HEADERS = {"accept": "application/json, text/event-stream", "mcp-session-id": "s1"}


@pytest.mark.parametrize("noticed", [False, True])
async def test_a_store_down_before_the_first_request_is_a_503_too(
    noticed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The face meets the engine on its first request through the stack. With the store down
    from the start, and an MCP client having met the outage first (`noticed`: the front then
    serves without the store for a while, past the feature layers), that request does not reach
    the engine: the answer is still the outage's 503, and the face works once the store is back."""
    monkeypatch.setattr(health, "STORE_RETRY_S", 3.0)  # the front skips the store this long
    store = DownStore()
    store.down = True
    app = resumable(create_app(), policy=Policy(task_poll_interval_ms=100), store=store, rest=True)
    async with serve_in_loop(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=20) as client:
        if noticed:  # an MCP client met the outage first, before any feature layer saw it
            mcp = await client.post(
                "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=_MCP_HEADERS
            )
            assert mcp.status_code == 404, mcp.text  # its session is unknown to the app
        first = await client.get("/mcp/tools/echo/calls/never")
        assert _is_outage_problem(first), (first.status_code, first.text)
        put = await client.put(
            "/mcp/tools/echo/calls/c1", json={"text": "x"}, headers={"Idempotency-Key": "k"}
        )
        assert _is_outage_problem(put), (put.status_code, put.text)
        store.down = False
        with anyio.fail_after(scaled(20)):
            while True:
                response = await client.put(
                    "/mcp/tools/echo/calls/c1", json={"text": "x"}, headers={"Idempotency-Key": "k"}
                )
                if response.status_code != 503:
                    break
                await anyio.sleep(float(response.headers["retry-after"]))
        assert response.status_code == 201 and response.json()["status"] == "success", response.text
