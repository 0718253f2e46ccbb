"""Sealed relays: a node serves a relayed request only if a node of its cluster sent it, as it
is, to this node, once.

A relayed request travels through the store's pub/sub (`engine/cluster.py`), where anyone who can
publish can write too, and it names who is calling (`engine/relayed_caller.py`): a message taken
at its word would let its writer act as anyone. So the relaying node seals the whole of it
- its id, where the answer goes, the node it is for, when it was sent, the HTTP request
and the caller - with an HMAC of the cluster's shared secret, and the owner serves only
what it can open. Refused:

* no seal, or one that does not match: forged, or altered (a caller's sealed identity
  grafted onto another request among them);
* sealed for another node, or sent more than `MAX_AGE_S` ago (or ahead, by this node's
  clock): captured and replayed elsewhere, or later;
* an id already opened: replayed within that window. The ids of the last `MAX_AGE_S` are
  kept (up to `MAX_REMEMBERED`; past that, relays are refused until the oldest age out).

What travels back (the owner's acknowledgement and its answer, in parts) and the relaying
node's word that its client left are sealed too (`seal_message` / `open_message`, a purpose of
their own): otherwise whoever can publish could answer another principal's relayed request
(its id is in the clear) with a forged result, or cut it off. Each sealed message names its
relay and its kind; a part's place in the answer is sealed with it, and the relaying node
takes parts only in order, each once, so a replayed part is dropped like a late one.

So the nodes' clocks must agree within `MAX_AGE_S`. Plain data and a clock passed in: no I/O.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass
from typing import Any

from mcp_resume_asgi.wire.tokens import TokenSigner

__all__ = [
    "MAX_AGE_S",
    "MAX_REMEMBERED",
    "MESSAGE_PURPOSE",
    "SEAL_PURPOSE",
    "RelayRequest",
    "RelaySeal",
]

#: The signing purpose of relay seals (a seal is valid for nothing else).
SEAL_PURPOSE = "relay"
#: The signing purpose of the messages of a relay under way: replies, and "the client left".
MESSAGE_PURPOSE = "relay-message"
#: How far the sender's clock (when it sealed) may be from the owner's when it opens.
MAX_AGE_S = 30.0
#: The most relay ids one node keeps to refuse their replays: over 4,000 relays a second to
#: one node, for the whole window, before it refuses them (about 100 bytes each).
MAX_REMEMBERED = 131_072


@dataclass(frozen=True, slots=True)
class RelayRequest:
    """A relay message opened: what to serve, as whom, and where to answer."""

    relay_id: str
    reply_to: str
    request: dict[str, Any]
    """The HTTP request: method, scheme, path, query, headers, body (`engine/cluster.py`)."""
    caller: dict[str, Any]
    """Who sent it, as the relaying node vouches (`relayed_caller.describe`)."""


class RelaySeal:
    """Seals this node's relays, and opens those sent to it (see the module doc)."""

    def __init__(
        self,
        signer: TokenSigner,
        node_id: str,
        *,
        max_age_s: float = MAX_AGE_S,
        max_remembered: int = MAX_REMEMBERED,
    ) -> None:
        self.signer = signer
        self.node_id = node_id
        self.max_age_s = max_age_s
        self.max_remembered = max_remembered
        self._opened: set[str] = set()
        self._expiries: list[tuple[float, str]] = []

    def seal(
        self,
        relay_id: str,
        *,
        to: str,
        reply_to: str,
        request: dict[str, Any],
        caller: dict[str, Any],
        now: float,
    ) -> dict[str, Any]:
        """The relay message of `request` for node `to` (its `t` and `id` in the clear, to route it)."""
        payload = {
            "id": relay_id,
            "to": to,
            "reply": reply_to,
            "at": int(now * 1000),
            "req": request,
            "caller": caller,
        }
        sealed = json.dumps(payload, separators=(",", ":"))
        return {
            "t": "req",
            "id": relay_id,
            "sealed": sealed,
            "seal": self.signer.mac(SEAL_PURPOSE, sealed.encode()),
        }

    def open(self, message: dict[str, Any], now: float) -> RelayRequest | str:
        """The request a relay message carries, or why it is refused (never served)."""
        self._forget(now)
        sealed, seal = message.get("sealed"), message.get("seal")
        if not isinstance(sealed, str) or not isinstance(seal, str):
            return "it is not sealed"
        if not self.signer.verify_mac(SEAL_PURPOSE, sealed.encode("utf-8", "surrogatepass"), seal):
            return "its seal does not match (not sealed with this cluster's secret, or altered)"
        try:
            payload = json.loads(sealed)
        except ValueError:
            return "its sealed part is not JSON"
        if not isinstance(payload, dict):
            return "its sealed part is not an object"
        relay_id, at = payload.get("id"), payload.get("at")
        reply_to, request, caller = payload.get("reply"), payload.get("req"), payload.get("caller")
        if relay_id != message.get("id") or not isinstance(relay_id, str):
            return "its id is not the one sealed"
        if payload.get("to") != self.node_id:
            return "it was sealed for another node"
        if not isinstance(reply_to, str) or not isinstance(request, dict) or not isinstance(caller, dict):
            return "its sealed part is incomplete"
        if isinstance(at, bool) or not isinstance(at, int) or not math.isfinite(at / 1000):
            return "it has no time"
        sent = at / 1000
        if abs(now - sent) > self.max_age_s:
            return "it was sealed too long ago, or ahead (are the nodes' clocks apart?)"
        if relay_id in self._opened:
            return "it was served already (a replay)"
        if len(self._opened) >= self.max_remembered:
            return "too many relays arrived in the last MAX_AGE_S to tell replays from them"
        self._opened.add(relay_id)
        heapq.heappush(self._expiries, (sent + self.max_age_s, relay_id))
        return RelayRequest(relay_id, reply_to, request, caller)

    def seal_message(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A message of a relay under way (its `t` and `id` in the clear, to route it), sealed."""
        sealed = json.dumps(payload, separators=(",", ":"))
        return {
            "t": payload["t"],
            "id": payload["id"],
            "sealed": sealed,
            "seal": self.signer.mac(MESSAGE_PURPOSE, sealed.encode()),
        }

    def open_message(self, message: dict[str, Any]) -> dict[str, Any] | str:
        """The payload of a sealed relay message (`seal_message`), or why it is refused."""
        sealed, seal = message.get("sealed"), message.get("seal")
        if not isinstance(sealed, str) or not isinstance(seal, str):
            return "it is not sealed"
        if not self.signer.verify_mac(MESSAGE_PURPOSE, sealed.encode("utf-8", "surrogatepass"), seal):
            return "its seal does not match (not sealed with this cluster's secret, or altered)"
        try:
            payload = json.loads(sealed)
        except ValueError:
            return "its sealed part is not JSON"
        if not isinstance(payload, dict) or payload.get("id") != message.get("id"):
            return "its id is not the one sealed"
        if payload.get("t") != message.get("t"):
            return "its kind is not the one sealed"
        return payload

    def _forget(self, now: float) -> None:
        """Ids whose messages are too old to be served anyway need not be kept."""
        while self._expiries and self._expiries[0][0] < now:
            self._opened.discard(heapq.heappop(self._expiries)[1])
