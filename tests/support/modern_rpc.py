"""2026-07-28 JSON-RPC requests to the multi-node harness, one connection each, steered to a node."""

from __future__ import annotations

import json
from typing import Any

import httpx

from mcp_resume_asgi.client.tasks import TASKS_EXTENSION
from tests.support.cluster import pid_of, port_of, steer
from tests.support.proxy import CutProxy
from tests.support.server import SubprocessServer

__all__ = ["MODERN", "Raw"]

MODERN = "2026-07-28"


class Raw:
    """2026-07-28 requests over a new connection each, optionally steered to one node."""

    def __init__(self, proxy: CutProxy) -> None:
        self.proxy = proxy
        self.client = httpx.AsyncClient(
            base_url=proxy.base_url, timeout=15, limits=httpx.Limits(max_keepalive_connections=0)
        )
        self.next_id = 0

    async def rpc(
        self,
        method: str,
        params: dict[str, Any],
        name: str,
        to: SubprocessServer | None = None,
        capabilities: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], int]:
        """The JSON-RPC answer and the pid of the node that gave it."""
        self.next_id += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": capabilities
            or {"extensions": {TASKS_EXTENSION: {}}},
        }
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": meta}}
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MODERN,
            "mcp-method": method,
            "mcp-name": name,
        }
        if to is not None:
            await steer(self.proxy, port_of(to))
        response = await self.client.post("/mcp", json=body, headers=headers)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            datas = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
            answers = [json.loads(d) for d in datas if d]
            answer = next(a for a in answers if a.get("id") == body["id"])
        else:
            answer = response.json()
        assert answer.get("id") == body["id"], answer
        return answer, int(response.headers["x-node"])

    async def get(self, task_id: str, to: SubprocessServer) -> tuple[dict[str, Any], int]:
        answer, node = await self.rpc("tasks/get", {"taskId": task_id}, task_id, to)
        return answer["result"], node

    async def seen(self, server: SubprocessServer) -> dict[str, Any]:
        assert server.info is not None
        response = await self.client.get(f"http://127.0.0.1:{port_of(server)}/__seen__")
        seen: dict[str, Any] = response.json()
        assert seen["pid"] == pid_of(server)
        return seen
