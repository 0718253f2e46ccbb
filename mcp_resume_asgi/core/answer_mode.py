"""How the connection that brought a request is answered, decided by the app's response start.

The first thing the app sends (`http.response.start`) settles what its client
gets: an SSE answer (200, `text/event-stream`) is recorded and relayed
(`STREAM`); anything else passes through untouched (`PASSTHROUGH`). A stream
that had to exist before the app answered (an `Idempotency-Key`, SEP-975,
resume tokens, `upgrade_json_after_s`: the host's `Mode.UPGRADED`) holds its
client's answer until the app's status is known: a refusal (>= 400) while that
answer is still held reaches the client as that status and the stream is
forgotten (`REFUSED`), unless nobody waits for it (a task's next round records
the refusal as its answer); anything else opens the stream's own SSE answer
(`UPGRADE`), of which the app's answer becomes the content.

Plain functions of the response start's status and headers, so the rule is read
and tested in one place; the host (`engine/hosted.py`) acts on the answer.
"""

from __future__ import annotations

import enum

__all__ = [
    "EVENT_STREAM",
    "SKIP_APP_HEADERS",
    "Answer",
    "Headers",
    "Mode",
    "answer_head",
    "answer_mode",
    "content_type",
    "session_id",
    "stream_headers",
]

Headers = list[tuple[bytes, bytes]]
"""ASGI headers: `(name, value)` byte pairs."""

EVENT_STREAM = b"text/event-stream"
"""The media type of an SSE answer (`content_type`'s form: lower-cased, no parameters)."""
#: Headers of the app's SSE answer that are not the client's: the engine frames the answer
#: itself (no length, its own transfer) and gives it the stream's own `Link`.
SKIP_APP_HEADERS = frozenset({b"content-length", b"link", b"transfer-encoding"})


class Mode(enum.Enum):
    """What the first connection's answer became (the host keeps it; None until decided)."""

    PASSTHROUGH = 1
    """The app answered with something other than an SSE stream; it goes to the client untouched."""
    STREAM = 2
    """The app answered with SSE; the engine records and relays it."""
    UPGRADED = 3
    """The engine opened the stream itself, before or instead of the app's answer."""


class Answer(enum.Enum):
    """What to do with the app's response start (see the module docstring)."""

    STREAM = "stream"
    """Record and relay the app's SSE answer, opened on the first connection."""
    PASSTHROUGH = "passthrough"
    """Pass the app's answer through untouched."""
    UPGRADE = "upgrade"
    """The stream was opened ahead: the app's answer is its content, and its held answer opens."""
    REFUSED = "refused"
    """The stream was opened ahead and the app refused before its answer opened: the client
    gets the app's status, and the stream (and its Idempotency-Key) is forgotten."""


def answer_mode(
    *, status: int, content_type: bytes, upgraded: bool, held: bool, refusal_recorded: bool = False
) -> Answer:
    """The answer to the app's response start.

    `upgraded`: the stream's record was opened before the app answered (`Mode.UPGRADED`);
    `held`: the first connection's answer still waits for the app; `refusal_recorded`: nobody
    waits for the app's status (a task's next round), so a refusal is recorded, not passed on.
    """
    if upgraded:
        if status >= 400 and held and not refusal_recorded:
            return Answer.REFUSED
        return Answer.UPGRADE
    if status == 200 and content_type == EVENT_STREAM:
        return Answer.STREAM
    return Answer.PASSTHROUGH


def content_type(headers: Headers) -> bytes:
    """The media type of the answer, lower-cased, without parameters (the last header wins)."""
    media = b""
    for key, value in headers:
        if key.lower() == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
    return media


def session_id(headers: Headers) -> str | None:
    """The `Mcp-Session-Id` the app's answer gives (its first), if any."""
    for key, value in headers:
        if key.lower() == b"mcp-session-id":
            return value.decode("latin-1")
    return None


def stream_headers(headers: Headers) -> Headers:
    """The app's SSE answer headers as its client gets them: without those the engine sets
    itself (`SKIP_APP_HEADERS`), and with `X-Accel-Buffering: no` unless the app said otherwise
    (a buffering proxy would hold the stream's events back)."""
    kept: Headers = []
    buffering = False
    for k, v in headers:  # (one pass: every SSE answer's headers come here)
        name = k.lower()
        if name in SKIP_APP_HEADERS:
            continue
        if name == b"x-accel-buffering":
            buffering = True
        kept.append((k, v))
    if not buffering:
        kept.append((b"x-accel-buffering", b"no"))
    return kept


#: SSE answers' heads, as `answer_head` read them: an app answers with the same few (its session's
#: id the one value that changes), each read in Python before. At most `_MAX_SSE_HEADS`, then afresh.
_SSE_HEADS: dict[tuple[tuple[bytes, bytes], ...], tuple[tuple[bytes, bytes], ...]] = {}
_MAX_SSE_HEADS = 64


def answer_head(headers: Headers) -> tuple[bytes, Headers | None]:
    """`content_type(headers)`, and for an SSE answer `stream_headers(headers)` too (a list of its
    own), else None. The heads of SSE answers are kept (`_SSE_HEADS`): reading one again is a
    lookup."""
    try:
        key: tuple[tuple[bytes, bytes], ...] | None = tuple(headers)
        kept = _SSE_HEADS.get(key)  # type: ignore[arg-type]
    except TypeError:  # (pairs given as lists: not hashable)
        key = kept = None
    if kept is not None:
        return EVENT_STREAM, list(kept)
    media = content_type(headers)
    if media != EVENT_STREAM:
        return media, None
    sse = stream_headers(headers)
    if key is not None:
        if len(_SSE_HEADS) >= _MAX_SSE_HEADS:
            _SSE_HEADS.clear()
        _SSE_HEADS[key] = tuple(sse)
    return media, sse
