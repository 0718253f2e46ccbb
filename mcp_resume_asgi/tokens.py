"""Unguessable, signed names for streams: event ids and `rel="stream"` URLs.

A stream id alone is random (128 bits) and the engine checks that whoever names
it belongs to the stream's session; the signature on top lets any node reject a
forged or foreign id before it touches the store, with one shared secret.
Event ids are `<stream_id>.<sig>:<seq>`: the signature is computed once per stream,
so the hot path only appends a number.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from typing import Any

from itsdangerous import BadData, Signer, URLSafeSerializer

logger = logging.getLogger(__name__)

MAX_EVENT_ID_LENGTH = 256
MAX_LINK_TOKEN_LENGTH = 512
_STREAM_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


def new_stream_id() -> str:
    return secrets.token_urlsafe(16)


class TokenSigner:
    def __init__(self, secret: str | bytes | None) -> None:
        if secret is None:
            secret = secrets.token_bytes(32)
            logger.info("no secret configured: stream URLs and event ids are valid in this process only")
        elif len(secret) < 16:
            raise ValueError("the secret must be at least 16 characters or bytes")
        self._secret = secret
        self._purposes: dict[str, URLSafeSerializer] = {}
        self._events = Signer(secret, salt="mcp-resume-asgi/event-id", digest_method=hashlib.sha256)
        self._links = URLSafeSerializer(
            secret, salt="mcp-resume-asgi/link", signer_kwargs={"digest_method": hashlib.sha256}
        )

    def sign(self, purpose: str, payload: Any) -> str:
        """An opaque, URL-safe token for `payload`; valid only for the same `purpose`."""
        return self._serializer(purpose).dumps(payload)

    def unsign(self, purpose: str, token: str, max_length: int = MAX_LINK_TOKEN_LENGTH) -> Any:
        """The payload of a genuine token for `purpose`; None for anything else."""
        if not isinstance(token, str) or len(token) > max_length or not token.isascii():
            return None
        try:
            return self._serializer(purpose).loads(token)
        except (BadData, ValueError, UnicodeDecodeError):
            return None

    def _serializer(self, purpose: str) -> URLSafeSerializer:
        serializer = self._purposes.get(purpose)
        if serializer is None:
            serializer = URLSafeSerializer(
                self._secret,
                salt=f"mcp-resume-asgi/{purpose}",
                signer_kwargs={"digest_method": hashlib.sha256},
            )
            self._purposes[purpose] = serializer
        return serializer

    def event_prefix(self, stream_id: str) -> bytes:
        """`<stream_id>.<sig>:`; append a seq to get an event id."""
        return self._events.sign(stream_id.encode()) + b":"

    def parse_event_id(self, value: str) -> tuple[str, int] | None:
        """(stream_id, seq) for a genuine event id, None for anything else."""
        if len(value) > MAX_EVENT_ID_LENGTH:
            return None
        signed, colon, seq_text = value.rpartition(":")
        if not colon or not seq_text.isdigit() or len(seq_text) > 18 or not signed.isascii():
            return None
        try:
            stream_id = self._events.unsign(signed.encode()).decode()
        except BadData:
            return None
        if not _STREAM_ID.match(stream_id):
            return None
        return stream_id, int(seq_text)

    def link_token(self, stream_id: str, turn: int) -> str:
        return self._links.dumps([stream_id, turn])

    def parse_link_token(self, token: str) -> tuple[str, int] | None:
        if len(token) > MAX_LINK_TOKEN_LENGTH or not token.isascii():
            return None
        try:
            payload = self._links.loads(token)
        except (BadData, ValueError, UnicodeDecodeError):
            return None
        if (
            not isinstance(payload, list)
            or len(payload) != 2
            or not isinstance(payload[0], str)
            or not _STREAM_ID.match(payload[0])
            or not isinstance(payload[1], int)
        ):
            return None
        return payload[0], payload[1]
