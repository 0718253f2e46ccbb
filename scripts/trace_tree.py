"""Draw the real trace of a resumed call and of a task as text trees (for the observability guide).

`python scripts/trace_tree.py` (from the repository root, the OpenTelemetry SDK installed):
serves the test suite's apps wrapped (`tests/apps`), with the SDK's in-memory exporter as the
global tracer provider - so the app's own spans (python-sdk's) are there too - and plays:

1. a `tools/call` of the low-level app whose client is cut after two events, then resumes
   with `Last-Event-ID` until the answer;
2. a `tools/call` that becomes a task (2026-07-28), three `tasks/get` polls, and its end.

Each client request carries the caller's `traceparent` header on the call only (as an
instrumented client's first request); the polls and the resume carry none. It prints each
trace as a tree: start offset and duration (ms), kind, name, the attributes that tell which
is which, and links. Nothing is drawn by hand: the output is what the exporter holds.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import anyio
import httpx
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp_resume_asgi import MemoryStore, Policy, resumable
from mcp_resume_asgi.telemetry import names as n
from tests.apps.lowlevel_app import create_app as lowlevel_app
from tests.apps.tasks_app import create_app as tasks_app
from tests.support.raw import RawSession
from tests.support.server import serve
from tests.test_tasks import AT_ONCE, Harness, created

logger = logging.getLogger("trace_tree")

CALLER = {
    "resumed": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "task": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
}
SHOWN = (
    "mcp.method.name",
    "gen_ai.tool.name",
    "http.response.status_code",
    n.ATTR_POLL,
    n.ATTR_TASK_ID,
    n.ATTR_STREAM_ID,
)


async def resumed_call() -> None:
    app = resumable(lowlevel_app(), store=MemoryStore(), policy=Policy(retry_ms=100))
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        session = RawSession(client)
        await session.initialize()
        await session.notify("notifications/initialized")
        call = session.tool_call("slow_progress", {"seconds": 0.6, "steps": 4}, progress=True)
        cut = await session.exchange(
            "POST", "/mcp", call, headers=session.headers(traceparent=CALLER["resumed"]), stop_after=2
        )
        last = cut.last_id
        assert last is not None, "the stream has event ids"
        resumed = await session.exchange("GET", "/mcp", headers=session.headers(last_event_id=last))
        assert any('"result"' in (e.data or "") for e in resumed.events), resumed.raw


async def task() -> None:
    app = resumable(tasks_app(), policy=AT_ONCE, store=MemoryStore(), tasks=True)
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=15) as client:
        h = Harness(client, MemoryStore(), app)
        task_id = created(await h.call("slow", {"seconds": 0.5, "tag": "traced"}, traceparent=CALLER["task"]))
        for _ in range(3):
            await h.get(task_id)
        await anyio.sleep(0.6)
        assert (await h.get(task_id))["status"] == "completed"


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 14 else text[:10] + "..."


def tree(spans: list[ReadableSpan], trace_id: int) -> list[str]:
    mine = sorted((s for s in spans if s.context.trace_id == trace_id), key=lambda s: s.start_time or 0)
    ids = {s.context.span_id for s in mine}
    t0 = min(s.start_time or 0 for s in mine)
    children: dict[int | None, list[ReadableSpan]] = {}
    for s in mine:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        children.setdefault(parent, []).append(s)
    lines = [f"trace {trace_id:032x}"]

    def walk(parent: int | None, depth: int) -> None:
        for s in children.get(parent, []):
            start = ((s.start_time or 0) - t0) / 1e6
            took = ((s.end_time or 0) - (s.start_time or 0)) / 1e6
            attributes = dict(s.attributes or {})
            shown = " ".join(
                f"{k}={_short(attributes[k])}" for k in SHOWN if k in attributes and k != "mcp.method.name"
            )
            remote = " (parent: the caller's span)" if parent is None and s.parent is not None else ""
            lines.append(
                f"{start:8.1f} ms {took:8.1f} ms  {'  ' * depth}{s.kind.name:<8} {s.name}{remote}"
                + (f"  [{shown}]" if shown else "")
            )
            for link in s.links:
                role = (link.attributes or {}).get(n.ATTR_LINK_ROLE)
                lines.append(f"{'':22}{'  ' * depth}  -> link {role}: span {link.context.span_id:016x}")
            walk(s.context.span_id, depth + 1)

    walk(None, 0)
    return lines


async def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    out: dict[str, list[str]] = {}
    for name, play in (("resumed", resumed_call), ("task", task)):
        exporter.clear()
        await play()
        spans = list(exporter.get_finished_spans())
        out[name] = tree(spans, int(CALLER[name].split("-")[1], 16))
        others = {s.context.trace_id for s in spans} - {int(CALLER[name].split("-")[1], 16)}
        out[name].append(f"(other traces in this run: {len(others)})")
    for name, lines in out.items():
        print(f"## {name}")
        print("\n".join(lines))


if __name__ == "__main__":
    anyio.run(main)
