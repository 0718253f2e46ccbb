"""Reading one HTTP answer of `ResumableSession` into the JSON-RPC response it carries.

Why apart from the session: how an answer is framed (a JSON body, an SSE stream,
an error status with or without a JSON-RPC error) is the same for every request,
and bounded the same way against a hostile server; the session only says what to
do with the other messages met on the way (`dispatch`) and which response it
waits for.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Final, NoReturn

import httpx

from .errors import McpError, SessionError
from .sse_reader import SSEError, SSEParser, closing_iterator

INTERNAL_ERROR: Final = -32603

JSONObject = dict[str, Any]
#: `(message, request id) -> the message if it is that request's response, else None`.
Dispatch = Callable[[Any, int], Awaitable[JSONObject | None]]


async def read_bounded(response: httpx.Response, limit: int) -> bytes:
    body = bytearray()
    async with closing_iterator(response.aiter_bytes()) as chunks:
        async for chunk in chunks:
            body += chunk
            if len(body) > limit:
                raise SessionError(f"JSON answer larger than {limit} bytes", response.status_code)
    return bytes(body)


def result_of(answer: JSONObject) -> JSONObject:
    """The result of a JSON-RPC response; :class:`McpError` for an error response."""
    error = answer.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        raise McpError(
            code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
            str(error.get("message", "error without a message")),
            error.get("data"),
        )
    result = answer.get("result")
    if not isinstance(result, dict):
        raise SessionError("response has no result object")
    return result


async def raise_for_error_body(
    response: httpx.Response, media: str, limit: int, *, in_session: bool
) -> NoReturn:
    """An error status: the JSON-RPC error it carries (:class:`McpError`), else :class:`SessionError`."""
    status = response.status_code
    if media == "application/json":
        try:
            message = json.loads(await read_bounded(response, limit))
        except (ValueError, RecursionError):
            message = None
        if isinstance(message, dict) and isinstance(message.get("error"), dict):
            result_of(message)
    if status == 404 and in_session:
        raise SessionError("the session is unknown to the server (HTTP 404); it may have expired", status)
    raise SessionError(f"server answered HTTP {status}", status)


async def answer_from_json(
    response: httpx.Response, request_id: int, dispatch: Dispatch, limit: int
) -> JSONObject | None:
    try:
        message = json.loads(await read_bounded(response, limit))
    except (ValueError, RecursionError) as exc:
        raise SessionError("server answered with malformed JSON") from exc
    answer = None
    for item in message if isinstance(message, list) else [message]:
        answer = await dispatch(item, request_id) or answer
    return answer


async def answer_from_sse(
    response: httpx.Response, request_id: int, dispatch: Dispatch, max_event_bytes: int
) -> JSONObject | None:
    parser = SSEParser(max_event_bytes)
    try:
        async with closing_iterator(response.aiter_bytes()) as chunks:
            async for chunk in chunks:
                for event in parser.feed(chunk):
                    if not event.data or (event.event or "message") != "message":
                        continue
                    try:
                        message = json.loads(event.data)
                    except (ValueError, RecursionError) as exc:
                        raise SessionError("server sent an event that is not JSON") from exc
                    for item in message if isinstance(message, list) else [message]:
                        answer = await dispatch(item, request_id)
                        if answer is not None:
                            return answer
    except SSEError as exc:
        raise SessionError(str(exc)) from exc
    return None


async def read_answer(
    response: httpx.Response,
    method: str,
    request_id: int,
    dispatch: Dispatch,
    *,
    max_json_bytes: int,
    max_event_bytes: int,
    in_session: bool,
) -> JSONObject | None:
    """The JSON-RPC response to `request_id` in one HTTP answer (a JSON body or an SSE
    stream), other messages met on the way going to `dispatch`; None when it never came."""
    status = response.status_code
    media = str(response.headers.get("content-type", "")).partition(";")[0].strip().lower()
    if status == 202:
        raise SessionError(f"server accepted {method!r} without answering it", status)
    if status >= 400:
        await raise_for_error_body(response, media, max_json_bytes, in_session=in_session)
    if media == "application/json":
        return await answer_from_json(response, request_id, dispatch, max_json_bytes)
    if media == "text/event-stream":
        return await answer_from_sse(response, request_id, dispatch, max_event_bytes)
    raise SessionError(f"unexpected content type {media!r} for {method!r}", status)
