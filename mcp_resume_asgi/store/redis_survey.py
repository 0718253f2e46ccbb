"""What a Redis store holds, read-only: the view behind `mcp-resume inspect`.

It walks the store's keys (`SCAN` under its prefix, on every primary of a Redis Cluster),
sorts them by the layout `redis_scripts.py` describes, and reads each one it lists:
nodes (a heartbeat key while a node lives, so a node listed is alive, with the seconds
its heartbeat has left), sessions, streams (by state, with what they hold), tasks and
REST calls (their records, by the time they were made). Counts cover every key seen;
the entries listed are the newest `limit` of each kind.

Nothing is written. Principals and payloads (a session's capabilities, a record's
request and result) are left out unless asked: an operator's screen is not where a
caller's identity or data should show by default. The walk is bounded (`max_keys`); a
store with more keys says so (`truncated`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from mcp_resume_asgi.store.redis import RedisStore

__all__ = ["DEFAULT_MAX_KEYS", "Survey", "survey"]

DEFAULT_MAX_KEYS = 200_000
_SCAN_COUNT = 1000
#: Key kinds under `k:` (`keys.py`), by the start of the key's own name.
_KEY_KINDS = {"node:": "nodes", "owner:": "owners", "task:": "tasks", "rest:": "rest_calls"}


@dataclass
class Survey:
    """Counts per kind, and the newest entries of each (plain data: JSON as it is)."""

    prefix: str
    counts: dict[str, int] = field(default_factory=dict)
    newest: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stream_states: dict[str, int] = field(default_factory=dict)
    truncated: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "counts": self.counts,
            "stream_states": self.stream_states,
            "newest": self.newest,
            "truncated": self.truncated,
        }


def _kind_of(name: str) -> tuple[str, str] | None:
    """(kind, id) of one key's name below the prefix (and a cluster's `{tag}`), or None."""
    if name.startswith("{"):
        close = name.find("}")
        if close == -1:
            return None
        name = name[close + 1 :]
    if name.startswith("s:") and name.endswith(":m"):
        return "streams", name[2:-2]
    if name.startswith("sess:"):
        return "sessions", name[5:]
    if name.startswith("k:"):
        rest = name[2:]
        for start, kind in _KEY_KINDS.items():
            if rest.startswith(start):
                return kind, rest
    return None


def _record(raw: bytes | None, payloads: bool, principals: bool) -> dict[str, Any]:
    """A task's or REST call's record as JSON, trimmed as asked (unreadable: nothing)."""
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    if isinstance(data, dict) and isinstance(data.get("sealed"), str) and "seal" in data:
        # A sealed record (a task's): the record is the sealed text, shown as stored, unverified
        # (this view holds no secret and decides nothing).
        try:
            data = json.loads(data["sealed"])
        except ValueError:
            return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, Any] = {}
    for name, value in data.items():
        if "principal" in name and not principals:
            continue
        if name in ("request", "result", "body", "arguments", "params", "answer") and not payloads:
            continue
        if isinstance(value, str | int | float | bool) or value is None or payloads:
            out[name] = value
    return out


async def survey(
    store: RedisStore,
    *,
    limit: int = 10,
    principals: bool = False,
    payloads: bool = False,
    max_keys: int = DEFAULT_MAX_KEYS,
) -> Survey:
    """Walk `store` (see the module doc); `limit` entries of each kind, newest first."""
    await store._ready()  # the layout: plain Redis or a Cluster
    client: Any = store._client
    result = Survey(
        store.prefix, counts={"nodes": 0, "sessions": 0, "streams": 0, "tasks": 0, "rest_calls": 0}
    )
    found: dict[str, list[tuple[bytes, str]]] = {kind: [] for kind in (*result.counts, "owners")}
    pattern = _glob_escape(store.prefix) + "*"
    seen = 0
    async for key in client.scan_iter(match=pattern, count=_SCAN_COUNT):
        seen += 1
        if seen > max_keys:
            result.truncated = True
            break
        name = bytes(key).decode("utf-8", "replace")[len(store.prefix) :]
        sorted_as = _kind_of(name)
        if sorted_as is not None:
            if sorted_as[0] in result.counts:
                result.counts[sorted_as[0]] += 1
            found[sorted_as[0]].append((bytes(key), sorted_as[1]))
    now = time.time()
    streams: list[dict[str, Any]] = []
    for key, stream_id in found["streams"]:
        raw = await client.hgetall(key)
        if not raw:
            continue
        try:
            meta = store._decode_meta(raw)
        except (ValueError, KeyError, TypeError):
            continue
        result.stream_states[str(meta.state)] = result.stream_states.get(str(meta.state), 0) + 1
        entry: dict[str, Any] = {
            "stream": stream_id,
            "kind": str(meta.kind),
            "state": str(meta.state),
            "method": meta.method,
            "session": meta.session_id,
            "events": meta.last_seq,
            "attached": meta.attached,
            "owner": meta.owner,
            "last_contact_s_ago": round(max(0.0, now - meta.last_contact), 1),
            "protocol_version": meta.protocol_version,
        }
        if principals:
            entry["principal"] = meta.principal
        streams.append(entry)
    streams.sort(key=lambda e: e["last_contact_s_ago"])
    result.newest["streams"] = streams[:limit]
    nodes: list[dict[str, Any]] = []
    for key, name in found["nodes"]:
        ttl_ms = await client.pttl(key)
        if ttl_ms != -2:  # (expired between the walk and now: gone)
            nodes.append(
                {"node": name.removeprefix("node:"), "alive": True, "heartbeat_left_s": ttl_ms / 1000}
            )
    alive = {n["node"] for n in nodes}
    owners: dict[str, int] = {}
    for key, _ in found["owners"]:
        owner = await client.get(key)
        if owner is not None:
            owners[bytes(owner).decode("utf-8", "replace")] = (
                owners.get(bytes(owner).decode("utf-8", "replace"), 0) + 1
            )
    for node in nodes:
        node["sessions_held"] = owners.get(node["node"], 0)
    # A node that holds sessions and has no heartbeat is gone: another adopts its sessions.
    nodes += [{"node": n, "alive": False, "sessions_held": c} for n, c in owners.items() if n not in alive]
    result.newest["nodes"] = nodes[:limit]
    sessions: list[dict[str, Any]] = []
    for key, session_id in found["sessions"]:
        ttl_ms = await client.pttl(key)
        entry = {"session": session_id, "expires_in_s": round(max(ttl_ms, 0) / 1000, 1)}
        raw_session = await client.get(key)
        info = _record(raw_session, payloads, principals)
        if "protocol_version" in info:
            entry["protocol_version"] = info["protocol_version"]
        if principals and "principal" in info:
            entry["principal"] = info["principal"]
        sessions.append(entry)
    sessions.sort(key=lambda e: -e["expires_in_s"])
    result.newest["sessions"] = sessions[:limit]
    for kind in ("tasks", "rest_calls"):
        records: list[dict[str, Any]] = []
        for key, name in found[kind]:
            raw_record = await client.get(key)
            record = _record(raw_record, payloads, principals)
            entry = {"key": name, **record}
            created = record.get("created_at")
            entry["created_s_ago"] = round(now - created, 1) if isinstance(created, int | float) else None
            records.append(entry)
        records.sort(key=lambda e: e["created_s_ago"] if e["created_s_ago"] is not None else float("inf"))
        result.newest[kind] = records[:limit]
    return result


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
