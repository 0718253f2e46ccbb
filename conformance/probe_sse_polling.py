"""Replay, with raw HTTP on the wire, what the suite's ``server-sse-polling`` scenario does.

Use it when ``server-sse-polling`` checks are not SUCCESS, to see exactly what the
server sent.  Same requests as ``@modelcontextprotocol/conformance`` 0.1.16:

1. initialize (protocol 2025-11-25) + notifications/initialized, then -- like the
   TypeScript SDK client the suite uses -- a standalone GET SSE stream kept open;
2. raw POST ``tools/call test_reconnection`` (id 1) with header
   ``mcp-protocol-version: 2025-03-26`` (sic, the suite sends that), reading the SSE
   stream for up to 10 s;
3. if the stream closed without the result: GET with ``last-event-id`` (same
   protocol header), read for up to 5 s;
4. DELETE the session.

The verdicts printed mirror the suite's checks ``server-sse-priming-event``,
``server-sse-retry-field`` and ``server-sse-disconnect-resume``.

    python -m conformance.probe_sse_polling --wrapped         # starts conformance/server.py itself
    python -m conformance.probe_sse_polling --url http://127.0.0.1:3001/mcp
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

T0 = time.monotonic()


def log(*parts: Any) -> None:
    print(f"[{time.monotonic() - T0:7.3f}s]", *parts, flush=True)


def _headers(resp: httpx.Response) -> str:
    return " ".join(f"{k}: {v};" for k, v in resp.headers.items())


async def _read_sse(resp: httpx.Response, limit_s: float, tag: str) -> dict[str, Any]:
    """Print every raw line; parse events like eventsource-parser does (enough for the checks)."""
    out: dict[str, Any] = {"events": [], "retry": None, "last_id": None, "result": False, "closed": False}
    event: dict[str, str] = {}
    with anyio.move_on_after(limit_s) as scope:
        async for line in resp.aiter_lines():
            log(f"{tag} | {line!r}")
            if line == "":
                if "data" in event or "id" in event:
                    out["events"].append(event)
                    if "id" in event:
                        out["last_id"] = event["id"]
                    try:
                        msg = json.loads(event.get("data") or "null")
                    except ValueError:
                        msg = None
                    if isinstance(msg, dict) and msg.get("id") == 1 and "result" in msg:
                        out["result"] = True
                        if tag.startswith("GET"):
                            break
                event = {}
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "retry" and value.isdigit():
                out["retry"] = int(value)
            elif name == "data":
                event["data"] = event["data"] + "\n" + value if "data" in event else value
            elif name in ("id", "event"):
                event[name] = value
        else:
            out["closed"] = True
    if scope.cancelled_caught:
        log(f"{tag} | (reader timeout after {limit_s}s, as the suite's)")
    elif out["closed"]:
        log(f"{tag} | (stream closed by server)")
    return out


async def probe(url: str) -> int:
    base = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None)) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"sampling": {}, "elicitation": {}},
                "clientInfo": {"name": "conformance-test-client", "version": "1.0.0"},
            },
        }
        r = await http.post(url, json=init, headers=base)
        log(f"POST initialize -> {r.status_code} {_headers(r)}")
        log(f"  body: {r.text!r}")
        sid = r.headers.get("mcp-session-id")
        version = "2025-11-25"
        for line in r.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                version = json.loads(line[5:]).get("result", {}).get("protocolVersion", version)
        session = {"mcp-session-id": sid} if sid else {}
        r = await http.post(
            url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**base, **session, "mcp-protocol-version": version},
        )
        log(f"POST notifications/initialized -> {r.status_code}")

        async with anyio.create_task_group() as tg:

            async def standalone_get() -> None:
                headers = {"Accept": "text/event-stream", **session, "mcp-protocol-version": version}
                async with http.stream("GET", url, headers=headers) as resp:
                    log(f"standalone GET -> {resp.status_code} {_headers(resp)}")
                    async for line in resp.aiter_lines():
                        log(f"standalone GET | {line!r}")

            tg.start_soon(standalone_get)
            await anyio.sleep(0.2)

            call = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "test_reconnection", "arguments": {}},
            }
            headers = {
                "Content-Type": "application/json",
                "Accept": "text/event-stream, application/json",
                **session,
                "mcp-protocol-version": "2025-03-26",
            }
            async with http.stream("POST", url, json=call, headers=headers) as resp:
                log(f"POST tools/call test_reconnection -> {resp.status_code} {_headers(resp)}")
                post = await _read_sse(resp, 10.0, "POST")
            events = post["events"]
            priming = [
                i for i, e in enumerate(events) if "id" in e and (e.get("data", "").strip() in ("", "{}"))
            ]
            print()
            log(
                "server-sse-priming-event:",
                "SUCCESS" if priming[:1] == [0] else f"WARNING (priming at {priming})",
            )
            log(
                "server-sse-retry-field:",
                f"SUCCESS (retry={post['retry']})" if post["retry"] is not None else "WARNING",
            )
            verdict = "INFO (result came on the POST stream: no disconnect)" if post["result"] else None
            if not post["result"] and post["last_id"] and sid:
                headers = {
                    "Accept": "text/event-stream",
                    "mcp-session-id": sid,
                    "mcp-protocol-version": "2025-03-26",
                    "last-event-id": post["last_id"],
                }
                async with http.stream("GET", url, headers=headers) as resp:
                    log(f"GET last-event-id={post['last_id']!r} -> {resp.status_code} {_headers(resp)}")
                    if resp.is_success:
                        got = await _read_sse(resp, 5.0, "GET")
                        verdict = "SUCCESS" if got["result"] else "WARNING (no tool result after resume)"
                    else:
                        body = (await resp.aread()).decode(errors="replace")
                        log(f"  body: {body!r}")
                        verdict = (
                            "INFO (405)" if resp.status_code == 405 else f"WARNING (HTTP {resp.status_code})"
                        )
            elif verdict is None:
                verdict = "INFO (no event id or session id to resume with)"
            log("server-sse-disconnect-resume:", verdict)
            tg.cancel_scope.cancel()
        if sid:
            r = await http.delete(url, headers={**session, "mcp-protocol-version": version})
            log(f"DELETE session -> {r.status_code}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="probe this server instead of starting conformance/server.py")
    p.add_argument("--wrapped", action="store_true", help="start the server wrapped by mcp_resume_asgi")
    args = p.parse_args(argv)
    if args.url:
        return anyio.run(probe, args.url)
    from conformance.run import DEFAULT_CACHE_DIR, serve

    log_path = Path(DEFAULT_CACHE_DIR) / "results" / "probe-server.log"
    with serve(args.wrapped, log_path) as url:
        log(f"{'wrapped' if args.wrapped else 'bare'} server at {url} (log: {log_path})")
        return anyio.run(probe, url)


if __name__ == "__main__":
    sys.exit(main())
