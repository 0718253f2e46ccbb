"""One trace per durable call across nodes (issue 23): a call cut on one node and resumed on the
other is one trace. Two uvicorn processes on one Redis (`tests.apps.multinode_app`), each with
the OpenTelemetry SDK writing its finished spans to a file of its own, read back here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import SECRET, TARGET
from tests.support.raw import RawSession
from tests.support.server import HOST, SubprocessServer
from tests.support.stores import delete_prefix_sync, redis_prefix, redis_url, require_redis

pytest.importorskip("opentelemetry.sdk")

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CALLER_TRACE, CALLER_SPAN = CALLER.split("-")[1:3]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_a_call_cut_on_one_node_and_resumed_on_the_other_is_one_trace(tmp_path: Path) -> None:
    require_redis()
    prefix = redis_prefix("test-multinode-trace")
    nodes = []
    try:
        for name in ("a", "b"):
            env = {
                "MCP_RESUME_PREFIX": prefix,
                "MCP_RESUME_SECRET": SECRET,
                "MCP_RESUME_REDIS_URL": redis_url(),
                "MCP_RESUME_SPANS_FILE": str(tmp_path / f"{name}.jsonl"),
            }
            server = SubprocessServer(TARGET, env=env, graceful_shutdown=0.5)
            server.start()
            nodes.append(server)
        a, b = (f"http://{HOST}:{node.info.port}" for node in nodes if node.info is not None)
        async with httpx.AsyncClient(base_url=a, timeout=30) as on_a:
            session = RawSession(on_a)
            await session.initialize()
            await session.notify("notifications/initialized")
            call = session.tool_call("slow_progress", {"seconds": 1, "steps": 5}, progress=True)
            cut = await session.exchange(
                "POST", "/mcp", call, headers=session.headers(traceparent=CALLER), stop_after=2
            )
            assert cut.headers.get("x-node") == str(nodes[0].pid)
            last = cut.last_id
            assert last is not None
        async with httpx.AsyncClient(base_url=b, timeout=30) as on_b:
            other = RawSession(on_b)
            other.session_id = session.session_id
            resumed = await other.exchange("GET", "/mcp", headers=other.headers(last_event_id=last))
            assert resumed.status == 200 and resumed.headers.get("x-node") == str(nodes[1].pid)
            assert any('"result"' in (event.data or "") for event in resumed.events), resumed.raw
    finally:
        for node in nodes:
            node.stop()
        delete_prefix_sync(redis_url(), prefix)
    on_a_spans, on_b_spans = _spans(tmp_path / "a.jsonl"), _spans(tmp_path / "b.jsonl")
    [execution] = [s for s in on_a_spans if s["name"] == "tools/call slow_progress"]
    assert execution["trace_id"] == CALLER_TRACE and execution["parent_id"] == CALLER_SPAN, (
        "the app's execution on A joins the caller's trace"
    )
    [resume] = [s for s in on_b_spans if s["name"] == "stream/resume"]
    assert resume["trace_id"] == CALLER_TRACE, "the resume on B is in the same trace"
    assert resume["parent_id"] == CALLER_SPAN and resume["links"] == [CALLER_SPAN]
    assert resume["pid"] != execution["pid"]
