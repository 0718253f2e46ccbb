"""The README's set-up snippets run as written (issue 11).

Each test takes a ```python block out of README.md, runs it, and checks that what it
builds works: the Starlette and FastAPI mounts answer MCP requests resumably (which
needs the session manager's lifespan they show), and the SDK client snippet leaves
no socket behind. `RedisStore` is importable from the top level, as the README
writes it, without `import mcp_resume_asgi` importing redis.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp

from mcp_resume_asgi import Policy, resumable
from tests.apps.mcpserver_app import create_server
from tests.support.raw import RawSession
from tests.support.server import REPO_ROOT, serve, serve_in_thread

pytestmark = pytest.mark.timeout(60)

README = REPO_ROOT / "README.md"
RUN_MAIN = (
    "\n\nif __name__ == '__main__':\n    import sys\n\n    import anyio\n\n    anyio.run(main, sys.argv[1])\n"
)
"""Appended to a README client snippet (an `async def main(url)`) to run it as a script."""


def python_block(containing: str) -> str:
    """The one ```python block of README.md that contains `containing`."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"README.md should have one python block containing {containing!r}: {len(found)}"
    return found[0]


def run_block(containing: str, **names: Any) -> dict[str, Any]:
    namespace: dict[str, Any] = dict(names)
    exec(compile(python_block(containing), f"README.md[{containing}]", "exec"), namespace)
    return namespace


def countdown_server() -> MCPServer:
    """A fresh `MCPServer` with the README's `countdown` tool (examples/server.py)."""
    from examples.server import countdown

    server = MCPServer("countdown", version="1.0.0", log_level="WARNING")
    server.add_tool(countdown, structured_output=False)
    return server


async def answers_resumably(app: ASGIApp, endpoint: str) -> None:
    """`initialize` and a tool call on `endpoint` work, and the call's answer has a stream Link."""
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=10) as client:
        s = RawSession(client, path=endpoint)
        init = await s.initialize()
        assert init.status == 200, init.raw
        reply = await s.exchange("POST", endpoint, s.tool_call("echo", {"text": "hi"}))
        assert reply.status == 200, reply.raw
        assert reply.messages()[-1]["result"]["content"][0]["text"] == "hi"
        assert reply.link and reply.link.startswith(f"{endpoint}/streams/"), "the middleware handled it"
        again = await s.exchange("GET", reply.link, headers=s.headers(last_event_id=reply.events[0].id))
        assert again.messages()[-1]["result"]["content"][0]["text"] == "hi", "resumed through the Link"


@pytest.mark.anyio
async def test_the_starlette_mount_snippet_answers_resumably() -> None:
    namespace = run_block("from starlette.routing import Mount", mcp=create_server())
    await answers_resumably(namespace["app"], "/tools/mcp")


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_fastapi_mount_snippet_answers_resumably() -> None:
    pytest.importorskip("fastapi", reason="fastapi is not installed (it is in the `test` extra)")
    namespace = run_block("from fastapi import FastAPI", mcp=create_server())
    await answers_resumably(namespace["app"], "/tools/mcp")


@pytest.mark.slow
def test_the_sdk_client_snippet_leaves_no_socket_behind(tmp_path: Path) -> None:
    """Run with `-X dev -W error`: a client left open is a ResourceWarning on stderr."""
    script = tmp_path / "client.py"
    script.write_text(python_block("sdk_http_client() as http") + RUN_MAIN, encoding="utf-8")
    app = resumable(
        countdown_server().streamable_http_app(), policy=Policy(retry_ms=20, max_connection_s=0.3)
    )
    with serve_in_thread(app) as info:
        proc = subprocess.run(
            [sys.executable, "-X", "dev", "-W", "error", str(script), info.mcp_url],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "liftoff"
    assert "ResourceWarning" not in proc.stderr and "unclosed" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_redis_store_is_top_level_and_imported_lazily() -> None:
    import mcp_resume_asgi
    from mcp_resume_asgi.store import RedisStore

    assert "RedisStore" in mcp_resume_asgi.__all__
    assert mcp_resume_asgi.RedisStore is RedisStore
    check = (
        "import sys, mcp_resume_asgi\n"
        "assert 'redis' not in sys.modules, 'import mcp_resume_asgi imported redis'\n"
        "from mcp_resume_asgi import RedisStore\n"
        "assert 'redis' in sys.modules and RedisStore.__module__ == 'mcp_resume_asgi.store.redis'\n"
    )
    subprocess.run([sys.executable, "-c", check], check=True, cwd=REPO_ROOT, timeout=60)


@pytest.mark.slow
def test_without_redis_the_top_level_import_says_what_to_install() -> None:
    check = (
        "import sys\n"
        "class NoRedis:  # as if redis were not installed\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'redis':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoRedis())\n"
        "import mcp_resume_asgi\n"
        "try:\n"
        "    from mcp_resume_asgi import RedisStore\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'mcp-resume-asgi[redis]'" in proc.stdout
