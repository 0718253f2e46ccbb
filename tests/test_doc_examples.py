"""Every code and shell example of README.md and docs/ runs, as written (issue 25).

The fenced ```python and ```sh blocks are taken out of the Markdown and run; a block
may be preceded by `<!-- doc-test: ... -->` saying how (the directives are listed in
docs/contributing.md, "Examples in the docs run"), or that it cannot run and why.

* A python block that builds an `app` is served under uvicorn and must answer MCP
  (`initialize`, `tools/list`) with a stream `Link` on its endpoint: the wrapping works.
* A python block that defines `async def main(url)` is a client: it runs in a child
  process under `-X dev -W error` (any warning, a DeprecationWarning too, fails it)
  against a wrapped `countdown` server that closes every connection after 300 ms.
* A sh block runs under `bash -euo pipefail`, with `.venv/bin` first on PATH, every
  `curl` failing on an HTTP error status, and the ports 8000-8009 it names mapped to
  free loopback ones; `against=NAME` serves the app of the python block `id=NAME` there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp

from mcp_resume_asgi import Policy, resumable
from tests.support.counting import Counting
from tests.support.server import REPO_ROOT, serve_in_thread
from tests.support.stores import redis_url, require_redis

pytestmark = pytest.mark.timeout(180)

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
RUN_LANGUAGES = {"python", "sh"}
NOT_CODE = {"json", "text", ""}
"""Fences that hold no code to run. Any other language (console, bash, py...) is refused,
so that no example escapes this test by its fence's name."""
KNOWN = {
    "skip",
    "given",
    "endpoint",
    "venv",
    "server",
    "id",
    "against",
    "file",
    "needs",
    "expect-mcp",
    "timeout",
}
DIRECTIVE = re.compile(r"^\s*<!-- doc-test: (.*) -->\s*$")
FENCE = re.compile(r"^(\s*)```([\w-]*)\s*$")
PORT = re.compile(r"\b(800\d)\b")
ACCEPT = "application/json, text/event-stream"
RUN_MAIN = (
    "\n\nif __name__ == '__main__':\n    import sys\n\n    import anyio\n\n    anyio.run(main, sys.argv[1])\n"
)
"""Appended to a client block (an `async def main(url)`) to run it as a script."""


@dataclass
class Block:
    path: Path
    line: int
    language: str
    code: str
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"

    @property
    def is_client(self) -> bool:
        return re.search(r"^async def main\(url", self.code, flags=re.MULTILINE) is not None

    def siblings(self) -> list[Block]:
        return [block for block in ALL_BLOCKS if block.path == self.path]


def parse(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, with the directives right above each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, language = opening.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        code = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end]) + "\n"
        directives: dict[str, str] = {}
        above = DIRECTIVE.match(lines[i - 1]) if i > 0 else None
        if above:
            for word in shlex.split(above.group(1)):
                key, _, value = word.partition("=")
                directives[key] = value
        blocks.append(Block(path, i + 1, language, code, directives))
        i = end + 1
    return blocks


ALL_BLOCKS = [block for path in DOCS for block in parse(path)]
RUN_BLOCKS = [block for block in ALL_BLOCKS if block.language in RUN_LANGUAGES]


def blocks_of(language: str) -> list[Any]:
    """The blocks to run, those that start child processes or venvs marked `slow`."""
    return [
        pytest.param(b, id=b.name, marks=[pytest.mark.slow] if is_slow(b) else [])
        for b in RUN_BLOCKS
        if b.language == language
    ]


def is_slow(block: Block) -> bool:
    return block.language == "sh" or block.is_client or "venv" in block.directives


# --- what the examples run against -------------------------------------------------------


def given_server() -> MCPServer:
    """The server object a block uses without defining it (`given=mcp`): one `echo` tool."""

    async def echo(text: str) -> str:
        """Return the given text."""
        return text

    server = MCPServer("given", version="1.0.0", log_level="WARNING")
    server.add_tool(echo, structured_output=False)
    return server


def countdown_server() -> MCPServer:
    """A fresh `MCPServer` with the docs' `countdown` tool (examples/server.py)."""
    from examples.server import countdown

    server = MCPServer("countdown", version="1.0.0", log_level="WARNING")
    server.add_tool(countdown, structured_output=False)
    return server


def client_target(kind: str) -> Counting:
    """The server a client block calls: connections closed every 300 ms, so it must resume."""
    policy = Policy(retry_ms=20, max_connection_s=0.3)
    app = countdown_server().streamable_http_app()
    if kind == "tasks":
        as_task = policy.replace(task_after_s=0, task_poll_interval_ms=100)
        return Counting(resumable(app, policy=policy, routes={"tool:countdown": as_task}, tasks=True))
    assert kind == "plain", f"unknown server={kind}"
    return Counting(resumable(app, policy=policy))


def answers_mcp(base_url: str, endpoint: str) -> None:
    """`initialize` and `tools/list` work on `endpoint`, and the answer has a stream Link."""
    with httpx.Client(base_url=base_url, timeout=20) as client:
        headers = {"accept": ACCEPT, "content-type": "application/json"}
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "docs", "version": "0"},
            },
        }
        reply = client.post(endpoint, json=init, headers=headers)
        assert reply.status_code == 200, reply.text
        assert '"serverInfo"' in reply.text, reply.text
        headers["mcp-protocol-version"] = "2025-11-25"
        if "mcp-session-id" in reply.headers:
            headers["mcp-session-id"] = reply.headers["mcp-session-id"]
        client.post(endpoint, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        listed = client.post(
            endpoint, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers
        )
        assert listed.status_code == 200, listed.text
        assert '"tools"' in listed.text, listed.text
        link = listed.headers.get("link", "")
        assert f"<{endpoint}/streams/" in link and 'rel="stream"' in link, f"not resumable: {listed.headers}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing listens on port {port} after {timeout}s")
        time.sleep(0.1)


@contextlib.contextmanager
def process_group(argv: list[str], **kwargs: Any) -> Iterator[subprocess.Popen[str]]:
    """A child in a session of its own, killed with everything it started on exit."""
    proc = subprocess.Popen(argv, start_new_session=True, text=True, **kwargs)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def mcp1_python() -> Path:
    from tests.test_mcp1_client import mcp1_python as build

    return build()


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra)
    return env


@contextlib.contextmanager
def redis_prefix_cleared(code: str) -> Iterator[None]:
    """Delete, afterwards, the keys under the `prefix=` a block gave its RedisStore."""
    prefixes = re.findall(r"prefix=\"([^\"]+)\"", code)
    try:
        yield
    finally:
        if prefixes:
            import redis

            client = redis.Redis.from_url(redis_url())
            try:
                for prefix in prefixes:
                    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
                    if keys:
                        client.delete(*keys)
            finally:
                client.close()


def exec_block(block: Block) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "doc_example"}
    given = block.directives.get("given")
    if given:
        namespace[given] = given_server()
    exec(compile(block.code, block.name, "exec"), namespace)
    return namespace


# --- the tests ---------------------------------------------------------------------------


def test_every_example_is_run_or_says_why_not() -> None:
    """No fence language lets a block escape, no directive is misspelt, every skip has a reason."""
    assert len(RUN_BLOCKS) >= 20, f"too few examples found: {len(RUN_BLOCKS)}"
    for block in ALL_BLOCKS:
        assert block.language in RUN_LANGUAGES | NOT_CODE, f"{block.name}: ```{block.language} is not run"
        unknown = set(block.directives) - KNOWN
        assert not unknown, f"{block.name}: unknown doc-test directive(s) {unknown}"
        if "skip" in block.directives:
            assert len(block.directives["skip"]) > 10, f"{block.name}: a skip needs its reason"
    ids = [b.directives["id"] for b in ALL_BLOCKS if "id" in b.directives]
    assert len(ids) == len(set(ids)), f"duplicate ids: {ids}"


@pytest.mark.parametrize("block", blocks_of("python"))
def test_python_example(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if "skip" in block.directives:
        pytest.skip(block.directives["skip"])
    if "needs" in block.directives:
        assert block.directives["needs"] == "redis"
        require_redis()
        monkeypatch.setenv("REDIS_URL", redis_url())
    if "file" in block.directives:
        compile(block.code, block.name, "exec")
        runners = [b for b in block.siblings() if b.language == "sh" and "skip" not in b.directives]
        assert runners, f"{block.name} is written to {block.directives['file']} for a sh block, but none runs"
        return  # run as that file by the page's sh block
    if block.directives.get("venv") == "mcp1":
        run_in_mcp1(block, tmp_path)
    elif block.is_client:
        run_client(block, tmp_path, sys.executable)
    else:
        with redis_prefix_cleared(block.code):
            namespace = exec_block(block)
            app = namespace.get("app")
            assert app is not None, f"{block.name} builds no `app`: say what it shows, or give it one"
            with serve_in_thread(app) as info:
                answers_mcp(info.base_url, block.directives.get("endpoint", "/mcp"))


def run_client(block: Block, tmp_path: Path, python: str | Path) -> None:
    script = tmp_path / "client.py"
    script.write_text(block.code + RUN_MAIN, encoding="utf-8")
    kind = block.directives.get("server", "plain")
    app = client_target(kind)
    with serve_in_thread(app) as info:
        proc = subprocess.run(
            [str(python), "-X", "dev", "-W", "error", str(script), info.mcp_url],
            capture_output=True,
            text=True,
            timeout=int(block.directives.get("timeout", 60)),
            cwd=tmp_path,
            env=child_env(),
        )
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr and "unclosed" not in proc.stderr, proc.stderr
    if kind == "plain":
        resumes = app.counts["GET link"] + app.counts["GET resume link"] + app.counts["GET resume"]
        assert resumes >= 1, f"the client never resumed through the server's closes: {app.counts}"


def run_in_mcp1(block: Block, tmp_path: Path) -> None:
    """mcp 1.x blocks run in the mcp 1.x venv: a client as a child, a server under its uvicorn."""
    python = mcp1_python()
    if block.is_client:
        run_client(block, tmp_path, python)
        return
    (tmp_path / "doc_server.py").write_text(block.code, encoding="utf-8")
    port = free_port()
    argv = [str(python), "-m", "uvicorn", "doc_server:app", "--port", str(port), "--log-level", "warning"]
    with process_group(argv, cwd=tmp_path, env=child_env()) as proc:
        wait_for_port(port)
        assert proc.poll() is None, "the mcp 1.x server stopped"
        answers_mcp(f"http://127.0.0.1:{port}", block.directives.get("endpoint", "/mcp"))


@pytest.mark.parametrize("block", blocks_of("sh"))
def test_shell_example(block: Block, tmp_path: Path) -> None:
    if "skip" in block.directives:
        pytest.skip(block.directives["skip"])
    env = child_env(PATH=f"{REPO_ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    if block.directives.get("needs") == "redis":
        require_redis()
        env["REDIS_URL"] = redis_url()
    files = [b for b in block.siblings() if "file" in b.directives]
    for source in files:
        (tmp_path / source.directives["file"]).write_text(source.code, encoding="utf-8")
    cwd = tmp_path if files else REPO_ROOT
    ports = {number: free_port() for number in sorted(set(PORT.findall(block.code)))}
    with contextlib.ExitStack() as stack:
        if "against" in block.directives:
            named = [b for b in block.siblings() if b.directives.get("id") == block.directives["against"]]
            assert len(named) == 1, f"{block.name}: no python block id={block.directives['against']}"
            app: ASGIApp = exec_block(named[0])["app"]
            info = stack.enter_context(serve_in_thread(app))
            ports["8000"] = info.port
        stack.enter_context(redis_prefix_cleared("".join(f.code for f in files)))
        code = PORT.sub(lambda match: str(ports[match.group(1)]), block.code)
        prelude = 'curl() { command curl --fail-with-body --show-error --max-time 30 "$@"; }\n'
        argv = ["bash", "-euo", "pipefail", "-c", prelude + code]
        # Files, not pipes: a server the block starts in the background keeps its output open.
        out = stack.enter_context((tmp_path / "stdout").open("w+"))
        err = stack.enter_context((tmp_path / "stderr").open("w+"))
        proc = stack.enter_context(process_group(argv, cwd=cwd, env=env, stdout=out, stderr=err))
        try:
            proc.wait(timeout=int(block.directives.get("timeout", 60)))
        except subprocess.TimeoutExpired:
            pytest.fail(f"{block.name} did not finish in time")
        output = (tmp_path / "stdout").read_text() + (tmp_path / "stderr").read_text()
        assert proc.returncode == 0, f"{block.name} failed ({proc.returncode}):\n{output}"
        for number in filter(None, block.directives.get("expect-mcp", "").split(",")):
            wait_for_port(ports[number])
            answers_mcp(f"http://127.0.0.1:{ports[number]}", "/mcp")


@pytest.mark.slow
def test_the_demo_runs() -> None:
    """What `bash scripts/demo.sh` execs once its venv is there: the README's first command."""
    assert "exec .venv/bin/python -m examples.demo" in (REPO_ROOT / "scripts" / "demo.sh").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "examples.demo"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env=child_env(PYTHONPATH=str(REPO_ROOT)),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "liftoff" in proc.stdout, proc.stdout
    assert "results    1 (exactly once, across the restart)" in proc.stdout, proc.stdout


def test_the_directives_are_documented() -> None:
    """docs/contributing.md lists every directive this test knows."""
    text = (REPO_ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    missing = [key for key in KNOWN if f"`{key}=" not in text and f"`<!-- doc-test: {key}=" not in text]
    assert not missing, f"docs/contributing.md does not explain {missing}"


def test_examples_json_blocks_are_json() -> None:
    """The ```json blocks (the REST call resource's shape) are valid JSON."""
    for block in ALL_BLOCKS:
        if block.language == "json":
            json.loads(block.code)
