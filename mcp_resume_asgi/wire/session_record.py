"""What makes a 2025-era session, kept in the store so that any node can open it again.

A session of the Streamable HTTP transport lives in the memory of the app instance that
answered its `initialize`. To let another node (or this one, restarted) take it over, the
store keeps what the client said to make it: its `initialize` request, whether it sent
`notifications/initialized`, and the requests that set session state (`logging/setLevel`,
`resources/subscribe` and `resources/unsubscribe`), folded into the state they leave (the
last level, the set of subscribed URIs), with the revision it negotiated and the principal
it is bound to. A node that adopts the session replays this into its own app
(`engine/adoption.py`).

The record decides who may take a session over and what runs as them, and it is read back
from a store anyone with access to it could write: it is sealed with the cluster's secret,
bound to the session id it was written for, and a record that does not open is no record
(the session stays unknown: 404). Bounded: `MAX_RECORD_BYTES` in all, `MAX_SUBSCRIPTIONS`
URIs; a state request past the bound is not kept (the session still works where it is).
Plain data, no I/O.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from mcp_resume_asgi.wire.tokens import TokenSigner

__all__ = [
    "MAX_RECORD_BYTES",
    "MAX_SUBSCRIPTIONS",
    "RECORD_PURPOSE",
    "STATE_METHODS",
    "SessionRecord",
    "open_record",
    "seal_record",
]

#: The signing purpose of a session record's seal (valid for nothing else).
RECORD_PURPOSE = "session-record"
#: The largest sealed record, its `initialize` request included.
MAX_RECORD_BYTES = 64 * 1024
#: The most resources one session's record keeps subscribed.
MAX_SUBSCRIPTIONS = 256
#: The client messages whose effect on the session the record keeps.
STATE_METHODS = frozenset(
    {"notifications/initialized", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}
)


@dataclasses.dataclass(frozen=True, slots=True)
class SessionRecord:
    """One session as a node needs it to open the session again (see the module docstring)."""

    session_id: str
    """The id the client knows (it never changes, whichever app instance holds the session)."""
    protocol_version: str
    principal: str | None
    initialize: str
    """The client's `initialize` request, as it sent it (JSON text)."""
    initialized: bool = False
    level: str | None = None
    """The last level `logging/setLevel` set, if any."""
    subscriptions: tuple[str, ...] = ()

    def applied(self, message: dict[str, Any]) -> SessionRecord | None:
        """The record once `message` (a client message of `STATE_METHODS`) took effect, or None
        when it changes nothing or is not kept (malformed, or past a bound)."""
        method = message.get("method")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "notifications/initialized":
            return None if self.initialized else dataclasses.replace(self, initialized=True)
        if method == "logging/setLevel":
            level = params.get("level")
            if not isinstance(level, str) or len(level) > 32 or level == self.level:
                return None
            return dataclasses.replace(self, level=level)
        uri = params.get("uri")
        if not isinstance(uri, str) or len(uri) > 4096:
            return None
        if method == "resources/subscribe":
            if uri in self.subscriptions or len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
                return None
            return dataclasses.replace(self, subscriptions=(*self.subscriptions, uri))
        if method == "resources/unsubscribe" and uri in self.subscriptions:
            return dataclasses.replace(self, subscriptions=tuple(u for u in self.subscriptions if u != uri))
        return None

    def replay(self) -> list[dict[str, Any]]:
        """The client messages that put a new app session in this state, after `initialize`:
        `notifications/initialized`, then requests (ids of the middleware's own)."""
        messages: list[dict[str, Any]] = []
        if self.initialized:
            messages.append({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if self.level is not None:
            messages.append(
                {
                    "jsonrpc": "2.0",
                    "id": "mcp-resume-replay-level",
                    "method": "logging/setLevel",
                    "params": {"level": self.level},
                }
            )
        for number, uri in enumerate(self.subscriptions):
            messages.append(
                {
                    "jsonrpc": "2.0",
                    "id": f"mcp-resume-replay-sub-{number}",
                    "method": "resources/subscribe",
                    "params": {"uri": uri},
                }
            )
        return messages


def seal_record(signer: TokenSigner, record: SessionRecord) -> str | None:
    """The record as the store keeps it (JSON, sealed), or None when it is past `MAX_RECORD_BYTES`."""
    body = json.dumps(
        {
            "s": record.session_id,
            "v": record.protocol_version,
            "p": record.principal,
            "i": record.initialize,
            "n": record.initialized,
            "l": record.level,
            "u": list(record.subscriptions),
        },
        separators=(",", ":"),
    )
    sealed = json.dumps({"r": body, "m": signer.mac(RECORD_PURPOSE, body.encode())}, separators=(",", ":"))
    return sealed if len(sealed) <= MAX_RECORD_BYTES else None


def open_record(signer: TokenSigner, session_id: str, text: str | None) -> SessionRecord | None:
    """The record `seal_record` gave, if it opens with this secret and is `session_id`'s; else None."""
    if text is None or len(text) > MAX_RECORD_BYTES:
        return None
    try:
        outer = json.loads(text)
        if not isinstance(outer, dict):
            return None
        body, mac = outer.get("r"), outer.get("m")
        if not isinstance(body, str) or not isinstance(mac, str):
            return None
        if not signer.verify_mac(RECORD_PURPOSE, body.encode("utf-8", "surrogatepass"), mac):
            return None
        fields = json.loads(body)
    except (ValueError, UnicodeError):
        return None
    if not isinstance(fields, dict) or fields.get("s") != session_id:
        return None
    version, principal, initialize = fields.get("v"), fields.get("p"), fields.get("i")
    level, subscriptions = fields.get("l"), fields.get("u")
    if (
        not isinstance(version, str)
        or not (principal is None or isinstance(principal, str))
        or not isinstance(initialize, str)
        or not (level is None or isinstance(level, str))
        or not isinstance(subscriptions, list)
        or not all(isinstance(u, str) for u in subscriptions)
    ):
        return None
    return SessionRecord(
        session_id=session_id,
        protocol_version=version,
        principal=principal,
        initialize=initialize,
        initialized=fields.get("n") is True,
        level=level,
        subscriptions=tuple(subscriptions[:MAX_SUBSCRIPTIONS]),
    )
