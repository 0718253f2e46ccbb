"""Adding the Tasks extension to the app's `initialize` / `server/discover` answer, in flight.

The app does not know the middleware serves tasks, so its answer does not say so;
a client learns it from `capabilities.extensions` in that answer. The answer
reaches the client as the app wrote it - JSON, or SSE (with the engine's ids) - so
this rewrites the ASGI messages on their way out: the JSON body is held (bounded)
and its `Content-Length` recomputed; SSE frames pass as they come except the one
carrying the answer, whose `data` is rewritten and whose other lines (`id:`,
`event:`, `retry:`) are kept. Anything it cannot read within `limit` bytes goes
out untouched: the advertisement is lost, the answer never is.

Sans-IO: `feed(message)` returns the messages to send instead. With another `edit`,
the same serves any one message of an answer that needs completing on its way out
(the acknowledgement of a `subscriptions/listen`, `listen.py`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from starlette.types import Message

from mcp_resume_asgi.tasks.capability import advertise
from mcp_resume_asgi.wire import jsonrpc as p

#: Largest answer held for rewriting (an `initialize` answer is a few hundred bytes).
MAX_ANSWER_BYTES = 256 * 1024
_FRAME_END = re.compile(rb"(?:\r\n|\r|\n)(?:\r\n|\r|\n)")
_LINE_END = re.compile(rb"\r\n|\r|\n")


def _content_type(headers: list[tuple[bytes, bytes]]) -> bytes:
    for key, value in headers:
        if key.lower() == b"content-type":
            return value.split(b";", 1)[0].strip().lower()
    return b""


class AdvertisingAnswer:
    """One HTTP answer on its way out (see the module docstring)."""

    __slots__ = (
        "chunks",
        "done",
        "edit",
        "held_start",
        "limit",
        "marker",
        "mode",
        "request_id",
        "size",
        "tail",
    )

    def __init__(
        self,
        request_id: Any,
        *,
        limit: int = MAX_ANSWER_BYTES,
        edit: Callable[[Any], bool] | None = None,
        marker: bytes = b'"capabilities"',
    ) -> None:
        self.request_id = request_id
        self.limit = limit
        self.edit = edit
        """Changes the message it is given in place, True if it was the one (default: advertise)."""
        self.marker = marker
        """Bytes the message's JSON must contain (not to parse every frame)."""
        self.mode: str | None = None
        """"json" (held until complete), "sse" (frame by frame), "pass" (untouched)."""
        self.held_start: Message | None = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.tail = b""
        """An SSE frame not yet complete."""
        self.done = False

    def feed(self, message: Message) -> list[Message]:
        kind = message["type"]
        if kind == "http.response.start":
            content_type = _content_type(list(message.get("headers", [])))
            if message.get("status") == 200 and content_type == b"application/json":
                self.mode, self.held_start = "json", message
                return []
            self.mode = "sse" if content_type == b"text/event-stream" else "pass"
            return [message]
        if kind != "http.response.body" or self.mode in (None, "pass"):
            return [message]
        if self.mode == "json":
            return self._json(message)
        return self._sse(message)

    def _json(self, message: Message) -> list[Message]:
        body: bytes = message.get("body", b"")
        more = bool(message.get("more_body", False))
        self.chunks.append(body)
        self.size += len(body)
        start = self.held_start
        assert start is not None
        if self.size > self.limit:  # not an answer we rewrite: out as it came
            self.mode = "pass"
            out = [start, {"type": "http.response.body", "body": b"".join(self.chunks), "more_body": more}]
            self.chunks = []
            return out
        if more:
            return []
        whole = b"".join(self.chunks)
        self.chunks = []
        rewritten = self._rewrite(whole)
        if rewritten is not None:
            whole = rewritten
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            start = dict(start, headers=[*headers, (b"content-length", str(len(whole)).encode())])
        self.mode = "pass"
        return [start, {"type": "http.response.body", "body": whole, "more_body": False}]

    def _sse(self, message: Message) -> list[Message]:
        body: bytes = message.get("body", b"")
        more = bool(message.get("more_body", False))
        if self.done:
            return [message]
        data = self.tail + body
        end = 0
        for match in _FRAME_END.finditer(data):
            end = match.end()
        complete, self.tail = data[:end], data[end:]
        if len(self.tail) > self.limit:  # a frame too large to be the answer we look for
            complete, self.tail, self.done = data, b"", True
        out = self._frames(complete) if complete and not self.done else complete
        if not more:
            out, self.tail = out + self.tail, b""
        if not out and more:
            return []
        return [dict(message, body=out)]

    def _frames(self, data: bytes) -> bytes:
        """Complete frames, the answer's rewritten."""
        parts: list[bytes] = []
        position = 0
        for match in _FRAME_END.finditer(data):
            frame, separator = data[position : match.start()], data[match.start() : match.end()]
            position = match.end()
            if not self.done:
                frame = self._frame(frame)
            parts.append(frame + separator)
        parts.append(data[position:])
        return b"".join(parts)

    def _frame(self, frame: bytes) -> bytes:
        lines = _LINE_END.split(frame)
        data_lines = [line for line in lines if line.startswith(b"data:")]
        if not data_lines:
            return frame
        data = b"\n".join(line[6:] if line.startswith(b"data: ") else line[5:] for line in data_lines)
        rewritten = self._rewrite(data)
        if rewritten is None:
            return frame
        line_end = _LINE_END.search(frame)
        newline = line_end.group() if line_end is not None else b"\n"
        out: list[bytes] = []
        for line in lines:
            if not line.startswith(b"data:"):
                out.append(line)
            elif line is data_lines[0]:
                out.append(b"data: " + rewritten)
        return newline.join(out)

    def _rewrite(self, data: bytes) -> bytes | None:
        if self.marker not in data:
            return None
        try:
            answer = json.loads(data)
        except (ValueError, RecursionError):
            return None
        edited = self.edit(answer) if self.edit is not None else advertise(answer, self.request_id)
        if not edited:
            return None
        self.done = True
        try:
            return p.dumps(answer)
        except (ValueError, RecursionError, UnicodeEncodeError):
            return None
