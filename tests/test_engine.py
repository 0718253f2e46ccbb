"""The stream engine at the protocol level: every byte a client sees, against a real app under uvicorn."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import RESUMABLE_STREAMS_EXTENSION, MemoryStore, Policy, Store, resumable
from tests.apps.probe_app import PROBE, create_app
from tests.support.raw import RawSession, Reply
from tests.support.server import serve, serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

FAST = Policy(retry_ms=20, max_wait_s=5.0)


STORE_KIND = "memory"


@pytest.fixture(autouse=True, params=["memory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Every engine test runs against both stores (issue: one parametrised suite)."""
    global STORE_KIND
    if request.param == "redis":
        require_redis()
    STORE_KIND = request.param
    return STORE_KIND


@contextlib.asynccontextmanager
async def wrapped(
    policy: Policy = FAST, *, max_bytes: int | None = None, json_response: bool = False, **options: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Store]]:
    bounds = {} if max_bytes is None else {"max_bytes": max_bytes}
    if STORE_KIND == "memory":
        store: Store = MemoryStore(**bounds)
        app = resumable(create_app(json_response=json_response), policy=policy, store=store, **options)
        async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=10) as client:
            yield client, store
        return
    from mcp_resume_asgi.store import RedisStore

    redis_store = RedisStore(redis_url(), prefix=redis_prefix("test-engine"), **bounds)
    app = resumable(
        create_app(json_response=json_response),
        policy=policy,
        store=redis_store,
        secret="engine-tests-shared-secret",
        **options,
    )
    try:
        # The Redis client belongs to one event loop: serve in the test's own loop.
        async with (
            serve_in_loop(app) as info,
            httpx.AsyncClient(base_url=info.base_url, timeout=10) as client,
        ):
            yield client, redis_store
    finally:
        await redis_store.clear()
        await redis_store.aclose()


async def session(client: httpx.AsyncClient, version: str = "2025-11-25") -> RawSession:
    s = RawSession(client, version=version)
    await s.initialize()
    assert s.session_id
    return s


def final(reply: Reply) -> Any:
    return reply.messages()[-1]


def seq_of(event_id: str) -> int:
    return int(event_id.rsplit(":", 1)[1])


@pytest.mark.slow
async def test_priming_event_ids_link_and_result() -> None:
    async with wrapped() as (client, _):
        s = await session(client)
        call = s.tool_call("progress", {"steps": 3, "seconds": 0.2}, progress=True)
        reply = await s.exchange("POST", "/mcp", call)
        assert reply.status == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        assert reply.headers["mcp-session-id"] == s.session_id
        assert reply.link is not None and reply.link.startswith("/mcp/streams/")
        priming = reply.events[0]
        assert priming.id and priming.data == "" and priming.retry == 20
        assert all(e.id for e in reply.events)
        seqs = [seq_of(e.id) for e in reply.events if e.id]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        messages = reply.messages()
        assert [m["params"]["progress"] for m in messages[:-1]] == [1, 2, 3]
        assert final(reply)["id"] == call["id"] and final(reply)["result"]["content"][0]["text"] == "done 3"


@pytest.mark.slow
async def test_resume_with_last_event_id_on_the_endpoint_replays_exactly_the_rest() -> None:
    async with wrapped() as (client, _):
        s = await session(client)
        call = s.tool_call("progress", {"steps": 10, "seconds": 1.0}, progress=True)
        first = await s.exchange("POST", "/mcp", call, stop_after=3)
        seen = [m["params"]["progress"] for m in first.messages()]
        assert seen == [1, 2, 3]
        await anyio.sleep(0.5)  # the app keeps working while nobody listens
        rest = await s.exchange("GET", "/mcp", headers=s.headers(last_event_id=first.last_id))
        assert rest.status == 200
        messages = rest.messages()
        assert [m["params"]["progress"] for m in messages[:-1]] == list(range(4, 11))
        assert final(rest)["result"]["content"][0]["text"] == "done 10"
        assert rest.events[0].data == "" and rest.events[0].id == first.last_id  # primed at the resume point


@pytest.mark.slow
async def test_a_burst_is_recorded_whole_and_in_order() -> None:
    """300 events as fast as the app can send them; with a write-behind store, in fewer writes than events."""
    async with wrapped() as (client, store):
        appends = 0
        original = store.append

        async def counting(*args: Any, **kwargs: Any) -> None:
            nonlocal appends
            appends += 1
            await original(*args, **kwargs)

        store.append = counting  # type: ignore[method-assign]
        s = await session(client)
        call = s.tool_call("burst", {"count": 300, "size": 20})
        reply = await s.exchange("POST", "/mcp", call)
        logged = [
            m["params"]["data"]["i"] for m in reply.messages() if m.get("method") == "notifications/message"
        ]
        assert logged == list(range(300))
        assert final(reply)["result"]["content"][0]["text"] == "burst 300"
        seqs = [seq_of(e.id) for e in reply.events if e.id]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        print(f"{type(store).__name__}: 301 events in {appends} writes")
        if store.write_behind:
            assert appends < 301
        # Replayed from the store: the same, in the same order.
        replay = await s.exchange("GET", "/mcp", headers=s.headers(last_event_id=reply.events[0].id))
        assert [
            m["params"]["data"]["i"] for m in replay.messages() if m.get("method") == "notifications/message"
        ] == logged


@pytest.mark.slow
async def test_resume_through_the_link_url_and_204_once_delivered() -> None:
    async with wrapped() as (client, _):
        s = await session(client)
        call = s.tool_call("progress", {"steps": 4, "seconds": 0.4}, progress=True)
        first = await s.exchange("POST", "/mcp", call, stop_after=1)
        assert first.link
        rest = await s.exchange("GET", first.link, headers=s.headers(last_event_id=first.last_id))
        assert [m.get("params", {}).get("progress") for m in rest.messages()][:3] == [2, 3, 4]
        assert final(rest)["id"] == call["id"]
        again = await s.exchange("GET", first.link, headers=s.headers(last_event_id=rest.last_id))
        assert again.status == 204
        # Without Last-Event-ID the client holds nothing of the response the Link came with
        # (bytes the server wrote may have died in the network): all of it is replayed.
        without_id = await s.exchange("GET", first.link, headers=s.headers())
        assert [m.get("params", {}).get("progress") for m in without_id.messages()][:4] == [1, 2, 3, 4]
        assert final(without_id)["id"] == call["id"]
        # The Link of a resumed answer starts where that answer started.
        assert rest.link and rest.link != first.link
        from_rest = await s.exchange("GET", rest.link, headers=s.headers())
        assert [m.get("params", {}).get("progress") for m in from_rest.messages()][:3] == [2, 3, 4]
        # A client that lost the final event can still fetch it.
        replay = await s.exchange("GET", first.link, headers=s.headers(last_event_id=first.last_id))
        assert final(replay)["id"] == call["id"]


@pytest.mark.slow
async def test_clients_before_2025_11_25_get_ids_but_no_priming_and_no_at_will_close() -> None:
    policy = FAST.replace(max_connection_s=0.05, idle_disconnect_s=0.05)
    async with wrapped(policy) as (client, _):
        s = await session(client, version="2025-06-18")
        call = s.tool_call("progress", {"steps": 4, "seconds": 0.4}, progress=True)
        reply = await s.exchange("POST", "/mcp", call)
        assert all(e.data for e in reply.events), "no empty priming event for old clients"
        assert all(e.id for e in reply.events)
        assert final(reply)["id"] == call["id"], "an old client's stream is never cut at will"
        assert b"retry:" not in reply.raw


async def test_the_sessions_version_wins_over_an_older_header() -> None:
    async with wrapped() as (client, _):
        s = await session(client, version="2025-11-25")
        s.header_version = "2025-03-26"  # what the conformance suite's raw POST sends
        reply = await s.exchange("POST", "/mcp", s.tool_call("echo", {"text": "hi"}))
        assert reply.events[0].data == "" and reply.events[0].id


@pytest.mark.slow
async def test_at_will_disconnects_send_retry_first_and_the_result_still_arrives() -> None:
    policy = FAST.replace(max_connection_s=0.15)
    async with wrapped(policy) as (client, _):
        s = await session(client)
        # 2 s of progress over connections closed 0.15 s after they attach: about 13 of them
        # on a quiet machine, at least 4 however slowly the client comes back.
        call = s.tool_call("progress", {"steps": 10, "seconds": 2.0}, progress=True)
        reply = await s.exchange("POST", "/mcp", call)
        assert reply.closed_by_server
        assert reply.raw.endswith(b"retry: 20\n\n"), reply.raw[-60:]
        progress = [m["params"]["progress"] for m in reply.messages() if "params" in m]
        last = reply.last_id
        connections = 1
        while True:
            more = await s.exchange("GET", "/mcp", headers=s.headers(last_event_id=last))
            connections += 1
            progress += [m["params"]["progress"] for m in more.messages() if "params" in m]
            last = more.last_id or last
            if more.messages() and "result" in more.messages()[-1]:
                break
            assert connections < 50
        assert progress == list(range(1, 11))
        assert connections >= 4


@pytest.mark.slow
async def test_idle_disconnect() -> None:
    async with wrapped(FAST.replace(idle_disconnect_s=0.2)) as (client, _):
        s = await session(client)
        reply = await s.exchange("POST", "/mcp", s.tool_call("sleep", {"seconds": 5}))
        assert reply.closed_by_server
        assert not [m for m in reply.messages() if "result" in m], "closed while idle, before the result"
        assert reply.raw.endswith(b"retry: 20\n\n")


async def test_multi_turn_through_the_link_url() -> None:
    async with wrapped() as (client, _):
        s = await session(client)
        call = s.tool_call("ask")
        first = await s.exchange("POST", "/mcp", call)
        assert first.closed_by_server  # the server waits for input by disconnecting
        elicit = first.messages()[-1]
        assert elicit["method"] == "elicitation/create"
        waiting = await s.exchange("GET", first.link, headers=s.headers(last_event_id=first.last_id))
        assert waiting.status == 204
        answer = {
            "jsonrpc": "2.0",
            "id": elicit["id"],
            "result": {"action": "accept", "content": {"name": "bob"}},
        }
        second = await s.exchange(
            "POST", first.link, [answer], headers=s.headers(last_event_id=first.last_id)
        )
        assert second.status == 200 and second.link and second.link != first.link
        assert final(second)["result"]["content"][0]["text"] == "hello bob"
        # Posting the same answers again does not deliver them twice.
        again = await s.exchange(
            "POST", second.link, [answer], headers=s.headers(last_event_id=second.last_id)
        )
        assert again.status == 204


async def test_stock_style_answer_on_the_endpoint_still_works() -> None:
    async with wrapped() as (client, _):
        s = await session(client)
        call = s.tool_call("ask")
        first = await s.exchange("POST", "/mcp", call)
        elicit = first.messages()[-1]
        answer = {
            "jsonrpc": "2.0",
            "id": elicit["id"],
            "result": {"action": "accept", "content": {"name": "eve"}},
        }
        posted = await client.post("/mcp", json=answer, headers=s.headers())
        assert posted.status_code == 202
        rest = await s.exchange("GET", "/mcp", headers=s.headers(last_event_id=first.last_id))
        assert final(rest)["result"]["content"][0]["text"] == "hello eve"


@pytest.mark.slow
async def test_hostile_resume_inputs_get_clear_4xx_and_never_foreign_events() -> None:
    async with wrapped() as (client, _):
        alice = await session(client)
        mallory = await session(client)
        first = await alice.exchange(
            "POST",
            "/mcp",
            alice.tool_call("progress", {"steps": 3, "seconds": 0.3}, progress=True),
            stop_after=1,
        )
        assert first.last_id and first.link
        cases = [
            ("GET", "/mcp", mallory.headers(last_event_id=first.last_id), 404),  # another session's id
            ("GET", first.link, mallory.headers(last_event_id=first.last_id), 404),  # another session's link
            ("GET", first.link, mallory.headers(), 404),
            ("GET", "/mcp", alice.headers(last_event_id="garbage"), 400),
            ("GET", "/mcp", alice.headers(last_event_id=first.last_id.replace(".", ".x", 1)), 400),  # forged
            ("GET", "/mcp", alice.headers(last_event_id="x" * 10_000), 400),
            ("GET", "/mcp/streams/not-a-token", alice.headers(), 404),
            ("GET", first.link + "x", alice.headers(), 404),
            ("DELETE", first.link, alice.headers(), 405),
            ("POST", first.link, alice.headers(), 400),
        ]
        for method, url, headers, status in cases:
            response = await client.request(
                method, url, headers=headers, content=b"{}" if method == "POST" else None
            )
            assert response.status_code == status, (method, url, response.status_code, response.text)
            assert alice.session_id not in response.text
        # A seq past the stream's end (the store lost events, or the client made it up): one
        # error event saying the events are lost, for alice's own stream only.
        ahead = await client.get("/mcp", headers=alice.headers(last_event_id=first.last_id[:-1] + "9999999"))
        assert ahead.status_code == 200, ahead.text
        assert "lost events" in ahead.text and '"error"' in ahead.text, ahead.text
        assert ahead.headers["content-type"].startswith("text/event-stream")
        bad_bodies = [b"not json", b"[]", b'[{"jsonrpc":"2.0","id":1}]', b'{"a":1}', b"[" * 100_000]
        for body in bad_bodies:
            response = await client.post(first.link, content=body, headers=alice.headers())
            assert response.status_code == 400, (body[:20], response.text)
        stray = [{"jsonrpc": "2.0", "id": 999, "result": {}}]
        response = await client.post(first.link, json=stray, headers=alice.headers())
        assert response.status_code == 400
        huge = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"x":"' + b"a" * 5_000_000 + b'"}}'
        response = await client.post("/mcp", content=huge, headers=alice.headers())
        assert response.status_code == 413 and response.json()["error"]["code"] == -32600


@pytest.mark.slow
async def test_malformed_json_reaches_the_app_as_it_would_unwrapped() -> None:
    async with wrapped() as (client, _):
        s = await session(client)
        wrapped_reply = await client.post("/mcp", content=b"{nope", headers=s.headers())
    async with serve(create_app()) as info, httpx.AsyncClient(base_url=info.base_url) as bare:
        b = RawSession(bare)
        await b.initialize()
        bare_reply = await bare.post("/mcp", content=b"{nope", headers=b.headers())
    assert wrapped_reply.status_code == bare_reply.status_code == 400
    assert wrapped_reply.json()["error"]["code"] == bare_reply.json()["error"]["code"]


@pytest.mark.slow
async def test_non_mcp_traffic_passes_through() -> None:
    async with wrapped() as (client, _):
        assert (await client.get("/elsewhere")).status_code == 404
        s = await session(client)
        plain = await client.get(
            "/mcp", headers={"accept": "application/json", "mcp-session-id": s.session_id or ""}
        )
        async with serve(create_app()) as info, httpx.AsyncClient(base_url=info.base_url) as bare:
            b = RawSession(bare)
            await b.initialize()
            bare_plain = await bare.get(
                "/mcp", headers={"accept": "application/json", "mcp-session-id": b.session_id or ""}
            )
        assert plain.status_code == bare_plain.status_code


@pytest.mark.slow
async def test_standalone_stream_is_resumable_and_a_second_get_is_not_409() -> None:
    async with wrapped() as (client, _):
        s = await session(client)
        async with s.open("GET", "/mcp", headers=s.headers()) as (response, reader):
            assert response.status_code == 200
            events = reader.__aiter__()
            priming = await events.__anext__()
            assert priming.data == "" and priming.id
            # A second GET without Last-Event-ID takes over instead of the app's 409.
            second = await s.exchange("GET", "/mcp", headers=s.headers(), stop_after=0, timeout=2)
            assert second.status == 200
        await anyio.sleep(0.1)
        assert second.last_id
        resumed = await s.exchange(
            "GET", "/mcp", headers=s.headers(last_event_id=second.last_id), stop_after=0, timeout=2
        )
        assert resumed.status == 200 and resumed.events[0].id == second.last_id
        # A seq past its end (the store lost events it had sent): 410, its client starts over.
        ahead = second.last_id.rpartition(":")[0] + ":9999999"
        lost = await s.exchange(
            "GET", "/mcp", headers=s.headers(last_event_id=ahead), stop_after=0, timeout=2
        )
        assert lost.status == 410


@pytest.mark.slow
async def test_delete_frees_the_sessions_streams() -> None:
    async with wrapped(FAST.replace(max_connection_s=0.1)) as (client, store):
        s = await session(client)
        first = await s.exchange("POST", "/mcp", s.tool_call("sleep", {"seconds": 3}))
        assert (await store.usage()).streams >= 1
        deleted = await client.delete("/mcp", headers=s.headers())
        assert deleted.status_code in (200, 204)
        gone = await client.get(first.link or "", headers=s.headers())
        assert gone.status_code == 404


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18"])
@pytest.mark.slow
async def test_expiry_cancels_the_apps_work_with_notifications_cancelled(version: str) -> None:
    PROBE.clear()
    async with wrapped(FAST.replace(max_wait_s=0.3)) as (client, store):
        s = await session(client, version=version)
        tag = f"expire-{version}"
        async with s.open("POST", "/mcp", s.tool_call("sleep", {"seconds": 30, "tag": tag})) as (response, _):
            assert response.status_code == 200  # headers only: then the client drops
            first = Reply(response.status_code, response.headers)
        with anyio.move_on_after(scaled(8)):
            while tag not in PROBE.cancelled:
                await anyio.sleep(0.05)
        assert tag in PROBE.cancelled, PROBE
        assert tag not in PROBE.finished
        assert first.link
        with anyio.fail_after(scaled(3)):
            while (await client.get(first.link, headers=s.headers())).status_code != 404:
                await anyio.sleep(0.05)
        assert (
            await store.usage()
        ).streams == 1  # only the finished initialize stream, kept for late readers


@pytest.mark.slow
async def test_expiry_of_an_opted_in_2026_request_disconnects_the_app() -> None:
    """A 2026-07-28 client that asked for resumable streams gets the resume window; past it,
    the app is told `http.disconnect` (no `notifications/cancelled`: that revision has none)."""
    PROBE.clear()
    async with wrapped(FAST.replace(max_wait_s=0.3)) as (client, store):
        s = RawSession(client, version="2026-07-28")
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {RESUMABLE_STREAMS_EXTENSION: {}}},
            "progressToken": "t1",
        }
        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "progress", "arguments": {"steps": 50, "seconds": 30}, "_meta": meta},
        }
        headers = s.headers(mcp_method="tools/call", mcp_name="progress")
        first = await s.exchange("POST", "/mcp", body, headers=headers, stop_after=1, timeout=5)
        assert first.status == 200, first.raw
        assert first.link and first.events[0].data == ""
        with anyio.fail_after(scaled(8)):
            while (await store.usage()).streams:
                await anyio.sleep(0.05)


async def until_finished(tag: str) -> None:
    """Until the probe app's tool `tag` returned (and a moment for the store's writes)."""
    with anyio.fail_after(scaled(10)):
        while tag not in PROBE.finished:
            await anyio.sleep(0.02)
    await anyio.sleep(0.2)


@pytest.mark.slow
async def test_per_stream_caps_drop_old_events_and_a_resume_into_the_gap_is_an_error() -> None:
    async with wrapped(FAST.replace(max_events_per_stream=5)) as (client, store):
        s = await session(client)
        tag = f"capped-{uuid.uuid4().hex[:8]}"
        call = s.tool_call("burst", {"count": 50, "size": 10, "delay": 0.002, "tag": tag})
        first = await s.exchange("POST", "/mcp", call, stop_after=1)
        await until_finished(tag)
        assert (await store.usage()).bytes < 5 * 400
        rest = await s.exchange("GET", "/mcp", headers=s.headers(last_event_id=first.last_id))
        error = rest.messages()[-1]
        assert error["id"] == call["id"] and error["error"]["code"] == -32000
        assert "dropped" in error["error"]["message"]


@pytest.mark.slow
async def test_the_global_byte_budget_holds_across_streams() -> None:
    tag = f"budget-{uuid.uuid4().hex[:8]}"
    async with wrapped(FAST, max_bytes=20_000) as (client, store):
        s = await session(client)
        for i in range(4):
            await s.exchange(
                "POST",
                "/mcp",
                s.tool_call("burst", {"count": 40, "size": 300, "tag": f"{tag}-{i}"}),
                stop_after=0,
                timeout=2,
            )
        for i in range(4):
            await until_finished(f"{tag}-{i}")
        assert 0 < (await store.usage()).bytes <= 20_000


@pytest.mark.slow
async def test_json_responses_pass_through_unchanged() -> None:
    async with wrapped(json_response=True) as (client, _):
        s = await session(client)
        wrapped_reply = await client.post(
            "/mcp", json=s.tool_call("echo", {"text": "hi"}), headers=s.headers()
        )
    async with (
        serve(create_app(json_response=True)) as info,
        httpx.AsyncClient(base_url=info.base_url) as bare,
    ):
        b = RawSession(bare)
        await b.initialize()
        bare_reply = await bare.post("/mcp", json=b.tool_call("echo", {"text": "hi"}), headers=b.headers())
    assert wrapped_reply.status_code == bare_reply.status_code == 200
    assert wrapped_reply.headers["content-type"] == bare_reply.headers["content-type"]
    assert "link" not in wrapped_reply.headers
    assert wrapped_reply.json()["result"] == bare_reply.json()["result"]


@pytest.mark.slow
async def test_a_slow_json_answer_is_upgraded_to_a_resumable_stream() -> None:
    async with wrapped(FAST.replace(upgrade_json_after_s=0.1), json_response=True) as (client, _):
        s = await session(client)
        call = s.tool_call("sleep", {"seconds": 0.6})
        first = await s.exchange("POST", "/mcp", call, stop_after=0, timeout=2)
        assert first.headers["content-type"].startswith("text/event-stream") and first.link
        assert first.events[0].data == ""
        rest = await s.exchange("GET", first.link, headers=s.headers(last_event_id=first.last_id))
        assert final(rest)["result"]["content"][0]["text"].startswith("slept")
        quick = await client.post("/mcp", json=s.tool_call("echo", {"text": "q"}), headers=s.headers())
        assert quick.headers["content-type"].startswith("application/json")


async def test_policy_routes_pick_per_tool() -> None:
    routes = {"tool:progress": FAST.replace(retry_ms=777)}
    async with wrapped(FAST, routes=routes) as (client, _):
        s = await session(client)
        slow = await s.exchange("POST", "/mcp", s.tool_call("progress", {"steps": 1, "seconds": 0.01}))
        quick = await s.exchange("POST", "/mcp", s.tool_call("echo", {"text": "x"}))
        assert slow.events[0].retry == 777 and quick.events[0].retry == 20


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        Policy(max_wait_s=0)
    with pytest.raises(ValueError):
        Policy(retry_ms=-1)
    with pytest.raises(TypeError):
        Policy(max_connection_s="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        resumable(create_app(), routes={"bogus:x": Policy()})
    assert json.dumps(Policy().replace(retry_ms=5).retry_ms) == "5"


async def test_a_resume_after_the_final_response_is_told_the_stream_is_over() -> None:
    async with wrapped() as (client, _):
        s = await session(client)
        reply = await s.exchange("POST", "/mcp", s.tool_call("nope"))
        assert "error" in final(reply) or final(reply)["result"].get("isError")
        again = await s.exchange("GET", "/mcp", headers=s.headers(last_event_id=reply.last_id))
        assert again.status == 204


async def _post_and_vanish(port: int, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
    """Send a POST and close the socket before reading a byte of the answer."""
    payload = json.dumps(body).encode()
    lines = [f"POST {path} HTTP/1.1", f"host: 127.0.0.1:{port}", f"content-length: {len(payload)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode() + payload
    async with await anyio.connect_tcp("127.0.0.1", port) as sock:
        await sock.send(raw)


@pytest.mark.slow
async def test_a_retried_post_with_the_same_idempotency_key_attaches_instead_of_running_twice() -> None:
    PROBE.clear()
    async with wrapped() as (client, _):
        s = await session(client)
        port = int(str(client.base_url).rsplit(":", 1)[1].strip("/"))
        call = s.tool_call("sleep", {"seconds": 0.5, "tag": "idem"})
        headers = s.headers(idempotency_key="k-123")
        await _post_and_vanish(port, "/mcp", headers, call)  # lost before any header came back
        await anyio.sleep(0.1)
        retry = await s.exchange("POST", "/mcp", call, headers=headers)
        assert retry.status == 200 and retry.link
        assert (
            final(retry)["id"] == call["id"] and final(retry)["result"]["content"][0]["text"] == "slept idem"
        )
        assert PROBE.started.count("idem") == 1, "the tool ran once"
        other = dict(call, params={"name": "sleep", "arguments": {"seconds": 0.1, "tag": "other"}})
        conflict = await client.post("/mcp", json=other, headers=headers)
        assert conflict.status_code == 422
        bad = await client.post("/mcp", json=call, headers=s.headers(idempotency_key="x" * 300))
        assert bad.status_code == 400
        # Another session cannot use the key to reach this session's request.
        mallory = await session(client)
        theirs = await mallory.exchange(
            "POST", "/mcp", call, headers=mallory.headers(idempotency_key="k-123")
        )
        alice_stream = (retry.last_id or "").rsplit(":", 1)[0]
        assert theirs.last_id and not theirs.last_id.startswith(alice_stream)
        assert PROBE.started.count("idem") == 2, "mallory's request ran as her own"


async def test_an_idempotent_request_to_a_json_app_is_answered_as_a_resumable_stream() -> None:
    async with wrapped(json_response=True) as (client, _):
        s = await session(client)
        reply = await s.exchange(
            "POST", "/mcp", s.tool_call("echo", {"text": "j"}), headers=s.headers(idempotency_key="j1")
        )
        assert reply.headers["content-type"].startswith("text/event-stream") and reply.link
        assert final(reply)["result"]["content"][0]["text"] == "j"
