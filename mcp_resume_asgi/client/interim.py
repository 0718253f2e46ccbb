"""Resume tokens on the client side: re-issue a request until its final result replaces the interim one.

Why apart from the session: it is the same kind of loop as following a task
(`tasks.py`) - the server answered "not yet, ask again" - with its own wire
(`_meta.nextResumeToken` on an interim result marked by the server's resume-token
layer, see `mcp_resume_asgi.features.resume_tokens`), and the session only supplies how a
request is sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio

from .errors import SessionError

#: The resume-token layer's experimental capability and interim marker (see `mcp_resume_asgi.features.resume_tokens`).
RESUME_TOKENS_CAPABILITY: Final = "resumeTokens"
INTERIM_META: Final = "io.github.mcp-resume-asgi/interim"

JSONObject = dict[str, Any]


async def follow_resume_tokens(
    first: JSONObject,
    reissue: Callable[[JSONObject], Awaitable[JSONObject]],
    params: JSONObject | None,
    *,
    what: str,
    poll_s: float | None,
    max_polls: int,
) -> JSONObject:
    """Re-issue (``reissue(params with _meta.resumeToken)``) until a result is not interim.

    Waits the server's `resumeAfterMs` hint (0 - 60 s), or `poll_s` when given, between
    two; a `nextResumeToken` the app returns itself (not marked interim) ends the loop.
    """
    result = first
    polls = 0
    while True:
        meta = result.get("_meta")
        token = meta.get("nextResumeToken") if isinstance(meta, dict) else None
        if not (isinstance(meta, dict) and meta.get(INTERIM_META) is True and isinstance(token, str)):
            return result
        polls += 1
        if polls > max_polls:
            raise SessionError(f"{what!r} still unfinished after {polls - 1} resumes")
        hint = meta.get("resumeAfterMs")
        wait_s = 0.0
        if poll_s is not None:
            wait_s = poll_s
        elif isinstance(hint, int | float) and not isinstance(hint, bool) and 0 <= hint <= 60_000:
            wait_s = hint / 1000
        await anyio.sleep(wait_s)
        again: JSONObject = dict(params or {})
        again_meta = dict(again.get("_meta") or {})
        again_meta["resumeToken"] = token
        again["_meta"] = again_meta
        result = await reissue(again)
