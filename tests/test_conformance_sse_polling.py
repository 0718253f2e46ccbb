"""MCP conformance suite (@modelcontextprotocol/conformance 0.1.16), scenario server-sse-polling,
against conformance/server.py wrapped by ``mcp_resume_asgi.resumable``: SEP-1699's priming
event, retry field, and disconnect + resume (the stock SDK server does none of them).
See tests/support/conformance_suite.py for what the conformance files share.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance import run
from tests.support.conformance_suite import active_suite, run_or_fail

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(600), pytest.mark.slow]


def test_wrapped_sse_polling_priming_retry_resume(tmp_path: Path) -> None:
    """SEP-1699 via the suite's server-sse-polling: priming event, retry field, disconnect + resume."""
    result = run_or_fail(active_suite(), tmp_path, wrapped=True, scenario=run.SSE_POLLING_SCENARIO)
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
