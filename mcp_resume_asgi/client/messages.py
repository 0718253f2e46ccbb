"""How the transport recognises JSON-RPC messages in the bodies it carries, and writes its own.

Why apart: the transport looks inside traffic that is not its own - a POST body
to tell a request from an answer, every SSE event to spot the response that ends
a stream - and all of it is hostile input. These plain functions read it one way
everywhere: a JSON-RPC id must be a string or a non-bool integer (1 and "1" stay
apart), JSON nested too deeply is malformed rather than a crash, and what the
transport itself emits (an event re-framed from a JSON body, the error event that
ends a lost stream) is encoded one way.
"""

from __future__ import annotations

import json
from typing import Final

import httpx

from .sse_reader import encode_event

#: JSON-RPC code of the error event emitted when the stream cannot be continued.
STREAM_ERROR_CODE: Final = -32000

IdKey = tuple[str, str | int]


def id_key(value: object) -> IdKey | None:
    """A hashable key for a JSON-RPC id that keeps 1 and "1" apart (and refuses bools/null)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return ("i", value)
    if isinstance(value, str):
        return ("s", value)
    return None


def loads(data: str | bytes) -> object:
    """``json.loads`` that reports hostile input (bad JSON, absurd nesting) as ValueError."""
    try:
        return json.loads(data)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc


def is_request(message: object) -> bool:
    return (
        isinstance(message, dict)
        and isinstance(message.get("method"), str)
        and id_key(message.get("id")) is not None
    )


def is_response(message: object) -> bool:
    return (
        isinstance(message, dict)
        and "method" not in message
        and ("result" in message or "error" in message)
        and id_key(message.get("id")) is not None
    )


def media_type(response: httpx.Response) -> str:
    return str(response.headers.get("content-type", "")).partition(";")[0].strip().lower()


def message_event(message: object) -> bytes:
    """One JSON-RPC message as the SSE ``message`` event that carries it."""
    return encode_event(json.dumps(message, separators=(",", ":")), event="message")


def error_event(request_id: str | int, message: str) -> bytes:
    """The last event of a stream the transport gave up on: a JSON-RPC error for its request."""
    return message_event(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": STREAM_ERROR_CODE, "message": message}}
    )
