"""Telemetry through OpenTelemetry's global providers (`telemetry=True`, the default), with no SDK
configured at first and one configured later, while the middleware serves (issue 21: the no-SDK
path). Until an SDK is set, nothing records a report, so the middleware builds none: no operation
(span) object for a request it answers itself, no trace context stored or joined. From the first
request after `set_tracer_provider` / `set_meter_provider`, everything is reported - spans, the
app's execution in the caller's trace, a resume linked to the request that created its stream,
metrics - and a connection attached before the SDK came is not taken back from a gauge that never
counted it.

The global providers can be set once per process: the scenario runs in a subprocess of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from mcp_resume_asgi.telemetry import NO_OPERATION, OFF, OpenTelemetry, telemetry_from
from tests.test_telemetry import Otel

ROOT = Path(__file__).resolve().parent.parent
CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
EARLY = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def _scenario() -> dict[str, Any]:
    """Run in a fresh process (`main`): what the middleware reported before and after an SDK was
    configured under it, as JSON."""
    import anyio
    import httpx
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from mcp_resume_asgi import MemoryStore, Policy, ResumeMiddleware
    from mcp_resume_asgi.telemetry import names as n
    from mcp_resume_asgi.telemetry import otel as otel_module
    from tests.apps.lowlevel_app import create_app
    from tests.support.raw import RawSession
    from tests.support.server import serve

    built: list[str] = []
    made = otel_module.OtelOperation.__init__

    def counted(self: Any, telemetry: Any, scope: Any, method: str, **kwargs: Any) -> None:
        built.append(method)
        made(self, telemetry, scope, method, **kwargs)

    otel_module.OtelOperation.__init__ = counted  # type: ignore[method-assign]
    timed: list[str] = []
    sample = otel_module.OtelTelemetry.store_operation

    def noted(self: Any, store: str, operation: str, duration_s: float, error_type: str | None) -> None:
        timed.append(operation)
        sample(self, store, operation, duration_s, error_type)

    otel_module.OtelTelemetry.store_operation = noted  # type: ignore[method-assign]

    class SharedStore(MemoryStore):
        """Stands for a store other processes reach (Redis): its calls are timed."""

        shared = True

    mw = ResumeMiddleware(
        create_app(),
        store=SharedStore(),
        secret="late-sdk-test-secret-0123456789",
        policy=Policy(retry_ms=100),
    )
    telemetry = mw.engine.port.telemetry
    out: dict[str, Any] = {"telemetry": type(telemetry).__name__}
    spans = InMemorySpanExporter()
    reader = InMemoryMetricReader()

    def count(name: str, **attributes: Any) -> float:
        data = reader.get_metrics_data()
        total = 0.0
        for resource in data.resource_metrics if data is not None else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != name:
                        continue
                    for point in metric.data.data_points:
                        if all(
                            point.attributes.get(k.replace("__", ".")) == v for k, v in attributes.items()
                        ):
                            total += point.value if hasattr(point, "value") else point.count
        return total

    async def cut_and_resume(session: RawSession, traceparent: str) -> str:
        call = session.tool_call("slow_progress", {"seconds": 0.6, "steps": 3}, progress=True)
        cut = await session.exchange(
            "POST", "/mcp", call, headers=session.headers(traceparent=traceparent), stop_after=1
        )
        assert cut.last_id is not None, cut.raw
        resumed = await session.exchange("GET", "/mcp", headers=session.headers(last_event_id=cut.last_id))
        assert resumed.status == 200 and any('"result"' in (e.data or "") for e in resumed.events), (
            resumed.raw
        )
        return cut.last_id

    async with serve(mw) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        session = RawSession(client)
        await session.initialize()
        # No SDK: the requests are served, nothing is built to report them.
        out["active_before"] = telemetry.active() is OFF
        out["operation_before"] = telemetry.operation({"headers": []}, "ping") is NO_OPERATION
        await cut_and_resume(session, EARLY)
        out["built_before"] = list(built)
        out["timed_before"] = len(timed)
        # A call attached before the SDK and let go after it (a gauge it never counted).
        long_call = session.tool_call("slow_progress", {"seconds": 1.0, "steps": 2}, progress=True)
        async with session.open("POST", "/mcp", long_call) as (_response, reader_):
            events = reader_.__aiter__()
            first = await events.__anext__()
            assert first is not None

            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(spans))
            trace.set_tracer_provider(provider)
            metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

            with anyio.fail_after(10):
                async for event in events:
                    if '"result"' in (event.data or ""):
                        break
        # The SDK is configured: the next requests are reported.
        out["active_after"] = telemetry.active() is telemetry
        await cut_and_resume(session, CALLER)
        with anyio.fail_after(10):
            while count(n.STREAMS_ATTACHED) > 0:  # (a connection is noted let go after its answer)
                await anyio.sleep(0.01)
    out["built_after"] = built[len(out["built_before"]) :]
    out["timed_after"] = len(timed) - out["timed_before"]
    out["store_samples"] = count(n.STORE_OPERATION_DURATION)
    out["attached"] = count(n.STREAMS_ATTACHED)
    out["detached"] = count(n.STREAMS_DETACHED)
    out["events"] = count(n.EVENTS_RECORDED)
    out["durations"] = count(n.OPERATION_DURATION, mcp__method__name="stream/resume")
    out["spans"] = [
        {
            "name": s.name,
            "trace_id": f"{s.context.trace_id:032x}",
            "parent_id": f"{s.parent.span_id:016x}" if s.parent is not None else None,
            "links": [f"{link.context.span_id:016x}" for link in s.links],
        }
        for s in spans.get_finished_spans()
    ]
    return out


def main() -> None:
    import anyio

    print(json.dumps(anyio.run(_scenario)))


def test_an_sdk_configured_after_the_middleware_was_built_is_used_from_its_next_request() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from tests.test_otel_late_sdk import main; main()"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["telemetry"] == "OtelTelemetry", "on by default: opentelemetry-api is installed"
    # Before: nothing would record a report, and nothing was built to make one.
    assert out["active_before"] and out["operation_before"]
    assert out["built_before"] == [], "no operation object for a resume while no SDK is configured"
    assert out["timed_before"] == 0, "no store call timed while no SDK is configured"
    # After: the resume is a span, in the caller's trace and linked to the request that created
    # the stream; the app's execution joined the caller's trace; the metrics moved.
    assert out["active_after"]
    assert out["built_after"] == ["stream/resume"]
    caller_trace, caller_span = CALLER.split("-")[1:3]
    [resume] = [s for s in out["spans"] if s["name"] == "stream/resume"]
    assert resume["trace_id"] == caller_trace and resume["parent_id"] == caller_span
    assert resume["links"] == [caller_span], "linked to its creation: the trace was stored with the stream"
    executions = [s for s in out["spans"] if s["name"] == "tools/call slow_progress"]
    assert [s["parent_id"] for s in executions if s["trace_id"] == caller_trace] == [caller_span], (
        "the app's execution joins the trace its request brought"
    )
    assert not [s for s in out["spans"] if s["trace_id"] == EARLY.split("-")[1]], "nothing of before"
    assert out["durations"] == 1
    assert out["timed_after"] > 0 and out["store_samples"] == out["timed_after"]
    assert out["events"] >= 4  # (the post-SDK call's progress and result)
    assert out["attached"] == 0, "a connection attached before the SDK is not taken back from the gauge"
    assert out["detached"] == 0


def test_providers_of_ones_own_are_always_used() -> None:
    otel = Otel()
    own = telemetry_from(otel.setting)
    assert own.active() is own
    operation = own.operation({"headers": []}, "ping")
    assert operation is not NO_OPERATION
    operation.end()
    half = telemetry_from(OpenTelemetry(tracer_provider=otel.tracer_provider))
    assert half.active() is half, "a tracer provider of its own, the global meter provider"
