"""What a request names cannot open metric series: `mcp.server.operation.duration` carries
only known protocol revisions, known methods and the app's own tool names (the rest `_OTHER`),
and a refused request records nothing of its caller's choosing - read with the real
OpenTelemetry SDK (`InMemoryMetricReader`) under a real server, a stock `MCPServer` behind the
SDK's bearer auth with the REST face.
"""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk")

from mcp_resume_asgi import MemoryStore, Policy, resumable
from mcp_resume_asgi.telemetry import names as n
from tests.apps.auth_app import create_app
from tests.support.server import serve_in_loop
from tests.test_telemetry import Otel

pytestmark = pytest.mark.anyio

ALICE = {"authorization": "Bearer token-alice"}
#: Distinct hostile values of each kind (the campaign sent 5,000; the SDK caps a metric at 2,000).
FLOOD = 150
MARK = "evil"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _version(i: int) -> str:
    """A well-formed revision nobody published: the header's syntax does not make it known."""
    return f"{3000 + i:04d}-01-01"


async def _flood(client: httpx.AsyncClient) -> None:
    for i in range(FLOOD):
        tool, version = f"{MARK}-tool-{i}", {"mcp-protocol-version": _version(i)}
        # No credentials: the app's 401, on every call route.
        url = f"/mcp/tools/{tool}/calls/{MARK}-call-{i}"
        assert (await client.get(url, headers=version)).status_code == 401
        put = await client.put(url, json={}, headers={**version, "idempotency-key": f"k{i}"})
        assert put.status_code == 401
        assert (await client.post(f"{url}/cancel", headers=version)).status_code == 401
        # A caller the app knows, on tools it has not: 404 for a call, and an empty list (a 200).
        assert (await client.get(url, headers={**ALICE, **version})).status_code == 404
        listed = await client.get(f"/mcp/tools/{tool}/calls", headers={**ALICE, **version})
        assert listed.status_code == 200 and listed.json() == {"calls": []}


async def test_a_flood_of_hostile_names_opens_a_bounded_number_of_series_and_none_of_its_values() -> None:
    otel = Otel()
    app = resumable(
        create_app(),
        policy=Policy(task_poll_interval_ms=100),
        store=MemoryStore(),
        rest=True,
        telemetry=otel.setting,
    )
    async with serve_in_loop(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=20) as client:
        # The app's own tool, called for real: its name labels the series.
        url = "/mcp/tools/whoami/calls/w1"
        headers = {**ALICE, "mcp-protocol-version": "2026-07-28"}
        put = await client.put(
            url, json={"seconds": 0.1, "steps": 1}, headers={**headers, "idempotency-key": "k"}
        )
        assert put.status_code in (200, 201), put.text
        assert (await client.get(url, headers=headers)).status_code == 200
        await _flood(client)
        assert (await client.get(url, headers=headers)).status_code == 200
    points = otel.points(n.OPERATION_DURATION)
    assert sum(point.count for point in points) >= 5 * FLOOD, "every request was measured"
    # A handful of series (method x version x tool x error), whatever the flood named.
    assert len(points) <= 40, len(points)
    for point in points:
        attributes = dict(point.attributes)
        assert MARK not in str(attributes), attributes
        assert attributes.get("mcp.protocol.version", n.OTHER) in n.PROTOCOL_VERSIONS | {n.OTHER}
        assert attributes["mcp.method.name"] in n.METHODS
        assert attributes.get("gen_ai.tool.name", "whoami") in ("whoami", n.OTHER)
    assert otel.count(n.OPERATION_DURATION, gen_ai__tool__name="whoami") >= 3
    assert otel.count(n.OPERATION_DURATION, gen_ai__tool__name=n.OTHER) >= 5 * FLOOD
    assert otel.count(n.OPERATION_DURATION, mcp__protocol__version="2026-07-28") >= 3
    # The spans of the refused requests carry none of it either (a span-to-metrics pipeline would).
    for span in otel.finished():
        assert MARK not in span.name, span.name
        assert MARK not in str(span.attributes.get("gen_ai.tool.name")), span.name


async def test_a_hostile_method_is_other() -> None:
    """A method the middleware answers itself on a request's word (an `Idempotency-Key` retry
    answered from the store) is `_OTHER` when it is no MCP method."""
    from mcp_resume_asgi.telemetry import telemetry_from

    otel = Otel()
    telemetry = telemetry_from(otel.setting)
    scope = {"type": "http", "headers": [(b"mcp-protocol-version", b"2999-12-31")], "http_version": "1.1"}
    for i in range(50):
        with telemetry.operation(scope, f"{MARK}/method-{i}", tool=f"{MARK}-{i}", version=_version(i)):
            pass
    [point] = otel.points(n.OPERATION_DURATION)
    assert dict(point.attributes)["mcp.method.name"] == n.OTHER and point.count == 50
    assert MARK not in str(dict(point.attributes))
