"""Recorded events given to another request: the same answer, addressed to the request that
asks for it now.

A recorded call can be asked for again by a request of its own - a re-issued request that
presents a resume token (`features/resume_tokens.py`), a retry that presents a hand-over's
`requestState` (`engine/mrtr.py`) - whose JSON-RPC id and progress token are not the ones
the events were recorded with. `readdressed` rewrites one recorded event frame for it: the
answer (a response or an error) takes the new id, a progress notification the new progress
token. Anything else - another message, a frame that is not one JSON object - passes as it is.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.sse import SSEParser, encode_payload

__all__ = ["ANY_ID", "readdressed"]

#: `answer_of`: any response or error is the answer (the stream answers one request).
ANY_ID: Any = object()


def readdressed(
    payload: bytes,
    *,
    answer_id: Any,
    answer_of: Any = ANY_ID,
    progress_token: Any = None,
    drop_other_progress: bool = False,
) -> bytes:
    """`payload` (one recorded SSE event) addressed to another request: a response or error
    whose id is `answer_of` (`ANY_ID`: any) gets `answer_id`; a `notifications/progress` gets
    `progress_token` - or, without one, is dropped (b"") when `drop_other_progress`, else left
    as recorded."""
    events = SSEParser().feed(payload)
    if len(events) != 1 or not events[0].data:
        return payload
    try:
        message = json.loads(events[0].data)
    except ValueError:
        return payload
    if not isinstance(message, dict):
        return payload
    if "method" not in message and ("result" in message or "error" in message):
        if answer_of is not ANY_ID and message.get("id") != answer_of:
            return payload
        message["id"] = answer_id
    elif message.get("method") == "notifications/progress":
        if progress_token is None:
            return b"" if drop_other_progress else payload
        params = message.get("params")
        if not isinstance(params, dict):
            return payload
        params["progressToken"] = progress_token
    else:
        return payload
    return encode_payload(p.dumps(message), events[0].event)
