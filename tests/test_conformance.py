"""MCP conformance suite (@modelcontextprotocol/conformance 0.1.16) against conformance/server.py.

The test server is a stock ``mcp`` SDK server that does nothing for SEP-1699; wrapped by
``mcp_resume_asgi.resumable`` it must pass the suite's SEP-1699 checks and must not
lose anything the bare server passes.  Needs npm (the suite + a Node 22 are installed
into .cache/conformance on first use; later runs are offline).  Without npm, or while
the middleware is missing, the tests skip -- unless CI=true, where they fail instead.

Run only these:  pytest -m conformance tests/test_conformance.py
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conformance import run

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(600), pytest.mark.slow]


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"{reason} (CI=true: not skipping)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def suite() -> run.Suite:
    if run.find_suite() is None and not run.npm_available():
        _skip_or_fail(
            "npm is not installed: the MCP conformance suite (npm @modelcontextprotocol/conformance) "
            "cannot be fetched"
        )
    try:
        return run.ensure_suite(quiet=True)
    except run.ConformanceError as exc:
        pytest.fail(f"could not install the conformance suite: {exc}")


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conformance")


def _require_middleware() -> None:
    try:
        import mcp_resume_asgi
    except ImportError as exc:  # pragma: no cover - the package is the project itself
        _skip_or_fail(f"mcp_resume_asgi not importable: {exc}")
        return
    missing = [name for name in ("resumable", "Policy") if not hasattr(mcp_resume_asgi, name)]
    if missing:
        _skip_or_fail(f"mcp_resume_asgi.{'/'.join(missing)} not implemented yet")


def _run(suite: run.Suite, work_dir: Path, *, wrapped: bool, scenario: str | None = None) -> run.RunResult:
    if wrapped:
        _require_middleware()
    try:
        return run.run_suite(
            suite, wrapped=wrapped, scenario=scenario, work_dir=work_dir / (scenario or "active")
        )
    except run.ConformanceError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def bare_active(suite: run.Suite, work_dir: Path) -> run.RunResult:
    return _run(suite, work_dir, wrapped=False)


def test_bare_server_passes_active_suite(bare_active: run.RunResult) -> None:
    """Sanity of the harness itself: the plain SDK test server fails nothing in the active suite."""
    assert len(bare_active.statuses) >= 30, sorted(bare_active.statuses)
    assert bare_active.failures() == [], "\n".join(run.problem_lines(bare_active, verbose=True))


def test_wrapped_sse_polling_priming_retry_resume(suite: run.Suite, work_dir: Path) -> None:
    """SEP-1699 via the suite's server-sse-polling: priming event, retry field, disconnect + resume."""
    result = _run(suite, work_dir, wrapped=True, scenario=run.SSE_POLLING_SCENARIO)
    statuses = result.statuses[run.SSE_POLLING_SCENARIO]
    unmet = run.check_expectations(result, run.SSE_POLLING_CHECKS)
    assert not unmet, (
        "server-sse-polling checks not SUCCESS on the wrapped server:\n"
        + "\n".join(unmet)
        + f"\nall statuses: {json.dumps(statuses)}\n"
        + "\n".join(run.problem_lines(result, verbose=True))
        + f"\nraw checks / suite output: {result.stdout_path.parent}"
    )
    assert result.failures() == [], run.problem_lines(result, verbose=True)


def test_wrapped_has_no_failure_bare_does_not_have(
    suite: run.Suite, work_dir: Path, bare_active: run.RunResult
) -> None:
    """Full active suite: wrapping must not turn any check into a FAILURE (or drop a passing one)."""
    wrapped = _run(suite, work_dir, wrapped=True)
    regressions, degradations = run.compare(bare_active, wrapped)
    assert not regressions, (
        "checks that fail behind mcp_resume_asgi but not on the bare server:\n"
        + "\n".join(regressions)
        + ("\n(degraded, SUCCESS -> WARNING/INFO:\n" + "\n".join(degradations) + ")" if degradations else "")
        + f"\nsuite output: {wrapped.stdout_path}"
    )


@pytest.fixture(scope="module")
def requirements_suite() -> run.Suite:
    """The suite release that carries the frozen 2026-07-28 requirement set."""
    cache_dir = run.DEFAULT_CACHE_DIR / "requirements"
    if run.find_suite(cache_dir, run.REQUIREMENTS_SUITE_VERSION) is None and not run.npm_available():
        _skip_or_fail("npm is not installed: the 2026-07-28 requirement set cannot be fetched")
    try:
        return run.ensure_suite(cache_dir, quiet=True, version=run.REQUIREMENTS_SUITE_VERSION)
    except run.ConformanceError as exc:
        pytest.fail(f"could not install the conformance suite: {exc}")


def test_2026_07_28_requirements_show_nothing_wrapped_they_do_not_show_bare(
    requirements_suite: run.Suite, work_dir: Path
) -> None:
    """The 2026-07-28 requirement set (issue 13): no FAILURE wrapped that bare does not have,
    no check passing bare that is missing or degraded wrapped."""
    _require_middleware()
    results = []
    for wrapped in (False, True):
        try:
            results.append(
                run.run_suite(
                    requirements_suite,
                    wrapped=wrapped,
                    requirements="2026-07-28",
                    work_dir=work_dir / "requirements-2026-07-28",
                )
            )
        except run.ConformanceError as exc:
            pytest.fail(str(exc))
    bare, wrapped_result = results
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


def test_the_ten_tasks_scenarios_pass_wrapped(requirements_suite: run.Suite, work_dir: Path) -> None:
    """SEP-2663 (issue 13 part 2): every `tasks-*` scenario of the suite passes against a stock
    `MCPServer` whose fixture tools know nothing of tasks, wrapped with `tasks=True` (the
    suite itself skips `tasks-status-notifications`, pending its rewrite)."""
    _require_middleware()
    try:
        result = run.run_suite(
            requirements_suite, wrapped=True, scenario="tasks", work_dir=work_dir / "tasks"
        )
    except run.ConformanceError as exc:
        pytest.fail(str(exc))
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
