"""The REST face (SEP-1597) end to end: the SEP's own client loop, with plain `httpx` and no
MCP client, against a wrapped stock `MCPServer` under uvicorn on 127.0.0.1 (issue 14's proof).

The app (`tests/apps/rest_app.py`) is unchanged MCP: it learns nothing of REST. Each test
runs against both eras the face speaks to an app: 2026-07-28 single exchanges (the stock
app as it is) and a 2025-11-25 session the face opens (the same app refusing 2026-07-28).
Its tools count their runs and cancellations in process (`RUNS`, `CANCELLED`), so a test
can tell that a retried PUT ran nothing twice and that a cancel stopped the tool.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import MemoryStore, Policy, resumable
from tests.apps.rest_app import CANCELLED, RUNS, create_app, legacy
from tests.support.proxy import CutProxy
from tests.support.server import serve_in_loop
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

POLICY = Policy(task_poll_interval_ms=100, task_ttl_s=120)
TERMINAL = ("success", "failed", "canceled")
ERA = "2026-07-28"


@pytest.fixture(autouse=True, params=["2026-07-28", "2025-11-25"])
def era(request: pytest.FixtureRequest) -> str:
    global ERA
    ERA = request.param
    return ERA


@contextlib.asynccontextmanager
async def face(
    policy: Policy = POLICY, factory: Callable[[], Any] = create_app
) -> AsyncIterator[httpx.AsyncClient]:
    inner = factory()
    app = resumable(
        inner if ERA == "2026-07-28" else legacy(inner), policy=policy, store=MemoryStore(), rest=True
    )
    async with serve_in_loop(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=20) as client:
        yield client


class Seen:
    """What the client loop saw: every state it got, the Retry-After hints, the GETs it made."""

    def __init__(self) -> None:
        self.states: list[dict[str, Any]] = []
        self.retry_after: list[str | None] = []
        self.gets = 0
        self.stale = 0


async def sep_client_loop(
    client: httpx.AsyncClient,
    tool: str,
    call_id: str,
    request: dict[str, Any],
    *,
    elicit: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    sample: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    seen: Seen | None = None,
    stale_once: bool = False,
) -> dict[str, Any]:
    """SEP-1597's "Typical MCP Client Tool Call Processing", line by line, in plain HTTP."""
    seen = seen or Seen()
    url = f"/mcp/tools/{tool}/calls/{call_id}"
    response = await client.put(url, json=request, headers={"idempotency-key": str(uuid.uuid4())})
    assert response.status_code == 201, response.text
    while True:
        assert response.status_code == 200 or response.status_code == 201, response.text
        state = response.json()
        assert response.headers["etag"] == f'"{state["etag"]}"'
        seen.states.append(state)
        seen.retry_after.append(response.headers.get("retry-after"))
        if state["status"] in TERMINAL:
            return state
        etag = state["etag"]
        if stale_once and not seen.stale:
            etag = "0" * 20  # a state the call has left: 412, then the loop GETs and goes on
        if state["status"] in ("awaitingSamplingResult", "awaitingElicitationResult"):
            answer = (
                sample(state["samplingRequest"])  # type: ignore[misc]
                if state["status"] == "awaitingSamplingResult"
                else elicit(state["elicitationRequest"])  # type: ignore[misc]
            )
            response = await client.post(f"{url}/advance", json=answer, headers={"if-match": f'"{etag}"'})
            if response.status_code == 412:
                seen.stale += 1
                response = await client.get(url)
                seen.gets += 1
        elif state["status"] in ("submitted", "running"):
            await anyio.sleep(float(response.headers["retry-after"]))
            response = await client.get(url)
            seen.gets += 1
        else:
            raise AssertionError(f"not a SEP-1597 status: {state}")


@pytest.mark.slow
async def test_a_fast_tool_answers_its_put_with_success_and_the_result() -> None:
    async with face() as client:
        seen = Seen()
        with anyio.fail_after(scaled(10)):
            done = await sep_client_loop(client, "echo", "fast-1", {"text": "hello"}, seen=seen)
    assert done["status"] == "success" and done["result"]["content"][0]["text"] == "hello"
    assert done["result"]["isError"] is False and "error" not in done and done["request"] == {"text": "hello"}
    assert (done["toolname"], done["id"]) == ("echo", "fast-1")
    assert seen.gets == 0 and seen.retry_after == [None], "no poll: the PUT had the result"


@pytest.mark.slow
async def test_a_slow_tool_is_running_with_progress_and_polled_to_its_result() -> None:
    tag = f"slow-{ERA}"
    async with face() as client:
        seen = Seen()
        with anyio.fail_after(scaled(20)):
            done = await sep_client_loop(client, "slow", "slow-1", {"steps": 12, "tag": tag}, seen=seen)
    first = seen.states[0]
    assert first["status"] == "running" and seen.retry_after[0] == "1", first
    assert first["progress"]["total"] == 12 and first["progress"]["message"].startswith("step ")
    running = [s["progress"]["progress"] for s in seen.states if s["status"] == "running"]
    assert running == sorted(running) and len(running) >= 2, seen.states
    assert done["status"] == "success" and done["result"]["content"][0]["text"] == f"done {tag}"
    assert "progress" not in done and seen.retry_after[-1] is None
    assert RUNS[tag] == 1


@pytest.mark.parametrize("stale_once", [False, True])
@pytest.mark.slow
async def test_a_tool_that_elicits_is_advanced_with_if_match_then_succeeds(stale_once: bool) -> None:
    asked: list[dict[str, Any]] = []

    def elicit(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request)
        return {"action": "accept", "content": {"confirm": True}}

    async with face() as client:
        seen = Seen()
        with anyio.fail_after(scaled(15)):
            done = await sep_client_loop(
                client,
                "confirm",
                "ask-1",
                {"filename": "a.txt"},
                elicit=elicit,
                seen=seen,
                stale_once=stale_once,
            )
    assert seen.states[0]["status"] == "awaitingElicitationResult", seen.states[0]
    assert asked[0]["message"] == "Delete a.txt?" and "confirm" in asked[0]["requestedSchema"]["properties"]
    assert done["status"] == "success" and done["result"]["content"][0]["text"] == "deleted a.txt"
    assert seen.stale == (1 if stale_once else 0) and len(asked) == 1 + seen.stale


@pytest.mark.slow
async def test_a_cancel_stops_the_tool_and_is_idempotent() -> None:
    tag = f"cancel-{ERA}"
    async with face() as client:
        url = "/mcp/tools/slow/calls/cancel-1"
        put = await client.put(url, json={"steps": 100, "tag": tag}, headers={"idempotency-key": "k-cancel"})
        assert put.status_code == 201 and put.json()["status"] == "running", put.text
        first = await client.post(f"{url}/cancel")
        assert first.status_code == 200 and first.json()["status"] == "canceled", first.text
        with anyio.fail_after(scaled(10)):
            while tag not in CANCELLED:
                await anyio.sleep(0.05)
        again = await client.post(f"{url}/cancel")
        assert again.status_code == 200 and again.json() == first.json()
        got = await client.get(url)
        assert got.json() == first.json() and "retry-after" not in got.headers
    assert RUNS[tag] == 1


@pytest.mark.slow
async def test_a_put_retried_after_its_connection_was_cut_runs_the_tool_once() -> None:
    tag = f"cut-{ERA}"
    async with face() as client:
        port = int(str(client.base_url).rsplit(":", 1)[1])
        async with (
            CutProxy(port) as proxy,
            httpx.AsyncClient(base_url=proxy.base_url, timeout=20) as cut_client,
        ):
            url = "/mcp/tools/slow/calls/cut-1"
            headers = {"idempotency-key": "the-one-key"}
            body = {"steps": 8, "tag": tag, "step_s": 0.25}

            cut: list[BaseException] = []

            async def put() -> None:
                try:
                    await cut_client.put(url, json=body, headers=headers)
                except httpx.TransportError as exc:
                    cut.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(put)
                with anyio.fail_after(scaled(10)):
                    while RUNS[tag] == 0:  # the tool runs: the PUT has not been answered yet
                        await anyio.sleep(0.01)
                assert await proxy.cut_all() >= 1
            assert cut, "the PUT's connection was cut before its answer"
            retried = await client.put(url, json=body, headers=headers)
            assert retried.status_code == 200, retried.text
            assert retried.json()["status"] in ("running", "success")
            with anyio.fail_after(scaled(10)):
                while (state := (await client.get(url)).json())["status"] == "running":
                    await anyio.sleep(0.1)
        assert state["status"] == "success" and state["result"]["content"][0]["text"] == f"done {tag}"
    assert RUNS[tag] == 1, "the retried PUT ran nothing: one run, not two"


@pytest.mark.slow
async def test_http_semantics_304_409_412_428_400_404() -> None:
    async with face() as client:
        url = "/mcp/tools/echo/calls/http-1"
        created = await client.put(url, json={"text": "x"}, headers={"idempotency-key": "key-a"})
        assert created.status_code == 201 and created.json()["status"] == "success"
        etag = created.headers["etag"]
        # GET with If-None-Match: 304, no body; with another tag: 200.
        not_modified = await client.get(url, headers={"if-none-match": etag})
        assert (
            not_modified.status_code == 304
            and not_modified.content == b""
            and not_modified.headers["etag"] == etag
        )
        assert (await client.get(url, headers={"if-none-match": '"other"'})).status_code == 200
        head = await client.head(url)
        assert head.status_code == 200 and head.content == b"" and head.headers["etag"] == etag
        # The same id and key: 200 with the current state; another key: 409.
        same = await client.put(url, json={"text": "x"}, headers={"idempotency-key": "key-a"})
        assert same.status_code == 200 and same.json() == created.json()
        other = await client.put(url, json={"text": "x"}, headers={"idempotency-key": "key-b"})
        assert other.status_code == 409 and other.headers["content-type"] == "application/problem+json"
        assert other.json()["status"] == 409 and other.json()["title"] == "Conflict"
        # No Idempotency-Key: 400.
        keyless = await client.put("/mcp/tools/echo/calls/http-2", json={"text": "x"})
        assert keyless.status_code == 400 and "Idempotency-Key" in keyless.json()["detail"]
        # advance: 428 without If-Match, 412 with a stale one, 409 when nothing is asked.
        ask = "/mcp/tools/confirm/calls/http-3"
        asking = await client.put(ask, json={"filename": "b.txt"}, headers={"idempotency-key": "k"})
        assert asking.json()["status"] == "awaitingElicitationResult", asking.text
        answer = {"action": "accept", "content": {"confirm": False}}
        assert (await client.post(f"{ask}/advance", json=answer)).status_code == 428
        stale = await client.post(f"{ask}/advance", json=answer, headers={"if-match": '"0000"'})
        assert stale.status_code == 412 and stale.headers["etag"] == asking.headers["etag"]
        taken = await client.post(f"{ask}/advance", json=answer, headers={"if-match": asking.headers["etag"]})
        assert taken.status_code == 200 and taken.json()["status"] == "success", taken.text
        assert taken.json()["result"]["content"][0]["text"] == "kept b.txt"
        again = await client.post(f"{ask}/advance", json=answer, headers={"if-match": asking.headers["etag"]})
        assert again.status_code == 412, "the state it answered is gone"
        done = await client.post(f"{url}/advance", json=answer, headers={"if-match": etag})
        assert done.status_code == 409
        # Unknown tool, unknown call: 404; arguments against the schema: 400 with the reasons.
        unknown = await client.put("/mcp/tools/nope/calls/c", json={}, headers={"idempotency-key": "k"})
        assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]
        assert (await client.get("/mcp/tools/echo/calls/never")).status_code == 404
        assert (await client.post("/mcp/tools/echo/calls/never/cancel")).status_code == 404
        invalid = await client.put(
            "/mcp/tools/echo/calls/bad", json={"text": 3}, headers={"idempotency-key": "k"}
        )
        assert invalid.status_code == 400 and invalid.json()["errors"] == [
            {"pointer": "#/text", "detail": "3 is not of type 'string'"}
        ]
        assert (await client.get("/mcp/tools/echo/calls/bad")).status_code == 404, (
            "a refused PUT made no call"
        )


async def test_malformed_requests_are_problems_never_500() -> None:
    async with face() as client:
        url = "/mcp/tools/echo/calls/m-1"
        key = {"idempotency-key": "k"}
        cases = [
            (await client.put(url, content=b"{not json", headers=key), 400),
            (await client.put(url, content=b"[1, 2]", headers=key), 400),
            (await client.put(url, content=b"{}", headers={**key, "content-type": "text/plain"}), 415),
            (await client.put(url, content=b"x" * (4 * 1024 * 1024 + 1), headers=key), 413),
            (
                await client.put(url, json={"text": "x"}, headers={"idempotency-key": "é".encode("latin-1")}),
                400,
            ),
            (await client.delete(url), 405),
            (await client.post("/mcp/tools"), 405),
            (await client.get("/mcp/tools/echo/calls/a%0Ab"), 400),
            (await client.get("/mcp/tools/echo/calls?limit=0"), 400),
            (await client.get("/mcp/tools/echo/calls?status=done"), 400),
            (await client.get("/mcp/tools/echo/calls?createdAfter=yesterday"), 400),
            (await client.get("/mcp/tools/echo/calls?cursor=%%%"), 400),
        ]
        for response, status in cases:
            assert response.status_code == status, (response.request.url, response.text)
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["status"] == status
        allowed = await client.delete(url)
        assert allowed.headers["allow"] == "GET, PUT"
        # The Streamable HTTP endpoint itself is untouched.
        plain = await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"},
        )
        assert plain.status_code in (200, 400)


async def test_get_tools_lists_the_apps_tools_with_an_etag() -> None:
    async with face() as client:
        listed = await client.get("/mcp/tools")
        assert listed.status_code == 200
        assert {t["name"] for t in listed.json()["tools"]} == {
            "echo",
            "fail",
            "refuse",
            "slow",
            "confirm",
            "confirm_twice",
            "regional",
        }
        again = await client.get("/mcp/tools", headers={"if-none-match": listed.headers["etag"]})
        assert again.status_code == 304


@pytest.mark.slow
async def test_a_parameter_the_tool_mirrors_in_a_header_is_sent_there() -> None:
    """`x-mcp-header` (2026-07-28): the app refuses a call without `Mcp-Param-Region`."""
    async with face() as client:
        for region in ("eu-west", "région sud"):
            done = await sep_client_loop(client, "regional", f"region-{region}", {"region": region})
            assert (
                done["status"] == "success" and done["result"]["content"][0]["text"] == f"served in {region}"
            )


@pytest.mark.slow
async def test_tool_errors_fail_with_the_result_kept() -> None:
    async with face() as client:
        failed = await sep_client_loop(client, "fail", "f-1", {})
        assert failed["status"] == "failed" and failed["error"] == {
            "message": "Error executing tool fail: the tool could not do it"
        }
        assert failed["result"]["isError"] is True
        refused = await sep_client_loop(client, "refuse", "r-1", {})
        assert (
            refused["status"] == "failed" and refused["error"]["code"] == -32042 and "result" not in refused
        )


@pytest.mark.slow
async def test_listing_filters_by_status_and_creation_and_pages() -> None:
    async with face() as client:
        for i in range(5):
            await sep_client_loop(client, "echo", f"list-{i}", {"text": str(i)})
        await sep_client_loop(client, "fail", "list-f", {})
        slow = await client.put(
            "/mcp/tools/slow/calls/list-s",
            json={"steps": 50, "tag": f"list-{ERA}"},
            headers={"idempotency-key": "k"},
        )
        assert slow.json()["status"] == "running"
        everything = (await client.get("/mcp/tools/echo/calls")).json()
        assert [c["id"] for c in everything["calls"]] == [f"list-{i}" for i in range(5)]
        assert "nextCursor" not in everything and all(c["status"] == "success" for c in everything["calls"])
        assert all(c["toolname"] == "echo" and c["createdAt"].endswith("Z") for c in everything["calls"])
        pages, cursor = [], None
        while True:
            query = "limit=2" + (f"&cursor={cursor}" if cursor else "")
            page = (await client.get(f"/mcp/tools/echo/calls?{query}")).json()
            pages.append([c["id"] for c in page["calls"]])
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert pages == [["list-0", "list-1"], ["list-2", "list-3"], ["list-4"]]
        after = everything["calls"][2]["createdAt"]
        later = (await client.get("/mcp/tools/echo/calls", params={"createdAfter": after})).json()
        assert [c["id"] for c in later["calls"]] == ["list-3", "list-4"]
        assert (await client.get("/mcp/tools/echo/calls?createdAfter=2100-01-01")).json() == {"calls": []}
        assert [
            c["id"] for c in (await client.get("/mcp/tools/fail/calls?status=failed")).json()["calls"]
        ] == ["list-f"]
        assert (await client.get("/mcp/tools/fail/calls?status=success")).json() == {"calls": []}
        running = (await client.get("/mcp/tools/slow/calls?status=running")).json()["calls"]
        assert [c["id"] for c in running] == ["list-s"]
        await client.post("/mcp/tools/slow/calls/list-s/cancel")
        assert (await client.get("/mcp/tools/slow/calls?status=canceled")).json()["calls"][0][
            "id"
        ] == "list-s"
