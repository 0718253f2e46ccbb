"""The stock mcp 1.x, in a venv of its own, for the tests that need it (issue 11).

The main venv pins mcp 2.3, so mcp 1.x runs in `.cache/mcp1-venv` (mcp 1.x, httpx and
this project, editable), built once and reused while its stamp matches. The docs'
mcp 1.x examples run there (tests/test_doc_examples.py: `venv=mcp1`), and so does the
child server of tests/test_e2e_client_modern.py. Without the network to build the venv
those tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.server import REPO_ROOT
from tests.support.stores import IN_CI

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

VENV = REPO_ROOT / ".cache" / "mcp1-venv"
REQUIREMENTS = ["mcp>=1.24,<2", "httpx"]  # 1.24: streamable_http_client(url, http_client=...)


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
    """The venv's interpreter, building the venv first if its stamp does not match. Test files in
    other xdist workers need it too: one builds it, the others wait on a lock beside it (a second
    builder would delete the venv under the first)."""
    stamp = VENV / "stamp.json"
    expected = _stamp()

    def built() -> bool:
        return stamp.exists() and stamp.read_text() == expected and _python().exists()

    if built():
        return _python()
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / "mcp1-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if built():
                return _python()  # (built by another worker meanwhile)
            return _build(stamp, expected)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(stamp: Path, expected: str) -> Path:
    """(Under `mcp1_python`'s lock.)"""
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


def test_sdk_http_client_says_what_to_do_under_mcp1() -> None:
    proc = run_in_mcp1("-c", "from mcp_resume_asgi.client import sdk_http_client\nsdk_http_client()")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: sdk_http_client needs the `mcp` SDK >= 2"), proc.stderr
    assert "streamable_http_client(url, http_client=" in last and "ResumableTransport()" in last
    assert "streamablehttp_client" not in last, "the form mcp 1.24 deprecated"
