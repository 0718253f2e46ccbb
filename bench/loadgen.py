"""A lean MCP Streamable HTTP load generator over raw HTTP/1.1 keep-alive connections.

Each virtual client is one MCP session on one TCP connection: ``initialize``
and ``notifications/initialized`` once, then ``tools/call echo`` over and over,
reading each SSE answer to its end (the terminating zero-length chunk) and
checking that it carries the result. A hand-written client keeps the load
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

PROTOCOL_VERSION = "2025-11-25"
ECHO_TEXT = "hello benchmark"


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


@dataclass
class Session:
    conn: Connection
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
        return (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s"}}}'
            % (self.next_id, ECHO_TEXT.encode())
        )

    async def call(self) -> None:
        status, headers, payload = await self.conn.post("/mcp", self.headers(), self.call_body())
        if status != 200 or not headers.get("content-type", "").startswith("text/event-stream"):
            raise HTTPError(f"tools/call answered {status} {headers.get('content-type')}: {payload[:200]!r}")
        if b'"result"' not in payload or ECHO_TEXT.encode() not in payload:
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
    max_requests: int = 10_000_000,
) -> LoadResult:
    """`concurrency` sessions calling `echo` back to back; count what completes inside the window."""
    sessions = []
    for _ in range(concurrency):
        conn = Connection(host, port)
        await conn.open()
        sessions.append(Session(conn))
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


def main() -> None:  # ad-hoc use: python -m bench.loadgen PORT [CONCURRENCY] [SECONDS]
    import sys

    port = int(sys.argv[1])
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 3.0
    t = time.perf_counter()
    r = asyncio.run(run_load("127.0.0.1", port, concurrency=concurrency, warmup_s=0.5, duration_s=seconds))
    print(
        f"c={concurrency} rps={r.rps:.0f} p50={r.percentile(50):.2f}ms p99={r.percentile(99):.2f}ms "
        f"errors={r.errors} wall={time.perf_counter() - t:.1f}s"
    )


if __name__ == "__main__":
    main()
