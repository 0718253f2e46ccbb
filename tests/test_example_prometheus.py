"""`examples/prometheus_metrics.py`: a scrape over HTTP finds the middleware's metrics."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.prometheus")

from tests.support.raw import RawSession
from tests.support.server import serve

pytestmark = pytest.mark.anyio


async def test_prometheus_scrapes_the_middlewares_metrics_over_http() -> None:
    from examples.prometheus_metrics import app

    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        assert info.base_url.startswith("http://127.0.0.1:")
        session = RawSession(client)
        await session.initialize()
        # Counters are cumulative for the process (the tallies of the global meter provider:
        # other tests in this process may have counted too): what moves is what this test did.
        before = refused_total((await client.get("/metrics")).text.splitlines())
        refused = await client.get(
            "/mcp", headers={**session.headers(), "accept": "text/event-stream", "last-event-id": "forged"}
        )
        assert refused.status_code == 400
        scrape = await client.get("/metrics")
        assert scrape.status_code == 200
        assert scrape.headers["content-type"].startswith("text/plain")
        lines = scrape.text.splitlines()
    assert refused_total(lines) == before + 1, [line for line in lines if "resumes_total" in line]
    durations = [line for line in lines if line.startswith("mcp_server_operation_duration_seconds_count{")]
    assert any(
        'mcp_method_name="stream/resume"' in line and 'error_type="-32600"' in line for line in durations
    )
    assert not any(line.startswith("mcp_resume_store_operation_duration_seconds") for line in lines), (
        "its memory store is not timed (a store shared across nodes, as Redis, is)"
    )
    buckets = [line for line in lines if line.startswith("mcp_server_operation_duration_seconds_bucket{")]
    assert any('le="0.01"' in line for line in buckets) and any('le="300.0"' in line for line in buckets)


def refused_total(lines: list[str]) -> float:
    """The scrape's count of refused resumes (0 before the first)."""
    for line in lines:
        if line.startswith("mcp_resume_resumes_total{") and 'mcp_resume_resume_outcome="refused"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
