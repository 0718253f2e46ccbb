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
        refused = await client.get(
            "/mcp", headers={**session.headers(), "accept": "text/event-stream", "last-event-id": "forged"}
        )
        assert refused.status_code == 400
        scrape = await client.get("/metrics")
        assert scrape.status_code == 200
        assert scrape.headers["content-type"].startswith("text/plain")
        lines = scrape.text.splitlines()
    refused_count = [line for line in lines if line.startswith("mcp_resume_resumes_total{")]
    assert any(
        'mcp_resume_resume_outcome="refused"' in line and line.endswith(" 1.0") for line in refused_count
    ), refused_count
    durations = [line for line in lines if line.startswith("mcp_server_operation_duration_seconds_count{")]
    assert any(
        'mcp_method_name="stream/resume"' in line and 'error_type="-32600"' in line for line in durations
    )
    assert any(line.startswith("mcp_resume_store_operation_duration_seconds_bucket{") for line in lines)
    buckets = [line for line in lines if line.startswith("mcp_server_operation_duration_seconds_bucket{")]
    assert any('le="0.01"' in line for line in buckets) and any('le="300.0"' in line for line in buckets)
