"""A lean MCP Streamable HTTP load generator over raw HTTP/1.1 keep-alive connections.

Each virtual client is one MCP session on one TCP connection: ``initialize``
and ``notifications/initialized`` once, then ``tools/call`` of one tool over and
over, reading each SSE answer to its end (the terminating zero-length chunk) and
checking it: for ``echo`` that it carries the result; for ``progress`` (the
request carries ``params._meta.progressToken``) that its events are exactly the
two ``notifications/progress`` for that token, in order, then the result for
that request id. A wrong answer counts as an error. A hand-written client keeps the load
generator's own cost per request far below the server's (httpx costs several
times more), so on a 2-core machine the server, pinned to its own core, is the
bottleneck; `server_cpu` in the results checks that.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

PROTOCOL_VERSION = "2025-11-25"
ECHO_TEXT = "hello benchmark"
#: The tools a load run can call (bench.apps.TOOLS; bench.apps is not imported here: it
#: imports mcp_resume_asgi, which with `--at` only the child processes may load).
TOOLS = ("echo", "progress")
#: What bench.apps.progress reports, in order, before its result.
PROGRESS_STEPS = (1.0, 2.0)


class HTTPError(Exception):
    pass


class Connection:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._host_header = f"{host}:{port}".encode()

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()

    async def post(
        self, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        assert self.reader is not None and self.writer is not None
        head = [b"POST ", path.encode(), b" HTTP/1.1\r\nhost: ", self._host_header, b"\r\n"]
        for key, value in headers.items():
            head += [key.encode(), b": ", value.encode(), b"\r\n"]
        head += [b"content-length: ", str(len(body)).encode(), b"\r\n\r\n", body]
        self.writer.write(b"".join(head))
        raw_head = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw_head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        response_headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                key, _, value = line.partition(":")
                response_headers[key.strip().lower()] = value.strip()
        if response_headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size_line = await self.reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")  # no trailers are sent
                    break
                chunks.append((await self.reader.readexactly(size + 2))[:-2])
            payload = b"".join(chunks)
        elif "content-length" in response_headers:
            payload = await self.reader.readexactly(int(response_headers["content-length"]))
        elif status in (202, 204, 304):
            payload = b""
        else:
            raise HTTPError(f"unframed response (status {status})")
        return status, response_headers, payload


def sse_messages(payload: bytes) -> list[Any]:
    """The JSON-RPC messages of an SSE body, in order: each event's data lines joined and
    parsed; events without data (the priming event of a resumable stream) are skipped, and
    so is an unterminated last event (as an EventSource would)."""
    messages: list[Any] = []
    data: list[bytes] = []
    for line in payload.splitlines():  # \n and \r\n alike
        if not line:
            if data and any(data):
                messages.append(json.loads(b"\n".join(data)))
            data = []
        elif line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(b" ") else value)
    return messages


def check_progress_answer(payload: bytes, request_id: int, token: str) -> None:
    """Raise HTTPError unless the answer is the two progress notifications for `token`, in
    order, then the `progress` tool's result for `request_id`."""
    messages = sse_messages(payload)
    if len(messages) != len(PROGRESS_STEPS) + 1 or not all(isinstance(m, dict) for m in messages):
        raise HTTPError(f"progress answer with {len(messages)} messages: {payload[:300]!r}")
    for message, step in zip(messages, PROGRESS_STEPS, strict=False):
        params = message.get("params") or {}
        if (
            message.get("method") != "notifications/progress"
            or params.get("progressToken") != token
            or params.get("progress") != step
        ):
            raise HTTPError(f"expected progress {step} for {token}, got {message!r}")
    answer = messages[-1]
    result = answer.get("result") or {}
    if (
        answer.get("id") != request_id
        or result.get("isError")
        or result.get("content") != [{"type": "text", "text": ECHO_TEXT}]
    ):
        raise HTTPError(f"wrong progress result for id {request_id}: {answer!r}")


@dataclass
class Session:
    conn: Connection
    tool: str = "echo"
    session_id: str = ""
    next_id: int = 0

    def headers(self) -> dict[str, str]:
        h = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": PROTOCOL_VERSION,
        }
        if self.session_id:
            h["mcp-session-id"] = self.session_id
        return h

    async def initialize(self) -> None:
        self.next_id += 1
        body = {
            "jsonrpc": "2.0",
            "id": self.next_id,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        }
        status, headers, payload = await self.conn.post("/mcp", self.headers(), json.dumps(body).encode())
        if status != 200 or b'"result"' not in payload:
            raise HTTPError(f"initialize failed: {status} {payload[:200]!r}")
        self.session_id = headers["mcp-session-id"]
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
        status, _, _ = await self.conn.post("/mcp", self.headers(), note)
        if status != 202:
            raise HTTPError(f"notifications/initialized answered {status}")

    def call_body(self) -> bytes:
        self.next_id += 1
        if self.tool == "progress":
            return (
                b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"progress",'
                b'"arguments":{"text":"%s"},"_meta":{"progressToken":"p%d"}}}'
                % (self.next_id, ECHO_TEXT.encode(), self.next_id)
            )
        return (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s"}}}'
            % (self.next_id, ECHO_TEXT.encode())
        )

    async def call(self) -> None:
        body = self.call_body()
        status, headers, payload = await self.conn.post("/mcp", self.headers(), body)
        if status != 200 or not headers.get("content-type", "").startswith("text/event-stream"):
            raise HTTPError(f"tools/call answered {status} {headers.get('content-type')}: {payload[:200]!r}")
        if self.tool == "progress":
            check_progress_answer(payload, self.next_id, f"p{self.next_id}")
        elif b'"result"' not in payload or ECHO_TEXT.encode() not in payload:
            raise HTTPError(f"tools/call answer without the result: {payload[:300]!r}")


@dataclass
class LoadResult:
    concurrency: int
    duration_s: float
    requests: int
    errors: int
    latencies_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s

    def percentile(self, q: float) -> float:
        data = sorted(self.latencies_ms)
        if not data:
            return float("nan")
        k = min(len(data) - 1, max(0, round(q / 100 * (len(data) - 1))))
        return data[k]


async def run_load(
    host: str,
    port: int,
    *,
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    tool: str = "echo",
    max_requests: int = 10_000_000,
) -> LoadResult:
    """`concurrency` sessions calling `tool` back to back; count what completes inside the window."""
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}; one of {TOOLS}")
    sessions = []
    for _ in range(concurrency):
        conn = Connection(host, port)
        await conn.open()
        sessions.append(Session(conn, tool))
    await asyncio.gather(*(s.initialize() for s in sessions))
    loop = asyncio.get_running_loop()
    start = loop.time() + warmup_s
    stop = start + duration_s
    latencies: list[float] = []
    errors = 0
    issued = 0

    async def worker(session: Session) -> None:
        nonlocal errors, issued
        while issued < max_requests:
            issued += 1
            t0 = loop.time()
            if t0 >= stop:
                return
            try:
                await session.call()
            except (HTTPError, OSError, asyncio.IncompleteReadError, ValueError):
                errors += 1
                await session.conn.close()
                session.conn = Connection(host, port)
                await session.conn.open()
                session.session_id = ""
                await session.initialize()
                continue
            t1 = loop.time()
            if start <= t1 <= stop:
                latencies.append((t1 - t0) * 1000.0)

    try:
        await asyncio.gather(*(worker(s) for s in sessions))
    finally:
        for s in sessions:
            await s.conn.close()
    return LoadResult(concurrency, duration_s, len(latencies), errors, latencies)


def main() -> None:  # ad-hoc use: python -m bench.loadgen PORT [CONCURRENCY] [SECONDS] [TOOL]
    import sys

    port = int(sys.argv[1])
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 3.0
    tool = sys.argv[4] if len(sys.argv) > 4 else "echo"
    t = time.perf_counter()
    r = asyncio.run(
        run_load("127.0.0.1", port, concurrency=concurrency, warmup_s=0.5, duration_s=seconds, tool=tool)
    )
    print(
        f"{tool} c={concurrency} rps={r.rps:.0f} p50={r.percentile(50):.2f}ms p99={r.percentile(99):.2f}ms "
        f"errors={r.errors} wall={time.perf_counter() - t:.1f}s"
    )


if __name__ == "__main__":
    main()
