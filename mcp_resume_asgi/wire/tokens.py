"""Unguessable, signed names for streams: event ids and `rel="stream"` URLs.

A stream id alone is random (128 bits) and the engine checks that whoever names
it belongs to the stream's session; the signature on top lets any node reject a
forged or foreign id before it touches the store, with one shared secret.
Event ids are `<stream_id>.<sig>:<seq>`: the signature is computed once per stream,
so the hot path only appends a number.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
from typing import Any, ClassVar

from itsdangerous import BadData, Signer, URLSafeSerializer
from itsdangerous.encoding import want_bytes

__all__ = [
    "MAX_EVENT_ID_LENGTH",
    "MAX_LINK_TOKEN_LENGTH",
    "TokenSigner",
    "new_stream_id",
]

logger = logging.getLogger(__name__)

MAX_EVENT_ID_LENGTH = 256
MAX_LINK_TOKEN_LENGTH = 512
_STREAM_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
#: `str.isdigit()` also accepts superscripts and other digits that `int()` refuses.
_DIGITS = re.compile(r"[0-9]+")


def new_stream_id() -> str:
    return secrets.token_urlsafe(16)


class _CachedKeySigner(Signer):
    """itsdangerous derives the signing key from the secret on every call (and a
    serializer makes a new signer per call); derive each key once. Keyed by all that
    `Signer.derive_key` reads, so signers differing in any of it never share a key."""

    #: Most keys kept (a few per purpose in practice): past it the cache starts over.
    MAX_KEYS: ClassVar[int] = 64
    _keys: ClassVar[dict[tuple[bytes, bytes, str, Any], bytes]] = {}

    def derive_key(self, secret_key: str | bytes | None = None) -> bytes:
        secret = self.secret_keys[-1] if secret_key is None else want_bytes(secret_key)
        cache_key = (secret, self.salt, self.key_derivation, self.digest_method)
        key = self._keys.get(cache_key)
        if key is None:
            if len(self._keys) >= self.MAX_KEYS:
                self._keys.clear()
            key = self._keys[cache_key] = super().derive_key(secret_key)
        return key


class TokenSigner:
    def __init__(self, secret: str | bytes | None) -> None:
        if secret is None:
            secret = secrets.token_bytes(32)
            logger.info("no secret configured: stream URLs and event ids are valid in this process only")
        elif len(secret) < 16:
            raise ValueError("the secret must be at least 16 characters or bytes")
        self._secret = secret
        self._purposes: dict[str, URLSafeSerializer] = {}
        self._events = _CachedKeySigner(secret, salt="mcp-resume-asgi/event-id", digest_method=hashlib.sha256)
        self._links = _CachedKeySigner(secret, salt="mcp-resume-asgi/link", digest_method=hashlib.sha256)

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

    def mac(self, purpose: str, data: bytes) -> str:
        """A keyed digest of `data` for `purpose` (the data travels beside it, unencoded)."""
        return self._mac_signer(purpose).get_signature(data).decode()

    def verify_mac(self, purpose: str, data: bytes, mac: str) -> bool:
        """Whether `mac` is this secret's `mac(purpose, data)` (compared in constant time)."""
        if not isinstance(mac, str) or len(mac) > 128 or not mac.isascii():
            return False
        return self._mac_signer(purpose).verify_signature(data, mac.encode())

    def _mac_signer(self, purpose: str) -> Signer:
        return _CachedKeySigner(self._secret, salt=f"mcp-resume-asgi/{purpose}", digest_method=hashlib.sha256)

    def digest(self, purpose: str, value: str) -> str:
        """A short keyed digest of `value` (96 bits, URL-safe): equal values have equal digests,
        and a token that carries one says nothing of the value to whoever reads it."""
        # A salt of its own: not the key that signs and MACs for `purpose` (the same derivation).
        salt = f"mcp-resume-asgi/{purpose}/digest"
        key = _CachedKeySigner(self._secret, salt=salt, digest_method=hashlib.sha256).derive_key()
        mac = hmac.new(key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()[:12]
        return base64.urlsafe_b64encode(mac).decode("ascii")

    def _serializer(self, purpose: str) -> URLSafeSerializer:
        serializer = self._purposes.get(purpose)
        if serializer is None:
            serializer = URLSafeSerializer(
                self._secret,
                salt=f"mcp-resume-asgi/{purpose}",
                signer=_CachedKeySigner,
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
        if not colon or not _DIGITS.fullmatch(seq_text) or len(seq_text) > 18 or not signed.isascii():
            return None
        try:
            stream_id = self._events.unsign(signed.encode()).decode()
        except BadData:
            return None
        if not _STREAM_ID.match(stream_id):
            return None
        return stream_id, int(seq_text)

    def link_token(self, stream_id: str, after_seq: int) -> str:
        """`<stream_id>~<after_seq>.<sig>`: URL-safe, signed, minted on every request, so kept cheap.

        `after_seq` is where the response that carries the Link starts: a client that
        resumes through it without `Last-Event-ID` has seen none of that response's
        events (SEP-1335: the URL resumes "regardless of having received an initial
        event"), so it is replayed from there, not from what the server believes it
        wrote (bytes written to a connection that then broke never arrived).
        """
        return str(self._links.sign(f"{stream_id}~{after_seq}".encode()).decode())

    def parse_link_token(self, token: str) -> tuple[str, int] | None:
        if len(token) > MAX_LINK_TOKEN_LENGTH or not token.isascii():
            return None
        try:
            value = self._links.unsign(token.encode()).decode()
        except (BadData, UnicodeDecodeError):
            return None
        stream_id, tilde, after = value.partition("~")
        if not tilde or not _STREAM_ID.match(stream_id) or not _DIGITS.fullmatch(after) or len(after) > 18:
            return None
        return stream_id, int(after)
