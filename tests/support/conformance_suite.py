"""What the conformance test files share: the installed suites, and a run that fails the test
(never errors) when the harness cannot run.

The MCP conformance suite (@modelcontextprotocol/conformance, `conformance/run.py`) runs as an
npm process against conformance/server.py, bare or wrapped by `mcp_resume_asgi.resumable`.
Each run takes tens of seconds, so the runs are spread over several test files
(tests/test_conformance*.py) that xdist hands to different workers. Without npm, or while the
middleware is missing, the tests skip -- unless CI=true, where they fail instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance import run
from tests.support.timing import scaled


def skip_or_fail(reason: str) -> None:
    """Skip the test, or fail it under CI=true (where every conformance test must run)."""
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"{reason} (CI=true: not skipping)")
    pytest.skip(reason)


def require_middleware() -> None:
    """Skip (or fail, under CI=true) when `mcp_resume_asgi` lacks what wrapping needs."""
    try:
        import mcp_resume_asgi
    except ImportError as exc:  # pragma: no cover - the package is the project itself
        skip_or_fail(f"mcp_resume_asgi not importable: {exc}")
        return
    missing = [name for name in ("resumable", "Policy") if not hasattr(mcp_resume_asgi, name)]
    if missing:
        skip_or_fail(f"mcp_resume_asgi.{'/'.join(missing)} not implemented yet")


def active_suite() -> run.Suite:
    """The suite release of the active suite and its scenarios, installed on first use."""
    if run.find_suite() is None and not run.npm_available():
        skip_or_fail(
            "npm is not installed: the MCP conformance suite (npm @modelcontextprotocol/conformance) "
            "cannot be fetched"
        )
    try:
        return run.ensure_suite(quiet=True)
    except run.ConformanceError as exc:
        pytest.fail(f"could not install the conformance suite: {exc}")


def requirements_suite() -> run.Suite:
    """The suite release that carries the frozen 2026-07-28 requirement set (and the Tasks
    scenarios), installed on first use."""
    cache_dir = run.DEFAULT_CACHE_DIR / "requirements"
    if run.find_suite(cache_dir, run.REQUIREMENTS_SUITE_VERSION) is None and not run.npm_available():
        skip_or_fail("npm is not installed: the 2026-07-28 requirement set cannot be fetched")
    try:
        return run.ensure_suite(cache_dir, quiet=True, version=run.REQUIREMENTS_SUITE_VERSION)
    except run.ConformanceError as exc:
        pytest.fail(f"could not install the conformance suite: {exc}")


def run_or_fail(
    suite: run.Suite,
    work_dir: Path,
    *,
    wrapped: bool,
    scenario: str | None = None,
    requirements: str | None = None,
) -> run.RunResult:
    """One run of `suite` against the bare or the wrapped server, in its own folder of `work_dir`;
    the server's start-up is given `scaled` time (a loaded machine imports the SDK slowly)."""
    if wrapped:
        require_middleware()
    folder = work_dir / (scenario or (f"requirements-{requirements}" if requirements else "active"))
    try:
        return run.run_suite(
            suite,
            wrapped=wrapped,
            scenario=scenario,
            requirements=requirements,
            work_dir=folder,
            startup_timeout=scaled(20.0),
        )
    except run.ConformanceError as exc:
        pytest.fail(str(exc))
