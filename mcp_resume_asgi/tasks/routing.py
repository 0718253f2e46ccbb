"""The routing headers of `tasks/*` requests: `Mcp-Name` is the task id, and must say so.

On Streamable HTTP a client sets `Mcp-Name` to `params.taskId` (and `Mcp-Method`
to the method) so that a load balancer can route the request to the node that
holds the task without reading the body. A server that reads the body must then
check that the two agree, or the balancer and the server would act on different
tasks: a mismatch, a missing header on 2026-07-28, or an undecodable value is a
`400` with `HeaderMismatch` (-32020), as the transport says.
"""

from __future__ import annotations

from typing import Any

from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.headers import decode_header_value

HEADER_MISMATCH = -32020
#: Longest task id accepted (ours are about 60 characters).
MAX_TASK_ID = 256


def task_id_of(params: dict[str, Any]) -> str | None:
    """`params.taskId` when it is a plausible task id."""
    task_id = params.get("taskId")
    if isinstance(task_id, str) and 0 < len(task_id) <= MAX_TASK_ID:
        return task_id
    return None


def routing_problem(
    version: str, method: str, task_id: str, method_headers: list[str], name_headers: list[str]
) -> str | None:
    """Why the routing headers of a `tasks/*` request do not match its body, or None."""
    modern = p.at_least(version, p.SINGLE_EXCHANGE_VERSION)
    if len(method_headers) > 1 or len(name_headers) > 1:
        return "Header mismatch: Mcp-Method and Mcp-Name may appear once each"
    if method_headers and method_headers[0] != method:
        return f"Header mismatch: Mcp-Method header value does not match body value {method!r}"
    if modern and not method_headers:
        return "Header mismatch: the Mcp-Method header is required"
    if not name_headers:
        return "Header mismatch: the Mcp-Name header is required (the task id)" if modern else None
    name = decode_header_value(name_headers[0].strip(" \t"))
    if name is None:
        return "Header mismatch: the Mcp-Name header value is not a valid header value"
    if name != task_id:
        return "Header mismatch: Mcp-Name header value does not match body value params.taskId"
    return None
