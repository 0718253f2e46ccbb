"""A resumable MCP server whose metrics Prometheus scrapes on `/metrics`.

The middleware reports through OpenTelemetry (`pip install 'mcp-resume-asgi[otel]'`); here the
OpenTelemetry SDK's meter provider exports them with the Prometheus exporter
(`pip install opentelemetry-sdk opentelemetry-exporter-prometheus`), served beside the MCP
endpoint by `prometheus_client`. Run it with:

    uvicorn examples.prometheus_metrics:app --port 8000

then `curl http://127.0.0.1:8000/metrics`: `mcp_server_operation_duration_seconds`,
`mcp_resume_resumes_total`, ... (the table of docs/guides/observability.md, with Prometheus's
spelling of the names; `mcp_resume_store_operation_duration_seconds` with a shared store, as Redis).
"""

from opentelemetry import metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import make_asgi_app
from starlette.types import Receive, Scope, Send

from examples.server import server
from mcp_resume_asgi import Policy, resumable

# The global meter provider, as an application configures it once at startup: the middleware
# (and anything else instrumented) reports through it with no further code.
metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))

mcp_app = resumable(server.streamable_http_app(), policy=Policy(retry_ms=300, max_connection_s=2.0))
metrics_app = make_asgi_app()


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """`/metrics` for Prometheus; everything else (the lifespan too) is the MCP app's."""
    if scope["type"] == "http" and scope["path"].rstrip("/") == "/metrics":
        await metrics_app(scope, receive, send)
        return
    await mcp_app(scope, receive, send)
