"""What a `GET` on a REST tool call costs (issue 14), next to the MCP `tasks/get` it wraps.

    python -m bench.rest            # ~30 s
    python -m bench.rest --quick    # smoke run

In process (no sockets between client and middleware; the `RedisStore` talks to Redis over
loopback TCP): the benchmark's stock `MCPServer` (`bench/apps.py`) wrapped with
`resumable(app, rest=True)`, its lifespan running, driven with plain ASGI calls. One `echo`
call is made (`PUT`, finished before the timing); then, in interleaved rounds:

* `GET /mcp/tools/echo/calls/{id}` - the REST face: the caller's principal (here: a `ping`
  to the app, as no outer auth layer says who calls), the call's record, `tasks/get` through
  the wrapped stack (which asks the app to admit the caller: another `ping`), the progress
  read from the task's stream, the resource and its ETag;
* the same with `If-None-Match` (a 304: the same work, no body);
* MCP `tasks/get` of the same task, POSTed to `/mcp` (what the GET wraps);
* MCP `tools/list` (a request the app answers itself: the baseline).

Per request: wall time (median, p99 over all calls) and process CPU (median over rounds of
round CPU / calls), for the memory store and the Redis store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bench.apps import create_app as create_bench_app
from bench.exchange import Exchange, post_scope
from mcp_resume_asgi import MemoryStore, Policy, Store, resumable

MODERN = "2026-07-28"
ACCEPT = (b"accept", b"application/json, text/event-stream")


def rest_scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    scope = post_scope([(b"host", b"127.0.0.1:8000"), *headers])
    scope.update(method=method, path=path, raw_path=path.encode())
    return scope


async def call(app: Any, scope: dict[str, Any], body: bytes = b"") -> Exchange:
    exchange = Exchange(body)
    await app(scope, exchange.receive, exchange.send)
    return exchange


def mcp_body(method: str, params: dict[str, Any]) -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    }
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    ).encode()


def mcp_headers(method: str, name: str | None) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        ACCEPT,
        (b"mcp-protocol-version", MODERN.encode()),
        (b"mcp-method", method.encode()),
    ]
    return headers + ([(b"mcp-name", name.encode())] if name else [])


async def measure(store: Store, rounds: int, per_round: int) -> dict[str, tuple[float, float, float]]:
    inner = create_bench_app()
    app = resumable(
        inner, policy=Policy(task_ttl_s=3600), store=store, secret="bench-rest-secret-0123456789", rest=True
    )
    async with inner.router.lifespan_context(inner):
        put = await call(
            app,
            rest_scope("PUT", "/mcp/tools/echo/calls/bench-1", [(b"idempotency-key", b"k")]),
            b'{"text": "hi"}',
        )
        resource = json.loads(put.payload)
        assert put.status == 201 and resource["status"] == "success", put.payload
        etag = put.headers[b"etag"]
        task_get = await call(app, rest_scope("GET", "/mcp/tools/echo/calls/bench-1", []))
        assert task_get.status == 200
        task_id = await _task_id(app)
        kinds: dict[str, Callable[[], Awaitable[Exchange]]] = {
            "REST GET on a call": lambda: call(app, rest_scope("GET", "/mcp/tools/echo/calls/bench-1", [])),
            "REST GET, If-None-Match (304)": lambda: call(
                app, rest_scope("GET", "/mcp/tools/echo/calls/bench-1", [(b"if-none-match", etag)])
            ),
            "MCP tasks/get": lambda: call(
                app, post_scope(mcp_headers("tasks/get", task_id)), mcp_body("tasks/get", {"taskId": task_id})
            ),
            "MCP tools/list": lambda: call(
                app, post_scope(mcp_headers("tools/list", None)), mcp_body("tools/list", {})
            ),
        }
        walls: dict[str, list[float]] = {k: [] for k in kinds}
        cpus: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(rounds):
            for kind, run in kinds.items():
                cpu0 = time.process_time()
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    reply = await run()
                    walls[kind].append(time.perf_counter() - t0)
                    assert reply.status in (200, 304), (kind, reply.status, reply.payload[:200])
                cpus[kind].append((time.process_time() - cpu0) / per_round)
    return {
        kind: (
            statistics.median(walls[kind]) * 1e6,
            sorted(walls[kind])[max(0, round(len(walls[kind]) * 0.99) - 1)] * 1e6,
            statistics.median(cpus[kind]) * 1e6,
        )
        for kind in kinds
    }


async def _task_id(app: Any) -> str:
    """The call's task id, from its record in the store."""
    from mcp_resume_asgi.rest.calls import call_key

    record = await app._tool_calls.calls.load(call_key(None, "echo", "bench-1"))
    assert record is not None and record.task_id is not None
    return str(record.task_id)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args(argv)
    rounds, per_round = (3, 50) if args.quick else (10, 200)
    results: dict[str, dict[str, tuple[float, float, float]]] = {}
    results["memory"] = await measure(MemoryStore(), rounds, per_round)
    from mcp_resume_asgi.store import RedisStore

    redis_store = RedisStore(args.redis_url, prefix=f"bench-rest:{uuid.uuid4().hex}:")
    try:
        results["redis"] = await measure(redis_store, rounds, per_round)
    finally:
        await redis_store.clear()
        await redis_store.aclose()
    print(f"| request ({rounds} rounds x {per_round}) | store | wall median µs | wall p99 µs | CPU µs/call |")
    print("|---|---|---:|---:|---:|")
    for store_name, figures in results.items():
        for kind, (median, p99, cpu) in figures.items():
            print(f"| {kind} | {store_name} | {median:,.0f} | {p99:,.0f} | {cpu:,.0f} |")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
