"""MCP conformance suite (@modelcontextprotocol/conformance 0.1.16) against conformance/server.py:
the whole active suite, bare and wrapped.

The test server is a stock ``mcp`` SDK server that does nothing for SEP-1699; wrapped by
``mcp_resume_asgi.resumable`` it must not lose anything the bare server passes. Needs npm
(the suite + a Node 22 are installed into .cache/conformance on first use; later runs are
offline). Without npm, or while the middleware is missing, the tests skip -- unless CI=true,
where they fail instead. The SEP-1699 scenario, the 2026-07-28 requirement set and the Tasks
scenarios are in tests/test_conformance_*.py (each run takes tens of seconds: separate files
run in parallel workers).

Run only these:  pytest -m conformance tests/test_conformance*.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance import run
from tests.support.conformance_suite import active_suite, run_or_fail

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(600), pytest.mark.slow]


@pytest.fixture(scope="module")
def suite() -> run.Suite:
    return active_suite()


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conformance")


@pytest.fixture(scope="module")
def bare_active(suite: run.Suite, work_dir: Path) -> run.RunResult:
    return run_or_fail(suite, work_dir, wrapped=False)


def test_bare_server_passes_active_suite(bare_active: run.RunResult) -> None:
    """Sanity of the harness itself: the plain SDK test server fails nothing in the active suite."""
    assert len(bare_active.statuses) >= 30, sorted(bare_active.statuses)
    assert bare_active.failures() == [], "\n".join(run.problem_lines(bare_active, verbose=True))


def test_wrapped_has_no_failure_bare_does_not_have(
    suite: run.Suite, work_dir: Path, bare_active: run.RunResult
) -> None:
    """Full active suite: wrapping must not turn any check into a FAILURE (or drop a passing one)."""
    wrapped = run_or_fail(suite, work_dir, wrapped=True)
    regressions, degradations = run.compare(bare_active, wrapped)
    assert not regressions, (
        "checks that fail behind mcp_resume_asgi but not on the bare server:\n"
        + "\n".join(regressions)
        + ("\n(degraded, SUCCESS -> WARNING/INFO:\n" + "\n".join(degradations) + ")" if degradations else "")
        + f"\nsuite output: {wrapped.stdout_path}"
    )
