"""MCP conformance suite, the Tasks extension's scenarios (SEP-2663, suite release
``run.REQUIREMENTS_SUITE_VERSION``), against conformance/server.py wrapped by
``mcp_resume_asgi.resumable`` with ``tasks=True``.
See tests/support/conformance_suite.py for what the conformance files share.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance import run
from tests.support.conformance_suite import requirements_suite, run_or_fail

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(600), pytest.mark.slow]


def test_the_ten_tasks_scenarios_pass_wrapped(tmp_path: Path) -> None:
    """SEP-2663: every `tasks-*` scenario of the suite passes against a stock `MCPServer` whose
    fixture tools know nothing of tasks, wrapped with `tasks=True` (the suite itself skips
    `tasks-status-notifications`, pending its rewrite)."""
    result = run_or_fail(requirements_suite(), tmp_path, wrapped=True, scenario="tasks")
    assert sorted(result.statuses) == sorted(run.TASKS_SCENARIOS)
    assert not result.failures(), (
        "\n".join(run.problem_lines(result)) + f"\nsuite output: {result.stdout_path}"
    )
    problems = [
        (scenario, check, status)
        for scenario, checks in result.statuses.items()
        for check, status in checks.items()
        if status != "SUCCESS" and scenario != "tasks-status-notifications"
    ]
    assert not problems, problems
    assert sum(len(checks) for checks in result.statuses.values()) >= 45
