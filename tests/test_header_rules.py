"""The transport's header rules for requests the middleware answers itself (`header_rules.py`), without an event loop."""

from __future__ import annotations

import json
from typing import Any

from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.header_rules import Era, era_of, refusal
from mcp_resume_asgi.wire.headers import acceptable

MODERN = "2026-07-28"
BOTH = [(b"accept", b"application/json, text/event-stream"), (b"content-type", b"application/json")]


def headers(*extra: tuple[str, str]) -> list[tuple[bytes, bytes]]:
    return [*BOTH, *((k.encode(), v.encode()) for k, v in extra)]


def request(method: str = "tasks/get", version: Any = MODERN, **params: Any) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": version, p.CLIENT_CAPABILITIES_META: {}}
    return {"jsonrpc": "2.0", "id": 3, "method": method, "params": {**params, "_meta": meta}}


def refused(hs: list[tuple[bytes, bytes]], message: dict[str, Any]) -> tuple[int, int | None]:
    out = refusal(hs, message)
    assert out is not None
    code = json.loads(out.body)["error"]["code"] if out.body else None
    return out.status, code


def test_the_most_specific_accepted_range_decides() -> None:
    assert acceptable("application/*", "application/json")
    assert not acceptable("application/*;q=0, text/*", "application/json")
    assert acceptable("*/*;q=0, application/json;q=0.2", "application/json")
    assert not acceptable("application/json;q=0, */*", "application/json")
    assert not acceptable(None, "application/json")


def test_the_first_protocol_version_header_picks_the_era() -> None:
    assert era_of(headers()) is Era.SESSION
    for version in ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"):
        assert era_of(headers(("mcp-protocol-version", version))) is Era.SESSION
    for version in (MODERN, "garbage", "2099-01-01", ""):
        assert era_of(headers(("mcp-protocol-version", version))) is Era.SINGLE_EXCHANGE
    repeated = headers(("mcp-protocol-version", "2025-11-25"), ("mcp-protocol-version", "x"))
    assert era_of(repeated) is Era.SESSION


def test_a_well_formed_request_of_either_era_passes() -> None:
    modern = headers(("mcp-protocol-version", MODERN), ("mcp-method", "tasks/get"), ("mcp-name", "t"))
    assert refusal(modern, request(taskId="t")) is None
    session = headers(("mcp-protocol-version", "2025-11-25"), ("mcp-session-id", "s"))
    assert refusal(session, {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {}}) is None
    repeated = [*session, (b"mcp-protocol-version", b"2025-11-25")]
    assert refusal(repeated, {"jsonrpc": "2.0", "id": 1, "method": "tasks/get"}) is None


def test_each_rule_of_a_single_exchange_request_refuses_as_the_stock_server_does() -> None:
    good = [("mcp-protocol-version", MODERN), ("mcp-method", "tasks/get")]
    sse_only = [(b"accept", b"text/event-stream"), (b"content-type", b"application/json")]
    out = refusal([*sse_only, (b"mcp-protocol-version", MODERN.encode())], request())
    assert out is not None and (out.status, out.body) == (406, b"")
    assert refused(headers(*good, ("mcp-protocol-version", MODERN)), request()) == (400, -32020)
    assert refused(headers(*good, ("mcp-method", "tasks/get")), request()) == (400, -32020)
    assert refused(headers(*good, ("mcp-name", "a"), ("mcp-name", "a")), request()) == (400, -32020)
    no_meta = {"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {}}
    assert refused(headers(*good), no_meta) == (400, -32602)
    half = request()
    del half["params"]["_meta"][p.CLIENT_CAPABILITIES_META]
    assert refused(headers(*good), half) == (400, -32602)
    assert refused(headers(*good), request(version="2025-11-25")) == (400, -32020)
    assert refused(headers(*good), request(version=None)) == (400, -32020)
    assert refused(headers(("mcp-protocol-version", MODERN)), request()) == (400, -32020), "no Mcp-Method"
    assert refused(headers(("mcp-protocol-version", MODERN), ("mcp-method", "x")), request()) == (400, -32020)
    unsupported = headers(("mcp-protocol-version", "2099-01-01"), ("mcp-method", "tasks/get"))
    out = refusal(unsupported, request(version="2099-01-01"))
    assert out is not None and out.status == 400
    error = json.loads(out.body)["error"]
    assert error["code"] == -32022 and error["data"] == {"supported": [MODERN], "requested": "2099-01-01"}
    assert refused(headers(("mcp-protocol-version", "garbage"), ("mcp-method", "tasks/get")), request()) == (
        400,
        -32020,
    )


def test_a_named_method_must_repeat_its_name() -> None:
    call = request("tools/call", name="späti")
    base = [("mcp-protocol-version", MODERN), ("mcp-method", "tools/call")]
    assert refused(headers(*base), call) == (400, -32020)
    assert refused(headers(*base, ("mcp-name", "other")), call) == (400, -32020)
    assert refusal(headers(*base, ("mcp-name", "=?base64?c3DDpHRp?=")), call) is None


def test_a_sessions_request_must_accept_json() -> None:
    sse_only = [(b"accept", b"text/event-stream"), (b"mcp-protocol-version", b"2025-11-25")]
    status, code = refused(sse_only, {"jsonrpc": "2.0", "id": 1, "method": "tasks/get"})
    assert (status, code) == (406, -32600)
