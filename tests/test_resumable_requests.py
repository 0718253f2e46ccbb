"""SEP-975 resumable requests, added from outside a stock `mcp` app, at the protocol level."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import MemoryStore, Policy, resumable
from tests.apps.probe_app import PROBE, create_app
from tests.support.raw import RawSession, Reply
from tests.support.server import serve
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

FAST = Policy(retry_ms=20, max_wait_s=5.0)
CAPS = {"resumableRequests": {}, "elicitation": {}}


@contextlib.asynccontextmanager
async def wrapped(policy: Policy = FAST) -> AsyncIterator[httpx.AsyncClient]:
    app = resumable(create_app(), policy=policy, store=MemoryStore(), resumable_requests=True)
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=10) as client:
        yield client


async def session(client: httpx.AsyncClient, capabilities: dict[str, Any] | None = CAPS) -> RawSession:
    s = RawSession(client)
    await s.initialize(capabilities=capabilities)
    return s


def policy_of(reply: Reply) -> dict[str, Any]:
    first = reply.messages()[0]
    assert first["method"] == "notifications/requests/resumePolicy", first
    return dict(first["params"])


def resume(call: dict[str, Any], token: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": call["id"], "method": "requests/resume", "params": {"resumeToken": token}}


def get_status(s: RawSession, call: dict[str, Any], token: str) -> dict[str, Any]:
    params = {"requestId": call["id"], "resumeToken": token}
    return {"jsonrpc": "2.0", "id": s.next_id(), "method": "requests/getStatus", "params": params}


async def status(
    client: httpx.AsyncClient, s: RawSession, call: dict[str, Any], token: str
) -> dict[str, Any]:
    response = await client.post("/mcp", json=get_status(s, call, token), headers=s.headers())
    assert response.status_code == 200
    return dict(response.json())


async def status_until(
    client: httpx.AsyncClient, s: RawSession, call: dict[str, Any], token: str, wanted: dict[str, Any]
) -> dict[str, Any]:
    """`getStatus` polled until its result is `wanted` (the last answer, if it never was)."""
    answer: dict[str, Any] = {}
    with anyio.move_on_after(scaled(10)):
        while (answer := await status(client, s, call, token)).get("result") != wanted:
            await anyio.sleep(0.05)
    return answer


@pytest.mark.slow
async def test_the_resume_policy_comes_first_and_a_drop_before_any_app_message_is_resumable() -> None:
    PROBE.clear()
    async with wrapped() as client:
        s = await session(client)
        call = s.tool_call("sleep", {"seconds": 0.6, "tag": "975"})
        first = await s.exchange("POST", "/mcp", call, stop_after=1)  # the policy, then the connection drops
        assert first.events[0].data == ""  # priming
        params = policy_of(first)
        assert params["requestId"] == call["id"] and params["maxWait"] == 5.0 and params["resumeToken"]
        assert PROBE.finished == []  # the app has sent nothing yet
        rest = await s.exchange("POST", "/mcp", resume(call, params["resumeToken"]))
        assert rest.status == 200
        assert (
            rest.messages()[-1]
            == {
                "jsonrpc": "2.0",
                "id": call["id"],
                "result": {"content": [{"type": "text", "text": "slept 975"}], "isError": False},
            }
            or rest.messages()[-1]["result"]["content"][0]["text"] == "slept 975"
        )
        assert PROBE.started.count("975") == 1


@pytest.mark.slow
async def test_get_status_reports_without_draining() -> None:
    async with wrapped() as client:
        s = await session(client)
        call = s.tool_call("progress", {"steps": 4, "seconds": 0.4}, progress=True)
        first = await s.exchange("POST", "/mcp", call, stop_after=1)
        token = policy_of(first)["resumeToken"]
        now = await status(client, s, call, token)
        assert now["result"] == {
            "status": "processing",
            "hasPendingMessage": now["result"]["hasPendingMessage"],
            "hasInputRequest": False,
        }
        completed = {"status": "completed", "hasPendingMessage": True, "hasInputRequest": False}
        done = await status_until(client, s, call, token, completed)
        assert done["result"] == completed
        again = await status(client, s, call, token)
        assert again["result"] == done["result"], "getStatus drained nothing"
        rest = await s.exchange("POST", "/mcp", resume(call, token))
        progress = [
            m["params"]["progress"] for m in rest.messages() if m.get("method") == "notifications/progress"
        ]
        assert progress == [1, 2, 3, 4]
        assert rest.messages()[-1]["result"]["content"][0]["text"] == "done 4"


@pytest.mark.slow
async def test_status_failed_and_input_request() -> None:
    async with wrapped(FAST.replace(disconnect_on_input_request=False)) as client:
        s = await session(client)
        failing = s.tool_call("fail", {"seconds": 0.1})
        first = await s.exchange("POST", "/mcp", failing, stop_after=1)
        token = policy_of(first)["resumeToken"]
        with anyio.fail_after(scaled(10)):
            while (await status(client, s, failing, token))["result"]["status"] != "failed":
                await anyio.sleep(0.05)

        asking = s.tool_call("ask")
        first = await s.exchange("POST", "/mcp", asking, stop_after=2)
        assert first.messages()[-1]["method"] == "elicitation/create"
        token = policy_of(first)["resumeToken"]
        # (the server learns of the drop when the socket closes)
        input_request = {"status": "processing", "hasPendingMessage": False, "hasInputRequest": True}
        waiting = await status_until(client, s, asking, token, input_request)
        assert waiting["result"] == input_request
        elicit = first.messages()[-1]
        answer = {
            "jsonrpc": "2.0",
            "id": elicit["id"],
            "result": {"action": "accept", "content": {"name": "sep"}},
        }
        assert (await client.post("/mcp", json=answer, headers=s.headers())).status_code == 202
        rest = await s.exchange("POST", "/mcp", resume(asking, token))
        assert rest.messages()[-1]["result"]["content"][0]["text"] == "hello sep"


@pytest.mark.slow
async def test_expiry_cancels_and_later_calls_get_a_clear_error() -> None:
    PROBE.clear()
    async with wrapped(FAST.replace(max_wait_s=0.3)) as client:
        s = await session(client)
        call = s.tool_call("sleep", {"seconds": 30, "tag": "expire975"})
        first = await s.exchange("POST", "/mcp", call, stop_after=1)
        token = policy_of(first)["resumeToken"]
        with anyio.fail_after(scaled(8)):
            while "expire975" not in PROBE.cancelled:
                await anyio.sleep(0.05)
        late = await status(client, s, call, token)
        assert late["error"]["code"] == -32602 and "expired" in late["error"]["message"]
        response = await client.post("/mcp", json=resume(call, token), headers=s.headers())
        assert response.json()["error"]["code"] == -32602


@pytest.mark.slow
async def test_contact_resets_the_max_wait_timer() -> None:
    PROBE.clear()
    async with wrapped(FAST.replace(max_wait_s=1.5)) as client:
        s = await session(client)
        call = s.tool_call("sleep", {"seconds": 3.0, "tag": "kept"})
        first = await s.exchange("POST", "/mcp", call, stop_after=1)
        token = policy_of(first)["resumeToken"]
        for _ in range(10):  # 3 s of polling, each well inside the 1.5 s window
            await anyio.sleep(0.3)
            assert "result" in await status(client, s, call, token)
        rest = await s.exchange("POST", "/mcp", resume(call, token))
        assert rest.messages()[-1]["result"]["content"][0]["text"] == "slept kept"
        assert "kept" not in PROBE.cancelled


@pytest.mark.slow
async def test_bad_tokens_are_invalid_params_and_leak_nothing() -> None:
    async with wrapped() as client:
        s = await session(client)
        other = await session(client)
        call = s.tool_call("sleep", {"seconds": 0.5})
        token = policy_of(await s.exchange("POST", "/mcp", call, stop_after=1))["resumeToken"]
        cases = [
            (s, resume(call, token[:-2] + "xx")),  # tampered
            (s, resume(call, "garbage")),
            (s, {**resume(call, token), "id": call["id"] + 100}),  # another request id
            (other, resume(call, token)),  # another session
            (s, {"jsonrpc": "2.0", "id": call["id"], "method": "requests/resume", "params": {}}),
            (
                s,
                {
                    "jsonrpc": "2.0",
                    "id": call["id"],
                    "method": "requests/resume",
                    "params": {"resumeToken": 5},
                },
            ),
            (s, get_status(s, {"id": call["id"] + 1}, token)),
        ]
        for who, body in cases:
            response = await client.post("/mcp", json=body, headers=who.headers())
            answer = response.json()
            assert response.status_code == 200 and answer["error"]["code"] == -32602, (body, answer)
            assert call["id"] != answer["id"] or body["method"] == "requests/resume"
            assert "slept" not in response.text and (s.session_id or "") not in response.text


@pytest.mark.slow
async def test_a_second_resume_replaces_the_first_connection() -> None:
    async with wrapped() as client:
        s = await session(client)
        call = s.tool_call("progress", {"steps": 6, "seconds": 0.9}, progress=True)
        token = policy_of(await s.exchange("POST", "/mcp", call, stop_after=1))["resumeToken"]
        async with s.open("POST", "/mcp", resume(call, token)) as (response, reader):
            assert response.status_code == 200
            second = await s.exchange("POST", "/mcp", resume(call, token))
            first_raw = b""
            async for _ in reader:
                pass
            first_raw = reader.raw
        assert first_raw.endswith(b"retry: 20\n\n"), "the replaced connection is closed after a retry field"
        assert second.messages()[-1]["result"]["content"][0]["text"] == "done 6"


async def test_clients_without_the_capability_see_nothing_new() -> None:
    async with wrapped() as client:
        s = await session(client, capabilities={})
        reply = await s.exchange("POST", "/mcp", s.tool_call("echo", {"text": "plain"}))
        assert [m.get("method") for m in reply.messages()[:-1]] == []
        assert reply.messages()[-1]["result"]["content"][0]["text"] == "plain"


@pytest.mark.slow
async def test_per_request_capabilities_on_2026_07_28() -> None:
    async with wrapped() as client:
        s = RawSession(client, version="2026-07-28")
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"resumableRequests": {}},
        }
        call = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 0.3}, "_meta": meta},
        }
        headers = s.headers(mcp_method="tools/call", mcp_name="sleep")
        first = await s.exchange("POST", "/mcp", call, headers=headers, stop_after=1)
        token = policy_of(first)["resumeToken"]
        resumed = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "requests/resume",
            "params": {"resumeToken": token, "_meta": meta},
        }
        rest = await s.exchange("POST", "/mcp", resumed, headers=s.headers(mcp_method="requests/resume"))
        assert rest.messages()[-1]["result"]["content"][0]["text"].startswith("slept")


@pytest.mark.slow
async def test_a_stock_client_without_the_capability_works_exactly_as_before() -> None:
    from tests.apps import APP_FACTORIES
    from tests.support.mcp_client import call_with_progress, result_text, stock_session
    from tests.support.server import load_app

    app = resumable(
        load_app(APP_FACTORIES["lowlevel"]),
        policy=FAST.replace(max_connection_s=0.2),
        resumable_requests=True,
    )
    async with serve(app) as info, stock_session(info.mcp_url) as stock:
        result, progress = await call_with_progress(stock, "slow_progress", {"seconds": 1.0, "steps": 10})
        assert result_text(result) == "done 10"
        assert [int(p[0]) for p in progress] == list(range(1, 11))


@pytest.mark.slow
async def test_the_client_helper_advertises_resumes_with_requests_resume_and_asks_for_status() -> None:
    from mcp_resume_asgi.client import ResumableSession
    from tests.support.counting import Counting

    counting = Counting(
        resumable(create_app(), policy=FAST.replace(max_connection_s=0.2), resumable_requests=True)
    )
    async with serve(counting) as info, ResumableSession(info.mcp_url) as client:
        seen: list[float] = []
        statuses: list[dict[str, Any]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        async def watch() -> None:
            while not client.in_flight:
                await anyio.sleep(0.01)
            await anyio.sleep(0.3)
            (request_id,) = client.in_flight
            statuses.append(await client.request_status(request_id))

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            result = await client.call_tool(
                "progress", {"steps": 10, "seconds": 1.2}, on_progress=on_progress
            )
        assert result["content"][0]["text"] == "done 10"
        assert seen == [float(i) for i in range(1, 11)]
        assert statuses and statuses[0]["status"] == "processing" and statuses[0]["hasInputRequest"] is False
        # Resumed by POSTing requests/resume (SEP-975), not by GET.
        assert counting.counts["GET resume"] == 0 and counting.counts["GET resume link"] == 0, counting.counts
        assert counting.counts["POST resume"] >= 3, counting.counts
