"""The resume-token layer: interim results with `_meta.nextResumeToken` for a stock app's slow calls."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import MemoryStore, Policy, resumable
from mcp_resume_asgi.features.resume_tokens import INTERIM_META
from tests.apps import APP_FACTORIES
from tests.apps.probe_app import PROBE, create_app
from tests.support.counting import Counting
from tests.support.raw import RawSession, Reply
from tests.support.server import load_app, serve
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

POLICY = Policy(retry_ms=20, max_wait_s=10, soft_deadline_s=0.5)
OPT_IN = {"experimental": {"resumeTokens": {}}, "elicitation": {}}


@contextlib.asynccontextmanager
async def wrapped(policy: Policy = POLICY, **layer: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = resumable(create_app(), policy=policy, store=MemoryStore(), resume_tokens=layer or True)
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        yield client


async def session(client: httpx.AsyncClient, capabilities: dict[str, Any] | None = OPT_IN) -> RawSession:
    s = RawSession(client)
    await s.initialize(capabilities=capabilities)
    return s


def answer(reply: Reply) -> dict[str, Any]:
    message = reply.messages()[-1]
    assert "result" in message or "error" in message, message
    return dict(message)


def token_of(message: dict[str, Any]) -> str | None:
    meta = message.get("result", {}).get("_meta", {})
    token = meta.get("nextResumeToken")
    return token if isinstance(token, str) else None


def again(call: dict[str, Any], s: RawSession, token: str, **changes: Any) -> dict[str, Any]:
    params = dict(call["params"], **changes)
    params["_meta"] = {**params.get("_meta", {}), "resumeToken": token}
    return {"jsonrpc": "2.0", "id": s.next_id(), "method": call["method"], "params": params}


@pytest.mark.slow
async def test_interim_tokens_then_the_final_result_with_every_notification() -> None:
    async with wrapped() as client:
        s = await session(client)
        call = s.tool_call("progress", {"steps": 12, "seconds": 1.8}, progress=True)
        reply = await s.exchange("POST", "/mcp", call)
        interim = answer(reply)
        token = token_of(interim)
        assert token and interim["result"]["_meta"][INTERIM_META] is True
        assert interim["id"] == call["id"] and interim["result"]["isError"] is False
        progress = [
            m["params"]["progress"] for m in reply.messages() if m.get("method") == "notifications/progress"
        ]
        polls = 0
        while token:
            await anyio.sleep(0.2)  # the client was away: notifications wait for it
            body = again(call, s, token)
            reply = await s.exchange("POST", "/mcp", body)
            progress += [
                m["params"]["progress"]
                for m in reply.messages()
                if m.get("method") == "notifications/progress"
            ]
            last = answer(reply)
            assert last["id"] == body["id"], "the answer carries the re-issued request's id"
            token = token_of(last)
            polls += 1
        assert last["result"]["content"][0]["text"] == "done 12" and "_meta" not in last["result"]
        assert progress == list(range(1, 13)), "every notification, once, in order"
        assert polls >= 2
        spent = await client.post(
            "/mcp", json=again(call, s, interim["result"]["_meta"]["nextResumeToken"]), headers=s.headers()
        )
        assert spent.json()["error"]["code"] == -32602 and "completed" in spent.json()["error"]["message"]


@pytest.mark.slow
async def test_tokens_are_stable_while_nothing_changed() -> None:
    async with wrapped() as client:
        s = await session(client)
        call = s.tool_call("sleep", {"seconds": 1.4})
        first = token_of(answer(await s.exchange("POST", "/mcp", call)))
        assert first
        second = token_of(answer(await s.exchange("POST", "/mcp", again(call, s, first))))
        assert second == first
        final = answer(await s.exchange("POST", "/mcp", again(call, s, second)))
        assert final["result"]["content"][0]["text"].startswith("slept") and token_of(final) is None


@pytest.mark.slow
async def test_bad_tokens_are_invalid_params() -> None:
    async with wrapped(POLICY.replace(max_wait_s=0.5)) as client:
        s = await session(client)
        other = await session(client)
        call = s.tool_call("sleep", {"seconds": 30, "tag": "rt-expire"})
        token = token_of(answer(await s.exchange("POST", "/mcp", call)))
        assert token
        cases = {
            "changed params": (s, again(call, s, token, arguments={"seconds": 1})),
            "changed method": (s, {**again(call, s, token), "method": "resources/read"}),
            "tampered": (s, again(call, s, token[:-3] + "abc")),
            "another session": (other, again(call, other, token)),
            "garbage": (s, again(call, s, "mra1.garbage")),
        }
        for name, (who, body) in cases.items():
            response = await client.post("/mcp", json=body, headers=who.headers())
            error = response.json().get("error")
            assert error and error["code"] == -32602, (name, response.text)
            assert "Traceback" not in error["message"] and "slept" not in response.text
        assert (
            "match"
            in (await client.post("/mcp", json=cases["changed params"][1], headers=s.headers())).json()[
                "error"
            ]["message"]
        )
        await anyio.sleep(0.2)  # nobody polls: after max_wait_s the work is cancelled
        with anyio.fail_after(scaled(10)):
            while "rt-expire" not in PROBE.cancelled:
                await anyio.sleep(0.05)
        expired = await client.post("/mcp", json=again(call, s, token), headers=s.headers())
        assert expired.json()["error"]["code"] == -32602 and "expired" in expired.json()["error"]["message"]


@pytest.mark.slow
async def test_a_failing_tool_reports_its_error_on_the_next_resume() -> None:
    async with wrapped() as client:
        s = await session(client)
        call = s.tool_call("fail", {"seconds": 0.8})
        token = token_of(answer(await s.exchange("POST", "/mcp", call)))
        assert token
        await anyio.sleep(0.5)
        final = answer(await s.exchange("POST", "/mcp", again(call, s, token)))
        assert final["error"]["message"] == "probe failure" and "result" not in final


@pytest.mark.slow
async def test_an_unaware_client_gets_the_plain_result() -> None:
    async with wrapped() as client:
        s = await session(client, capabilities={})
        reply = await s.exchange("POST", "/mcp", s.tool_call("sleep", {"seconds": 1.0}))
        final = answer(reply)
        assert final["result"]["content"][0]["text"].startswith("slept") and "_meta" not in final["result"]


async def test_the_apps_own_resume_tokens_pass_through() -> None:
    async with wrapped(assume_client_support=True) as client:
        s = await session(client)
        first = answer(await s.exchange("POST", "/mcp", s.tool_call("pages")))
        assert first["result"]["_meta"] == {"nextResumeToken": "app-2"}
        call = s.tool_call("pages")
        call["params"]["_meta"] = {"resumeToken": "app-2"}
        second = answer(await s.exchange("POST", "/mcp", call))
        assert second["result"]["content"][0]["text"] == "page after app-2"


@pytest.mark.slow
async def test_the_client_helper_polls_a_twenty_second_stock_tool_and_returns_only_the_final_result() -> None:
    from mcp_resume_asgi.client import ResumableSession

    policy = Policy(retry_ms=50, max_wait_s=10, soft_deadline_s=1.0)
    counting = Counting(resumable(load_app(APP_FACTORIES["lowlevel"]), policy=policy, resume_tokens=True))
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with serve(counting) as info, ResumableSession(info.mcp_url) as client:
        result = await client.call_tool(
            "slow_progress", {"seconds": 20, "steps": 20}, on_progress=on_progress
        )
    assert result["content"][0]["text"] == "done 20" and "_meta" not in result
    assert seen == [float(i) for i in range(1, 21)]
    assert counting.counts["POST"] >= 15, counting.counts  # ~one re-issue per soft deadline
