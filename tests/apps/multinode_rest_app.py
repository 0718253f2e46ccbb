"""One node of a multi-process deployment serving the REST face: `tests.apps.rest_app`, wrapped
with `rest=True` on a shared Redis store, tagged like `multinode_app` (``x-node: <pid>``).

Environment as for `multinode_app` (``MCP_RESUME_PREFIX``, ``MCP_RESUME_SECRET``,
``MCP_RESUME_POLICY_JSON``, ``MCP_RESUME_OPTIONS_JSON``), plus ``MCP_RESUME_ERA=2025-11-25`` for
the app refusing 2026-07-28 (the face then opens sessions). ``GET /__seen__`` returns what this
process's tools did: ``{"pid", "runs": {tag: n}, "cancelled": [tag, ...]}``.
"""

from __future__ import annotations

import os

from starlette.types import ASGIApp

from mcp_resume_asgi import Policy, resumable
from mcp_resume_asgi.store import RedisStore
from tests.apps.multinode_app import NodeTag, _json_env
from tests.apps.multinode_tasks_app import SeenEndpoint
from tests.apps.rest_app import CANCELLED, RUNS, legacy
from tests.apps.rest_app import create_app as create_rest_app
from tests.support.stores import redis_url


def create_app() -> SeenEndpoint:
    # Each node's app seals requestState with a key of its own process (the stock default): a
    # round advanced through the other node is relayed to the node that ran it.
    inner: ASGIApp = create_rest_app()
    if os.environ.get("MCP_RESUME_ERA") == "2025-11-25":
        inner = legacy(inner)
    app = resumable(
        inner,
        policy=Policy(**_json_env("MCP_RESUME_POLICY_JSON")),
        store=RedisStore(
            os.environ.get("MCP_RESUME_REDIS_URL") or redis_url(), prefix=os.environ["MCP_RESUME_PREFIX"]
        ),
        secret=os.environ["MCP_RESUME_SECRET"],
        rest=True,
        **_json_env("MCP_RESUME_OPTIONS_JSON"),
    )
    return SeenEndpoint(NodeTag(app), lambda: {"runs": dict(RUNS), "cancelled": CANCELLED})
