"""The REST face's calls belong to their principal (issue 14): a stock `MCPServer` behind the
SDK's own bearer auth (`tests/apps/auth_app.py`: alice and bob, two users of one OAuth client),
wrapped with `rest=True`, under uvicorn. The face has no auth of its own: who calls is what the
app's auth says, as for its MCP clients, so another principal's call is a 404 on every route,
the same call id is another call for another principal, and no credentials is the app's 401.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from mcp_resume_asgi import MemoryStore, Policy, resumable
from tests.apps.auth_app import create_app
from tests.apps.rest_app import legacy
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

ALICE = {"authorization": "Bearer token-alice"}
ALICE_AGAIN = {"authorization": "Bearer token-alice-refreshed"}
BOB = {"authorization": "Bearer token-bob"}


@contextlib.asynccontextmanager
async def face(era: str) -> AsyncIterator[httpx.AsyncClient]:
    from tests.support.server import serve_in_loop

    inner = create_app()
    app = resumable(
        inner if era == "2026-07-28" else legacy(inner),
        policy=Policy(task_poll_interval_ms=100),
        store=MemoryStore(),
        rest=True,
    )
    async with serve_in_loop(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=20) as client:
        yield client


async def finished(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> dict[str, object]:
    with anyio.fail_after(scaled(10)):
        while True:
            state: dict[str, object] = (await client.get(url, headers=headers)).json()
            if state["status"] != "running":
                return state
            await anyio.sleep(0.1)


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
@pytest.mark.slow
async def test_another_principals_call_is_not_found_on_every_route(era: str) -> None:
    async with face(era) as client:
        url = "/mcp/tools/whoami/calls/w1"
        body = {"seconds": 0.3, "steps": 3}
        mine = await client.put(url, json=body, headers={**ALICE, "idempotency-key": "k1"})
        assert mine.status_code == 201, mine.text
        alices = await finished(client, url, ALICE)
        assert alices["status"] == "success" and "the secret of alice" in str(alices["result"])
        # Bob, with the same call id: not found, whatever he does with it.
        assert (await client.get(url, headers=BOB)).status_code == 404
        assert (
            await client.get(url, headers={**BOB, "if-none-match": mine.headers["etag"]})
        ).status_code == 404
        assert (await client.post(f"{url}/cancel", headers=BOB)).status_code == 404
        advance = await client.post(
            f"{url}/advance", json={"action": "accept"}, headers={**BOB, "if-match": "*"}
        )
        assert advance.status_code == 404
        assert (await client.get("/mcp/tools/whoami/calls", headers=BOB)).json() == {"calls": []}
        # The same id and key from bob is bob's own call, not a retry of alice's (nor a 409).
        his = await client.put(url, json=body, headers={**BOB, "idempotency-key": "k1"})
        assert his.status_code == 201, his.text
        bobs = await finished(client, url, BOB)
        assert "the secret of bob" in str(bobs["result"]) and "alice" not in str(bobs)
        # Alice's call is untouched, and hers with a refreshed token of the same identity.
        assert (await client.get(url, headers=ALICE)).json() == alices
        assert (await client.get(url, headers=ALICE_AGAIN)).json() == alices
        listed = (await client.get("/mcp/tools/whoami/calls", headers=ALICE)).json()["calls"]
        assert [c["id"] for c in listed] == ["w1"]


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
async def test_no_credentials_is_the_apps_401_with_its_challenge(era: str) -> None:
    async with face(era) as client:
        for response in (
            await client.get("/mcp/tools"),
            await client.put("/mcp/tools/whoami/calls/w2", json={}, headers={"idempotency-key": "k"}),
            await client.get("/mcp/tools/whoami/calls/w2"),
            await client.get("/mcp/tools/whoami/calls", headers={"authorization": "Bearer forged"}),
        ):
            assert response.status_code == 401, response.text
            assert response.headers["content-type"] == "application/problem+json"
            assert response.headers["www-authenticate"].startswith("Bearer")
