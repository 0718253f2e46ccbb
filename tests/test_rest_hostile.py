"""The REST face against hostile input (issue 20, items 4, 5, 7, 8): never a 5xx, nothing left.

A stock `MCPServer` (`tests/apps/rest_app.py`) wrapped with `rest=True` under uvicorn, on the
memory store and on Redis (a prefix of the test's own), with the caller anonymous or named by
an ASGI auth layer *outside* the wrapper (`scope["user"]`). Text with no UTF-8 form (a lone
surrogate, as a JSON escape `"\\ud800"` or as its raw bytes), JSON's non-standard constants
(`NaN`, `Infinity`) and a body too large once wrapped as an MCP request are refused with a
problem+json 4xx *before* anything is written or claimed: a refused PUT leaves no record (its
retry with the same key creates the call), a refused advance no claim (the valid advance of
the same state is taken), a refused mirrored-header call is not listed. Then a sweep of every
route with hostile query parameters, path segments, headers and bodies: no 5xx, nothing left.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_resume_asgi import MemoryStore, Policy, resumable
from mcp_resume_asgi.rest.calls import call_key, index_member, index_name
from mcp_resume_asgi.store.base import Store
from tests.apps.rest_app import create_app, legacy
from tests.support.rest_calls import settled
from tests.support.server import serve_in_loop
from tests.support.stores import redis_prefix, redis_url, require_redis
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

PROBLEM = "application/problem+json"
POLICY = Policy(task_poll_interval_ms=100, task_ttl_s=120)
MIB = 1024 * 1024
SECRET = "test-rest-hostile-secret"
#: A lone surrogate as JSON writes it (an escape), and as raw bytes (not UTF-8).
ESCAPED = b'"\\ud800"'
RAW = b'"\xed\xa0\x80"'


class User:
    """What an ASGI auth layer puts in `scope["user"]` (Starlette's `SimpleUser` shape)."""

    is_authenticated = True

    def __init__(self, identity: str) -> None:
        self.identity = identity


class OuterAuth:
    """Auth *outside* the wrapper: names the caller from `x-user`, anonymous without it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            user = dict(scope["headers"]).get(b"x-user")
            if user is not None:
                scope = {**scope, "user": User(user.decode("latin-1"))}
        await self.app(scope, receive, send)


@dataclass
class Face:
    client: httpx.AsyncClient
    store: Store
    headers: dict[str, str]
    principal: str | None

    async def put(self, tool: str, call_id: str, body: bytes, key: str = "k-1") -> httpx.Response:
        return await self.client.put(
            f"/mcp/tools/{tool}/calls/{call_id}",
            content=body,
            headers={**self.headers, "content-type": "application/json", "idempotency-key": key},
        )

    async def nothing_of(self, tool: str, call_id: str) -> None:
        """No record of the call, not in the caller's index, a 404, and not listed."""
        assert await self.store.get_key(call_key(self.principal, tool, call_id)) is None
        members = await self.store.index_page(index_name(self.principal, tool), after=None, limit=1000)
        assert index_member(call_id) not in [member for member, _ in members]
        got = await self.client.get(f"/mcp/tools/{tool}/calls/{call_id}", headers=self.headers)
        assert got.status_code == 404, got.text
        listed = await self.client.get(f"/mcp/tools/{tool}/calls", headers=self.headers)
        assert listed.status_code == 200, listed.text
        assert call_id not in [call["id"] for call in listed.json()["calls"]]


@pytest.fixture(params=["memory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        require_redis()
    return str(request.param)


@pytest.fixture(params=["anonymous", "outer-auth"])
def auth(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextlib.asynccontextmanager
async def make_store(kind: str) -> AsyncIterator[Store]:
    if kind == "memory":
        yield MemoryStore()
        return
    from mcp_resume_asgi.store.redis import RedisStore

    prefix = redis_prefix("test-rest-hostile")
    store = RedisStore(redis_url(), prefix=prefix)
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            await store.aclose()  # (the suite's Redis goes with the run; a REDIS_URL is cleaned by prefix)


@contextlib.asynccontextmanager
async def face(
    store_kind: str, auth: str = "anonymous", *, inner: ASGIApp | None = None, **rest: Any
) -> AsyncIterator[Face]:
    async with make_store(store_kind) as store:
        app: ASGIApp = resumable(
            inner or create_app(), policy=POLICY, store=store, secret=SECRET, rest=rest or True
        )
        headers, principal = {}, None
        if auth == "outer-auth":
            app = OuterAuth(app)
            headers, principal = {"x-user": "alice"}, "alice"
        async with (
            serve_in_loop(app) as info,
            httpx.AsyncClient(base_url=info.base_url, timeout=30) as client,
        ):
            yield Face(client, store, headers, principal)


def strict_json(content: bytes) -> Any:
    """`content` read as RFC 8259 JSON (no `NaN`, no `Infinity`), else an assertion error."""

    def no_constant(name: str) -> Any:
        raise AssertionError(f"the answer holds {name}, which is not JSON: {content[:300]!r}")

    return json.loads(content.decode("utf-8"), parse_constant=no_constant)


def refused(response: httpx.Response, status: int = 400) -> None:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"] == PROBLEM
    assert strict_json(response.content)["status"] == status


# ---------------------------------------------------------------------------------------------
# Item 4: a lone surrogate is a 400 before anything is written or claimed


@pytest.mark.parametrize(
    ("tool", "body"),
    [
        ("echo", b'{"text":' + ESCAPED + b"}"),
        ("echo", b'{"text":' + RAW + b"}"),
        ("echo", b'{"text":"ok","more":{"deep":[' + ESCAPED + b"]}}"),
        ("echo", b'{"text":"ok",' + ESCAPED + b":1}"),  # in a member's name
        ("regional", b'{"region":' + ESCAPED + b"}"),  # mirrored into Mcp-Param-Region
    ],
    ids=["value", "raw-bytes", "nested", "member-name", "mirrored-header"],
)
async def test_a_put_with_a_lone_surrogate_is_400_and_leaves_no_record(
    store_kind: str, auth: str, tool: str, body: bytes
) -> None:
    async with face(store_kind, auth) as f:
        refused(await f.put(tool, "s-1", body))
        await f.nothing_of(tool, "s-1")
        # The same call id and key, with a body that is text: the call is created now.
        good = b'{"text":"fine"}' if tool == "echo" else b'{"region":"eu"}'
        created = await f.put(tool, "s-1", good)
        assert created.status_code == 201, created.text
        again = await f.client.get(f"/mcp/tools/{tool}/calls/s-1", headers=f.headers)
        assert again.status_code == 200 and again.json()["status"] == "success", again.text


async def test_an_advance_with_a_lone_surrogate_is_400_and_keeps_no_claim(store_kind: str, auth: str) -> None:
    async with face(store_kind, auth) as f:
        put = await f.put("confirm", "a-1", b'{"filename":"a.txt"}')
        assert put.status_code == 201, put.text
        state = put.json()
        assert state["status"] == "awaitingElicitationResult", state
        url = "/mcp/tools/confirm/calls/a-1/advance"
        if_match = {**f.headers, "if-match": f'"{state["etag"]}"', "content-type": "application/json"}
        for body in (
            b'{"action":"accept","content":{"confirm":' + ESCAPED + b"}}",
            b'{"action":' + RAW + b"}",
            b'{"action":"accept","content":{"confirm":NaN}}',
        ):
            refused(await f.client.post(url, content=body, headers=if_match))
        got = await f.client.get("/mcp/tools/confirm/calls/a-1", headers=f.headers)
        assert got.json()["etag"] == state["etag"], "the refused advances changed nothing"
        answer = b'{"action":"accept","content":{"confirm":true}}'
        taken = await f.client.post(url, content=answer, headers=if_match)
        assert taken.status_code == 200, taken.text
        with anyio.fail_after(scaled(10)):
            while (done := taken.json())["status"] not in ("success", "failed", "canceled"):
                await anyio.sleep(0.1)
                taken = await f.client.get("/mcp/tools/confirm/calls/a-1", headers=f.headers)
        assert done["status"] == "success" and done["result"]["content"][0]["text"] == "deleted a.txt"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/mcp/prompts/greet", b'{"name":' + ESCAPED + b"}"),
        ("/mcp/prompts/greet", b'{"name":' + RAW + b"}"),
        ("/mcp/prompts/greet", b'{"name":"x","n":NaN}'),
        (
            "/mcp/complete",
            b'{"ref":{"type":"ref/prompt","name":"greet"},"argument":{"name":"name","value":'
            + ESCAPED
            + b"}}",
        ),
        (
            "/mcp/complete",
            b'{"ref":{"type":"ref/prompt","name":"g"},"argument":{"name":"n","value":Infinity}}',
        ),
    ],
    ids=["prompt-escaped", "prompt-raw", "prompt-nan", "complete-escaped", "complete-infinity"],
)
async def test_a_read_route_body_with_unencodable_text_or_nan_is_400(
    store_kind: str, path: str, body: bytes
) -> None:
    async with face(store_kind) as f:
        refused(await f.client.post(path, content=body, headers={"content-type": "application/json"}))


# ---------------------------------------------------------------------------------------------
# Item 5: the listing's query is validated strictly


def cursor_of(value: bytes) -> str:
    return base64.urlsafe_b64encode(value).decode().rstrip("=")


@pytest.mark.parametrize(
    "query",
    [
        "cursor=" + cursor_of(b'[1,"\\ud800"]'),
        "cursor=" + cursor_of(b'[1,"\xed\xa0\x80"]'),
        "cursor=" + cursor_of(b'[1e999,"' + b"a" * 32 + b'"]'),
        "cursor=" + cursor_of(b'[NaN,"' + b"a" * 32 + b'"]'),
        "cursor=" + cursor_of(b'[1,"not-a-digest"]'),
        "limit=%C2%B2",
        "limit=%D9%A1",  # an Arabic-Indic digit one
        "limit=%EF%BC%91",  # a full-width digit one
        "limit=+1",
        "limit=1.0",
        "limit=0",
        "limit=1001",
        "limit=" + "9" * 5000,
        "limit=",
    ],
)
async def test_a_listing_query_that_is_not_one_the_face_gives_is_400(store_kind: str, query: str) -> None:
    async with face(store_kind) as f:
        refused(await f.client.get(f"/mcp/tools/echo/calls?{query}"))


# ---------------------------------------------------------------------------------------------
# Item 7: JSON's non-standard constants are refused, and never sent


@pytest.mark.parametrize(
    "value", [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e400"], ids=lambda v: v.decode()
)
async def test_a_put_with_a_non_standard_number_is_400_and_leaves_no_record(
    store_kind: str, value: bytes
) -> None:
    async with face(store_kind) as f:
        response = await f.put("echo", "n-1", b'{"text":"x","extra":' + value + b"}")
        refused(response)
        strict_json(response.content)
        await f.nothing_of("echo", "n-1")


# ---------------------------------------------------------------------------------------------
# Item 8: a body too large for the app once wrapped is 413, and the app's own 413 stays 413


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
async def test_a_put_too_large_once_wrapped_is_413_and_leaves_no_record(store_kind: str, era: str) -> None:
    inner = create_app() if era == "2026-07-28" else legacy(create_app())
    async with face(store_kind, inner=inner) as f:
        body = json.dumps({"text": "a" * (4 * MIB - 64)}).encode()
        assert len(body) < 4 * MIB
        response = await f.put("echo", "big-1", body)
        refused(response, 413)
        await f.nothing_of("echo", "big-1")
        # An advance too large once wrapped is a 413 too, and takes no claim.
        asked = await f.put("confirm", "big-2", b'{"filename":"a.txt"}')
        assert asked.status_code == 201, asked.text
        asked = await settled(f.client, asked, "/mcp/tools/confirm/calls/big-2", f.headers)
        assert asked.json()["status"] == "awaitingElicitationResult", asked.text
        url = "/mcp/tools/confirm/calls/big-2/advance"
        etag = {"if-match": asked.headers["etag"], "content-type": "application/json"}
        answer = {"action": "accept", "content": {"confirm": True, "pad": "a" * (4 * MIB - 128)}}
        refused(await f.client.post(url, content=json.dumps(answer).encode(), headers=etag), 413)
        taken = await f.client.post(
            url, json={"action": "accept", "content": {"confirm": True}}, headers=etag
        )
        assert taken.status_code == 200, taken.text
        created = await f.put("echo", "big-1", b'{"text":"small"}')
        assert created.status_code == 201, created.text


class SmallBodies:
    """An app behind a proxy that takes bodies up to `limit` bytes (413 past it)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            chunks, more = [], True
            while more:
                message = await receive()
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
            body = b"".join(chunks)
            if len(body) > self.limit:
                await send({"type": "http.response.start", "status": 413, "headers": []})
                await send({"type": "http.response.body", "body": b"Request body too large"})
                return
            sent = False

            async def replay() -> Any:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)


async def test_the_apps_own_413_is_a_413(store_kind: str) -> None:
    async with face(store_kind, inner=SmallBodies(create_app(), 8 * 1024)) as f:
        assert (await f.put("echo", "small-1", b'{"text":"fits"}')).status_code == 201
        response = await f.put("echo", "big-2", json.dumps({"text": "a" * 16 * 1024}).encode())
        refused(response, 413)
        await f.nothing_of("echo", "big-2")


# ---------------------------------------------------------------------------------------------
# The sweep: every route, with hostile query parameters, path segments, headers and bodies


@dataclass(frozen=True)
class Hostile:
    """One request, as raw bytes on the wire (what `httpx` would refuse to send is sent)."""

    name: str
    method: str
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body: bytes = b""
    host: bytes | None = None
    """The `Host` header (None: the server's own address)."""


JSON_TYPE = (b"content-type", b"application/json")
KEY = (b"idempotency-key", b"k-sweep")
CALL = b"/mcp/tools/echo/calls/sweep-1"
CONFIRM = b"/mcp/tools/confirm/calls/sweep-2"
BAD_BODIES: list[tuple[str, bytes]] = [
    ("escaped-surrogate", b'{"text":' + ESCAPED + b"}"),
    ("low-surrogate", b'{"text":"\\udc00"}'),
    ("raw-surrogate", b'{"text":' + RAW + b"}"),
    ("surrogate-name", b"{" + ESCAPED + b':"x"}'),
    ("nan", b'{"text":NaN}'),
    ("infinity", b'{"text":"x","n":Infinity}'),
    ("overflow", b'{"text":"x","n":-1e999}'),
    ("latin-1", b'{"text":"\xe9"}'),
    ("utf-16", '{"text":"x"}'.encode("utf-16")),
    ("bom", b'\xef\xbb\xbf{"text":"x"}'),
    ("deep", b'{"text":"x","d":' + b"[" * 200 + b"]" * 200 + b"}"),
    ("very-deep", b"[" * 100_000),
    ("huge-int", b'{"text":"x","n":' + b"9" * 5000 + b"}"),
    ("array", b"[]"),
    ("string", b'"x"'),
    ("null", b"null"),
    ("empty", b""),
    ("truncated", b'{"text":'),
    ("nul", b'{"text":"x"}\x00'),
]


def sweep() -> list[Hostile]:
    cases: list[Hostile] = []
    for name, body in BAD_BODIES:
        cases += [
            Hostile(f"put-{name}", "PUT", CALL, (JSON_TYPE, KEY), body),
            Hostile(f"advance-{name}", "POST", CONFIRM + b"/advance", (JSON_TYPE, (b"if-match", b"*")), body),
            Hostile(f"prompt-{name}", "POST", b"/mcp/prompts/greet", (JSON_TYPE,), body),
            Hostile(f"complete-{name}", "POST", b"/mcp/complete", (JSON_TYPE,), body),
        ]
    segments = [
        b"%ED%A0%80",  # an encoded surrogate
        b"%ED%B0%80",
        b"%C0%80",  # an overlong NUL
        b"%FF",
        b"%00",
        b"%E2%80%8B",  # a zero-width space
        b"%",
        b"%G0",
        b"\xff",  # a raw byte, not encoded
        b"a" * 5000,
    ]
    for i, segment in enumerate(segments):
        cases += [
            Hostile(
                f"tool-segment-{i}", "PUT", b"/mcp/tools/" + segment + b"/calls/x", (JSON_TYPE, KEY), b"{}"
            ),
            Hostile(f"id-segment-{i}", "PUT", b"/mcp/tools/echo/calls/" + segment, (JSON_TYPE, KEY), b"{}"),
            Hostile(f"get-segment-{i}", "GET", b"/mcp/tools/echo/calls/" + segment),
            Hostile(f"cancel-segment-{i}", "POST", b"/mcp/tools/" + segment + b"/calls/x/cancel"),
            Hostile(f"list-segment-{i}", "GET", b"/mcp/tools/" + segment + b"/calls"),
            Hostile(f"prompt-segment-{i}", "POST", b"/mcp/prompts/" + segment, (JSON_TYPE,), b"{}"),
            Hostile(f"resource-segment-{i}", "GET", b"/mcp/resources/" + segment),
        ]
    queries = [
        b"cursor=" + cursor_of(b'[1,"\\ud800"]').encode(),
        b"cursor=" + cursor_of(b'[1,"\xed\xa0\x80"]').encode(),
        b"cursor=" + cursor_of(b'[1,"' + b"0" * 31 + b'\xff"]').encode(),
        b"cursor=" + cursor_of(b'[1e308,"' + b"0" * 32 + b'"]').encode(),
        b"cursor=" + cursor_of(b'[-1,"' + b"0" * 32 + b'"]').encode(),
        b"cursor=" + cursor_of(b"[" * 300).encode(),
        b"cursor=%ED%A0%80",
        b"cursor=\xff\xfe",
        b"cursor=" + b"A" * 600,
        b"cursor=!!!!",
        b"limit=%C2%B2",
        b"limit=\xb2",
        b"limit=%D9%A1",
        b"limit=" + b"9" * 5000,
        b"limit=-1",
        b"limit=1e3",
        b"limit=%201",
        b"status=%ED%A0%80",
        b"status=\xff",
        b"status=running&status=failed",
        b"createdAfter=%ED%A0%80",
        b"createdAfter=0001-01-01T00:00:00%2B23:59",
        b"createdAfter=9999-12-31T23:59:59-23:59",
        b"createdAfter=%EF%BC%92024-01-01",
        b"createdAfter=" + b"9" * 100,
        b"&".join(b"p%d=1" % i for i in range(40)),
        b"x=%ED%A0%80",
        b"%ED%A0%80=1",
        b"%",
        b"&&&==&",
    ]
    for i, query in enumerate(queries):
        cases.append(Hostile(f"listing-query-{i}", "GET", b"/mcp/tools/echo/calls?" + query))
    headers = [
        ("key-latin-1", (JSON_TYPE, (b"idempotency-key", b"\xff\xfe"))),
        ("key-control", (JSON_TYPE, (b"idempotency-key", b"a\x01b"))),
        ("key-long", (JSON_TYPE, (b"idempotency-key", b"k" * 300))),
        ("key-twice", (JSON_TYPE, KEY, KEY)),
        ("key-none", (JSON_TYPE,)),
        ("type-text", ((b"content-type", b"text/plain"), KEY)),
        ("type-garbage", ((b"content-type", b";;,,\xff"), KEY)),
    ]
    for name, extra in headers:
        cases.append(Hostile(f"put-{name}", "PUT", CALL, extra, b'{"text":"x"}'))
    # A type the face takes, with a body the tool's schema refuses: nothing may be created.
    odd_type = ((b"content-type", b"application/json; charset=\xff"), KEY)
    cases.append(Hostile("put-type-latin-1", "PUT", CALL, odd_type, b'{"text":1}'))
    conditional = [b"\xff", b'"' + b"a" * 5000 + b'"', b"W/", b'W/"', b",,,", b"*, \xff", b'"\\ud800"']
    for i, value in enumerate(conditional):
        cases += [
            Hostile(f"if-none-match-call-{i}", "GET", CALL, ((b"if-none-match", value),)),
            Hostile(f"if-none-match-tools-{i}", "GET", b"/mcp/tools", ((b"if-none-match", value),)),
            Hostile(f"if-none-match-openapi-{i}", "GET", b"/mcp/openapi.json", ((b"if-none-match", value),)),
            Hostile(f"if-match-{i}", "POST", CONFIRM + b"/advance", (JSON_TYPE, (b"if-match", value)), b"{}"),
        ]
    credentials = [b"Bearer \xff", b"Basic %ED%A0%80", b"\x00", b"Bearer " + b"a" * 8000]
    for i, value in enumerate(credentials):
        cases += [
            Hostile(f"authorization-tools-{i}", "GET", b"/mcp/tools", ((b"authorization", value),)),
            Hostile(
                f"authorization-put-{i}", "PUT", CALL, (JSON_TYPE, KEY, (b"authorization", value)), b"{}"
            ),
            Hostile(f"cookie-list-{i}", "GET", b"/mcp/tools/echo/calls", ((b"cookie", value),)),
        ]
    for method in ("DELETE", "PATCH", "OPTIONS", "TRACE", "PUT", "POST"):
        cases.append(Hostile(f"method-{method}-tools", method, b"/mcp/tools", (JSON_TYPE,), b"{}"))
    cases += [
        Hostile("put-unknown-tool", "PUT", b"/mcp/tools/nosuch/calls/x", (JSON_TYPE, KEY), b"{}"),
        Hostile("put-bad-arguments", "PUT", CALL, (JSON_TYPE, KEY), b'{"text":1}'),
        Hostile("advance-unknown", "POST", CONFIRM + b"/advance", (JSON_TYPE, (b"if-match", b"*")), b"{}"),
        Hostile("cancel-unknown", "POST", CONFIRM + b"/cancel"),
        Hostile("complete-wrong-shapes", "POST", b"/mcp/complete", (JSON_TYPE,), b'{"ref":1,"argument":[]}'),
        Hostile(
            "complete-surrogate-ref",
            "POST",
            b"/mcp/complete",
            (JSON_TYPE,),
            b'{"ref":{"name":' + ESCAPED + b"}}",
        ),
        Hostile("body-on-get", "GET", CALL, (JSON_TYPE,), b'{"text":' + ESCAPED + b"}"),
        Hostile("head-openapi", "HEAD", b"/mcp/openapi.json"),
        # The app's DNS-rebinding guard refuses the Host (421): the client's error, passed on.
        Hostile("host-tools", "GET", b"/mcp/tools", host=b"evil.example"),
        Hostile("host-put", "PUT", CALL, (JSON_TYPE, KEY), b'{"text":"x"}', host=b"evil.example"),
        Hostile("host-openapi", "GET", b"/mcp/openapi.json", host=b"127.0.0.1"),
        Hostile("host-latin-1", "GET", b"/mcp/prompts", host=b"\xff"),
        Hostile("headers-large", "GET", b"/mcp/tools", tuple((b"x-h%d" % i, b"v" * 4000) for i in range(40))),
    ]
    return cases


async def raw_request(
    port: int, case: Hostile, extra: tuple[tuple[bytes, bytes], ...]
) -> tuple[int, bytes, bytes]:
    """Send `case` as bytes and read the answer: its status, content type and body."""
    host = case.host if case.host is not None else b"127.0.0.1:%d" % port
    head = [case.method.encode() + b" " + case.target + b" HTTP/1.1", b"host: " + host, b"connection: close"]
    head += [name + b": " + value for name, value in (*case.headers, *extra)]
    if case.body or case.method in ("PUT", "POST"):
        head.append(b"content-length: " + str(len(case.body)).encode())
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"\r\n".join(head) + b"\r\n\r\n" + case.body)
        received = b""
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
            while True:
                received += await stream.receive()
    status_line, _, rest = received.partition(b"\r\n")
    head_lines, _, body = rest.partition(b"\r\n\r\n")
    content_type = next(
        (
            line.split(b":", 1)[1].strip()
            for line in head_lines.split(b"\r\n")
            if line.lower().startswith(b"content-type:")
        ),
        b"",
    )
    return int(status_line.split()[1]), content_type, body


async def test_hostile_requests_on_every_route_get_no_5xx_and_leave_nothing(
    store_kind: str, auth: str
) -> None:
    cases = sweep()
    assert len({case.name for case in cases}) == len(cases)
    async with face(store_kind, auth) as f:
        port = int(str(f.client.base_url).rsplit(":", 1)[1])
        extra = tuple((k.encode(), v.encode()) for k, v in f.headers.items())
        failures = []
        for case in cases:
            with anyio.fail_after(scaled(30)):
                status, content_type, body = await raw_request(port, case, extra)
            if status >= 500:
                failures.append((case.name, status, body[:200]))
            elif content_type.endswith(b"json") and case.method != "HEAD":
                try:
                    strict_json(body)  # JSON as RFC 8259 has it: never a bare NaN
                except (ValueError, AssertionError) as exc:
                    failures.append((case.name, status, repr(exc)[:200]))
        assert not failures, failures
        for tool, call_id in (("echo", "sweep-1"), ("confirm", "sweep-2"), ("nosuch", "x"), ("echo", "x")):
            await f.nothing_of(tool, call_id)
        # And the face works as before: a call that asks for input, advanced, succeeds.
        put = await f.put("confirm", "sweep-2", b'{"filename":"b.txt"}', key="k-after")
        assert put.status_code == 201, put.text
        put = await settled(f.client, put, "/mcp/tools/confirm/calls/sweep-2", f.headers)
        assert put.json()["status"] == "awaitingElicitationResult", put.text
        advance = await f.client.post(
            "/mcp/tools/confirm/calls/sweep-2/advance",
            json={"action": "accept", "content": {"confirm": False}},
            headers={**f.headers, "if-match": put.headers["etag"]},
        )
        assert advance.status_code == 200, advance.text


async def test_a_clients_own_mcp_headers_do_not_reach_the_app(store_kind: str) -> None:
    """The face sets `Mcp-Name` and `Mcp-Param-*` from the call itself; a client's own would
    contradict them (the app refuses a request whose headers and body disagree)."""
    async with face(store_kind) as f:
        response = await f.client.put(
            "/mcp/tools/regional/calls/h-1",
            json={"region": "eu"},
            headers={"idempotency-key": "k", "mcp-param-region": "us", "mcp-name": "echo"},
        )
        assert response.status_code == 201, response.text
        assert response.json()["result"]["content"][0]["text"] == "served in eu"
