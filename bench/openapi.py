"""What `GET /mcp/openapi.json` costs for an app with many tools (issue 20, item 11).

    python -m bench.openapi                 # 2,000 tools (a ~10.5 MB tools/list), ~1-2 min
    python -m bench.openapi --tools 500     # smaller
    python -m bench.openapi --at main       # the face as committed at a revision (see below)

A low-level MCP `Server` whose `tools/list` answers `--tools` tools of ~5 KB each (a
description and a dozen described properties, every schema different), under uvicorn in
a child process on 127.0.0.1, wrapped with `resumable(app, rest=True)` (`wrapped`) or as
it is (`bare`). Plain `httpx` from this process:

* `wrapped`: 10 concurrent `GET /mcp/openapi.json` as the first requests (a cold cache),
  then `--rounds` sequential GETs (seconds each, median), as many with `If-None-Match`
  (the 304s), and 10 concurrent GETs again (warm);
* `bare`: `--rounds` sequential MCP `tools/list` (2026-07-28 single exchanges), then 10
  concurrent ones: what the app itself costs for the list every document is built from.

Peak RSS is the child's `VmHWM` (reset through `/proc/<pid>/clear_refs` before each burst),
so Linux only. `--at REV` runs the children on `git archive REV mcp_resume_asgi` (the bench
itself from the working tree), to compare a fix with its parent on the same machine.

Issue 20's fix, one run after the other on a shared 2-core machine (2,000 tools, 10.5 MB list):

    933c1c4     GET 0.376 s, 304 0.348 s, 10 at once 9.8 s / 535 MB (cold), 4.8 s / 519 MB (warm)
    the fix     GET 0.272 s, 304 0.282 s, 10 at once 4.4 s / 160 MB (cold), 0.7 s / 168 MB (warm)
    bare app    tools/list 0.23-0.27 s; 10 at once 2.5 s / 289-325 MB
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODERN = "2026-07-28"
CONCURRENT = 10
PROPERTIES = 12
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
]


# ---------------------------------------------------------------------------------------------
# The child: the app, served


def _text(seed: int, size: int) -> str:
    words: list[str] = []
    length = 0
    n = seed
    while length < size:
        n = (n * 1103515245 + 12345) % (1 << 31)
        word = WORDS[n % len(WORDS)]
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def tools_of(count: int) -> list[Any]:
    """`count` tools of ~5 KB each, every schema different (no two verdicts alike)."""
    import mcp.types as types

    tools = []
    for i in range(count):
        properties = {
            f"p{i}_{j}": {
                "type": ("string", "integer", "number", "boolean")[j % 4],
                "title": f"Parameter {j} of tool {i}",
                "description": _text(i * 100 + j, 240),
            }
            for j in range(PROPERTIES)
        }
        schema = {"type": "object", "properties": properties, "required": [f"p{i}_0"]}
        tools.append(types.Tool(name=f"tool_{i}", description=_text(i, 1300), input_schema=schema))
    return tools


def create_app(variant: str, count: int) -> Any:
    from collections.abc import AsyncIterator

    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    tools = tools_of(count)

    async def list_tools(ctx: Any, params: Any) -> Any:
        import mcp.types as types

        return types.ListToolsResult(tools=tools)

    server: Server[Any] = Server("bench-openapi-app", version="1.2.3", on_list_tools=list_tools)
    manager = StreamableHTTPSessionManager(app=server)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    app = Starlette(routes=[Route("/mcp", StreamableHTTPASGIApp(manager))], lifespan=lifespan)
    if variant == "bare":
        return app
    from mcp_resume_asgi import resumable

    return resumable(app, rest=True)


def serve(variant: str, count: int) -> None:
    import asyncio
    import socket

    import uvicorn

    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config(create_app(variant, count), lifespan="on", log_level="warning", access_log=False)
    server = uvicorn.Server(config)

    async def main() -> None:
        async def announce() -> None:
            while not server.started:  # noqa: ASYNC110 - uvicorn offers no event for it
                await asyncio.sleep(0.01)
            sys.stdout.write(f"READY {sock.getsockname()[1]}\n")
            sys.stdout.flush()

        task = asyncio.create_task(announce())
        try:
            await server.serve(sockets=[sock])
        finally:
            task.cancel()

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# The parent: measuring


@contextlib.contextmanager
def child(variant: str, count: int, code: Path) -> Iterator[tuple[int, str]]:
    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{ROOT}"}
    command = [sys.executable, "-m", "bench.openapi", "--serve", variant, "--tools", str(count)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, cwd=code)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        if not line.startswith("READY "):
            raise RuntimeError(f"the {variant} server did not start: {line!r}")
        yield process.pid, f"http://127.0.0.1:{line.split()[1]}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def peak_rss_mb(pid: int, *, reset: bool = False) -> float:
    if reset:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def tools_list_request() -> tuple[dict[str, str], bytes]:
    import json

    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/list",
    }
    return headers, json.dumps(body).encode()


async def burst(url: str, headers: dict[str, str], body: bytes | None) -> tuple[float, list[int]]:
    import anyio
    import httpx

    statuses: list[int] = []
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=CONCURRENT)) as client:

        async def one() -> None:
            if body is None:
                response = await client.get(url, headers=headers)
            else:
                response = await client.post(url, headers=headers, content=body)
            statuses.append(response.status_code)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(CONCURRENT):
                tg.start_soon(one)
        return time.perf_counter() - started, statuses


def timed(send: Any, rounds: int) -> tuple[float, Any]:
    times, last = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        last = send()
        times.append(time.perf_counter() - started)
    return statistics.median(times), last


def measure_wrapped(count: int, rounds: int, code: Path) -> dict[str, Any]:
    import anyio
    import httpx

    out: dict[str, Any] = {}
    with child("wrapped", count, code) as (pid, base):
        url = f"{base}/mcp/openapi.json"
        out["rss_idle_mb"] = rss_mb(pid)
        peak_rss_mb(pid, reset=True)
        seconds, statuses = anyio.run(burst, url, {}, None)
        out["cold_burst"] = {
            "seconds": seconds,
            "statuses": sorted(set(statuses)),
            "peak_rss_mb": peak_rss_mb(pid),
        }
        with httpx.Client(timeout=300) as client:
            first = client.get(url)
            first.raise_for_status()
            out["document_bytes"] = len(first.content)
            out["title"] = first.json()["info"]
            out["get_s"], _ = timed(lambda: client.get(url), rounds)
            etag = first.headers["etag"]
            out["not_modified_s"], last = timed(
                lambda: client.get(url, headers={"if-none-match": etag}), rounds
            )
            assert last.status_code == 304, last.status_code
        peak_rss_mb(pid, reset=True)
        seconds, statuses = anyio.run(burst, url, {}, None)
        out["warm_burst"] = {
            "seconds": seconds,
            "statuses": sorted(set(statuses)),
            "peak_rss_mb": peak_rss_mb(pid),
        }
    return out


def measure_bare(count: int, rounds: int, code: Path) -> dict[str, Any]:
    import anyio
    import httpx

    out: dict[str, Any] = {}
    headers, body = tools_list_request()
    with child("bare", count, code) as (pid, base):
        url = f"{base}/mcp"
        with httpx.Client(timeout=300) as client:
            first = client.post(url, headers=headers, content=body)
            first.raise_for_status()
            out["tools_list_bytes"] = len(first.content)
            out["tools_list_s"], _ = timed(lambda: client.post(url, headers=headers, content=body), rounds)
        peak_rss_mb(pid, reset=True)
        seconds, statuses = anyio.run(burst, url, headers, body)
        out["burst"] = {
            "seconds": seconds,
            "statuses": sorted(set(statuses)),
            "peak_rss_mb": peak_rss_mb(pid),
        }
    return out


@contextlib.contextmanager
def code_at(rev: str | None) -> Iterator[Path]:
    """Where the children import `mcp_resume_asgi` from: the working tree, or `rev` exported."""
    if rev is None:
        yield ROOT
        return
    with tempfile.TemporaryDirectory(prefix="bench-openapi-") as tmp:
        archive = subprocess.run(
            ["git", "archive", rev, "mcp_resume_asgi"], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        shutil.copytree(ROOT / "bench", Path(tmp) / "bench")
        yield Path(tmp)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tools", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--at", default=None, help="a git revision of mcp_resume_asgi to measure")
    parser.add_argument("--only", choices=("wrapped", "bare"), default=None)
    parser.add_argument("--serve", choices=("wrapped", "bare"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.tools)
        return
    import json

    report: dict[str, Any] = {"tools": args.tools, "rounds": args.rounds, "at": args.at or "working tree"}
    with code_at(args.at) as code:
        if args.only in (None, "bare"):
            report["bare"] = measure_bare(args.tools, args.rounds, code)
        if args.only in (None, "wrapped"):
            report["wrapped"] = measure_wrapped(args.tools, args.rounds, code)
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
