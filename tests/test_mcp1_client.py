"""The README's mcp 1.x client form works: the stock mcp 1.x client, made resumable (issue 11).

mcp 1.x talks plain httpx, so `ResumableTransport` goes in through
`streamablehttp_client(url, httpx_client_factory=...)`. The main venv pins mcp 2.3,
so the client runs in a venv of its own, `.cache/mcp1-venv` (mcp 1.x, httpx and this
project, editable), built once and reused while its stamp matches; the wrapped
server runs here, under uvicorn. Without the network to build the venv the test
skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_resume_asgi import Policy, resumable
from tests.support.counting import Counting
from tests.support.server import REPO_ROOT, serve_in_thread
from tests.support.stores import IN_CI
from tests.test_readme_snippets import RUN_MAIN, countdown_server, python_block

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

VENV = REPO_ROOT / ".cache" / "mcp1-venv"
REQUIREMENTS = ["mcp>=1.20,<2", "httpx"]


def _stamp() -> str:
    """What the venv was built from: rebuilt when any of it changes."""
    pyproject = (REPO_ROOT / "pyproject.toml").read_bytes()
    return json.dumps(
        {
            "requirements": REQUIREMENTS,
            "project": str(REPO_ROOT),
            "pyproject": hashlib.sha256(pyproject).hexdigest(),
            "python": sys.version,
        }
    )


def _python() -> Path:
    return VENV / "bin" / "python"


def mcp1_python() -> Path:
    """The venv's interpreter, building the venv first if its stamp does not match."""
    stamp = VENV / "stamp.json"
    expected = _stamp()
    if stamp.exists() and stamp.read_text() == expected and _python().exists():
        return _python()
    shutil.rmtree(VENV, ignore_errors=True)
    pip = [str(_python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    steps = [[sys.executable, "-m", "venv", str(VENV)], [*pip, *REQUIREMENTS, "-e", str(REPO_ROOT)]]
    for step in steps:
        try:
            proc = subprocess.run(step, capture_output=True, text=True, timeout=150)
        except subprocess.TimeoutExpired:
            proc = None
        if proc is None or proc.returncode != 0:
            shutil.rmtree(VENV, ignore_errors=True)
            reason = f"cannot build the mcp 1.x venv ({' '.join(step[:4])} ...): " + (
                "timed out" if proc is None else (proc.stderr.strip().splitlines() or ["?"])[-1]
            )
            if IN_CI:
                pytest.fail(f"CI=true but {reason}")
            pytest.skip(reason)
    stamp.write_text(expected)
    return _python()


def run_in_mcp1(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(mcp1_python()), *args], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, env=env
    )


def test_the_mcp1_client_snippet_calls_a_tool_through_at_will_closes(tmp_path: Path) -> None:
    script = tmp_path / "client.py"
    snippet = python_block("httpx_client_factory=resumable_http_client")
    script.write_text(snippet + RUN_MAIN, encoding="utf-8")
    version = run_in_mcp1("-c", "import importlib.metadata as m; print(m.version('mcp'))")
    assert version.returncode == 0 and version.stdout.startswith("1."), version
    # A connection closed every 300 ms: the call lasts 1 s, so the transport resumes it.
    app = Counting(
        resumable(countdown_server().streamable_http_app(), policy=Policy(retry_ms=20, max_connection_s=0.3))
    )
    with serve_in_thread(app) as info:
        proc = run_in_mcp1("-X", "dev", str(script), info.mcp_url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "liftoff", (proc.stdout, proc.stderr)
    assert "ResourceWarning" not in proc.stderr, proc.stderr
    assert app.counts["GET link"] + app.counts["GET resume link"] >= 2, f"resumed on the Link: {app.counts}"


def test_sdk_http_client_says_what_to_do_under_mcp1() -> None:
    proc = run_in_mcp1("-c", "from mcp_resume_asgi.client import sdk_http_client\nsdk_http_client()")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: sdk_http_client needs the `mcp` SDK >= 2"), proc.stderr
    assert "httpx_client_factory" in last and "ResumableTransport()" in last
