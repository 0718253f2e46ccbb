"""`GET /mcp/tools/{tool}/calls`: the caller's calls of a tool, filtered and paged.

Each call is a member of the caller's per-tool index in the store (`calls.py`): a
bounded, self-expiring set ordered by expiry, and since every call of a tool lives
as long, by creation. A page walks the index from the cursor and keeps the calls
that pass the filters (`status`, `createdAfter`), up to `limit`; it looks at no more
than `SCAN_FACTOR` times `limit` members, so a filter that matches little answers a
short page and a `nextCursor` to go on rather than reading the whole index.

The status of each listed call is read from the store (its task's record and stream,
as `tasks/get` derives it) rather than asked of the app per call: the index is the
caller's own, and a listing of 100 calls costs no app round trip.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from starlette.types import Scope

from mcp_resume_asgi.rest import resource as res
from mcp_resume_asgi.rest.calls import CallRecord, decode_cursor, encode_cursor
from mcp_resume_asgi.rest.problems import problem
from mcp_resume_asgi.rest.replies import Reply, json_reply, problem_reply
from mcp_resume_asgi.rest.routes import Route
from mcp_resume_asgi.rest.tool_calls import ToolCalls
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.tasks.record import detailed_task, iso

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
#: Most index members one page looks at, per call it may return.
SCAN_FACTOR = 10
_STATUSES = frozenset(str(s) for s in res.CallStatus)


async def list_calls(calls: ToolCalls, scope: Scope, route: Route) -> Reply:
    assert route.tool is not None
    query = _query(scope)
    if isinstance(query, Reply):
        return query
    status, created_after, cursor, limit = query
    who = await calls.principal(scope)
    if isinstance(who, Reply):
        return who
    store = calls.calls.store
    index = keys.rest_calls_index(who, route.tool)
    found: list[dict[str, Any]] = []
    after, budget, more = cursor, limit * SCAN_FACTOR, False
    while budget > 0:
        want = min(limit - len(found) + 1, budget)  # one more than needed: is there a next page?
        page = await store.index_page(index, after=after, limit=want)
        for member, expires_at in page:
            if len(found) >= limit or budget <= 0:
                more = True
                break
            budget -= 1
            after = (expires_at, member)
            record = await calls.calls.load(keys.rest_call_of_member(who, route.tool, member))
            if record is None or (created_after is not None and _shown(record.created_at) <= created_after):
                continue
            current = await status_of(calls, record)
            if status is None or current == status:
                summary = {"toolname": record.tool, "id": record.call_id, "status": current}
                found.append(summary | {"createdAt": iso(record.created_at)})
        else:
            if len(page) < want:
                break  # the index has no more
            more = budget <= 0
            continue
        break
    body: dict[str, Any] = {"calls": found}
    if more and after is not None:
        body["nextCursor"] = encode_cursor(*after)
    return json_reply(200, body, [(b"cache-control", b"private, no-cache")])


async def status_of(calls: ToolCalls, record: CallRecord) -> str:
    """The call's status as `tasks/get` would derive it, from the store alone."""
    if record.task_id is None:
        if record.answer is not None:
            return str(res.state_of_answer(record.answer)["status"])
        return str(res.CallStatus.SUBMITTED)
    task_record = await calls.calls.task_record(record.task_id)
    if task_record is None:
        return str(res.CallStatus.CANCELED)  # its task is gone: it did not finish
    meta = await calls.calls.store.get_stream(task_record.current_stream)
    view = await calls.calls.task_view(task_record, meta)
    return str(res.state_of_task(detailed_task(record.task_id, task_record, view))["status"])


def _query(scope: Scope) -> tuple[str | None, float | None, tuple[float, str] | None, int] | Reply:
    raw = scope.get("query_string", b"").decode("latin-1")
    try:
        query = parse_qs(raw, keep_blank_values=True, max_num_fields=16, strict_parsing=False)
    except ValueError:
        return _bad("too many query parameters")
    unknown = set(query) - {"status", "createdAfter", "cursor", "limit"}
    if unknown:
        return _bad(f"unknown query parameter {sorted(unknown)[0]!r}")
    if any(len(values) > 1 for values in query.values()):
        return _bad("each query parameter may be given once")
    status = query.get("status", [None])[0]
    if status is not None and status not in _STATUSES:
        return _bad(f"status must be one of {', '.join(sorted(_STATUSES))}")
    created_after: float | None = None
    if "createdAfter" in query:
        created_after = parse_time(query["createdAfter"][0])
        if created_after is None:
            return _bad("createdAfter must be an RFC 3339 date or date-time")
    cursor = None
    if "cursor" in query:
        cursor = decode_cursor(query["cursor"][0])
        if cursor is None:
            return _bad("cursor is not one this server gave")
    limit = DEFAULT_LIMIT
    if "limit" in query:
        text = query["limit"][0]
        # ASCII digits only (`isdigit` also takes superscripts, which `int` refuses, and
        # other scripts' digits), and few of them (`int` refuses more than 4300).
        if not (0 < len(text) <= 4 and text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_LIMIT:
            return _bad(f"limit must be an integer from 1 to {MAX_LIMIT}")
        limit = int(text)
    return status, created_after, cursor, limit


def parse_time(text: str) -> float | None:
    """Unix time of an RFC 3339 date (midnight UTC) or date-time (UTC when it names no offset)."""
    if not 0 < len(text) <= 64:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _shown(ts: float) -> float:
    """A time as `createdAt` shows it (to the millisecond), so the filter agrees with the list."""
    return math.floor(ts * 1000) / 1000


def _bad(detail: str) -> Reply:
    return problem_reply(problem(400, detail))
