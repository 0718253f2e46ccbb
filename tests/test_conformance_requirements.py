"""MCP conformance suite, the frozen 2026-07-28 requirement set (suite release
``run.REQUIREMENTS_SUITE_VERSION``), against conformance/server.py bare and wrapped by
``mcp_resume_asgi.resumable`` with ``tasks=True``.
See tests/support/conformance_suite.py for what the conformance files share.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conformance import run
from tests.support.conformance_suite import require_middleware, requirements_suite, run_or_fail

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(600), pytest.mark.slow]


def test_2026_07_28_requirements_show_nothing_wrapped_they_do_not_show_bare(tmp_path: Path) -> None:
    """The 2026-07-28 requirement set: no FAILURE wrapped that bare does not have, no check
    passing bare that is missing or degraded wrapped."""
    require_middleware()
    suite = requirements_suite()
    bare, wrapped_result = (
        run_or_fail(suite, tmp_path, wrapped=wrapped, requirements="2026-07-28") for wrapped in (False, True)
    )
    assert len(bare.statuses) >= 40, sorted(bare.statuses)
    regressions, degradations = run.compare(bare, wrapped_result)
    assert not regressions and not degradations, "\n".join(
        [*regressions, *degradations, f"suite output: {wrapped_result.stdout_path}"]
    )
    # Wrapped with `tasks=True`, the set's Tasks scenarios pass too (bare, the SDK has no tasks):
    # more passed, fewer failed, nothing else changed (the comparison above).
    passed, failed = _totals(wrapped_result)
    bare_passed, bare_failed = _totals(bare)
    assert passed > bare_passed and failed < bare_failed, (
        run.suite_totals(wrapped_result),
        run.suite_totals(bare),
    )
    tasks_failures = [f for f in wrapped_result.failures() if f[0].startswith("tasks-")]
    assert not tasks_failures, tasks_failures


def _totals(result: run.RunResult) -> tuple[int, int]:
    line = run.suite_totals(result) or ""
    match = re.search(r"Total: (\d+) passed, (\d+) failed", line)
    assert match is not None, line
    return int(match.group(1)), int(match.group(2))
