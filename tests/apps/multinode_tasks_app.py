"""One node of a multi-process deployment serving tasks: `tests.apps.tasks_app`, wrapped with
`tasks=True` on a shared Redis store, tagged like `multinode_app` (``x-node: <pid>``).

Environment as for `multinode_app` (``MCP_RESUME_PREFIX``, ``MCP_RESUME_SECRET``,
``MCP_RESUME_POLICY_JSON``, ``MCP_RESUME_OPTIONS_JSON``). ``GET /__seen__`` returns what
this process's slow tool saw (``{"pid", "started", "finished", "cancelled"}`` by tag), so a
test can tell on which node a tool ran and whether it stopped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.store import RedisStore
from tests.apps.multinode_app import NodeTag, _json_env
from tests.apps.tasks_app import SEEN
from tests.apps.tasks_app import create_app as create_tasks_app
from tests.support.stores import redis_url

SEEN_PATH = "/__seen__"


class SeenEndpoint:
    """Answers ``GET /__seen__`` itself with `report()` (and the pid); everything else goes to the node."""

    def __init__(self, app: ASGIApp, report: Callable[[], dict[str, Any]]) -> None:
        self.app = app
        self.report = report

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != SEEN_PATH:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"pid": os.getpid(), **self.report()}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _seen() -> dict[str, Any]:
    return {"started": SEEN.started, "finished": SEEN.finished, "cancelled": SEEN.cancelled}


def create_app() -> SeenEndpoint:
    app = resumable(
        create_tasks_app(),
        policy=Policy(**_json_env("MCP_RESUME_POLICY_JSON")),
        store=RedisStore(
            os.environ.get("MCP_RESUME_REDIS_URL") or redis_url(), prefix=os.environ["MCP_RESUME_PREFIX"]
        ),
        secret=os.environ["MCP_RESUME_SECRET"],
        tasks=True,
        **_json_env("MCP_RESUME_OPTIONS_JSON"),
    )
    return SeenEndpoint(NodeTag(app), _seen)
