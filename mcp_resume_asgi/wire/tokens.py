"""Unguessable, signed names for streams: event ids and `rel="stream"` URLs.

A stream id alone is random (128 bits) and the engine checks that whoever names
it belongs to the stream's session; the signature on top lets any node reject a
forged or foreign id before it touches the store, with one shared secret.

Both names carry the same signed stream name, `<stream_id>.<sig>`, so a request
computes ONE HMAC (when its stream's record opens), whatever it sends:
- event ids are `<stream_id>.<sig>:<seq>`: the hot path only appends a number;
- link tokens are `<stream_id>.<sig>~<after_seq>`: the cursor is not signed, and
  need not be: it grants nothing an event id of the stream does not (a client may
  send any `Last-Event-ID` seq of a stream it can name, and it is answered the same).
The signature is the one itsdangerous's `Signer` made before (same key derivation,
same encoding), so event ids of earlier releases still parse. Their link tokens,
`<stream_id>~<after_seq>.<sig>` signed with a key of their own, parse too, until no
stream minted then can exist (one release; see `parse_link_token`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import importlib
import logging
import os
import re
import secrets
from collections.abc import Callable
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


#: Standard base64's two symbols to the URL-safe ones (`base64.urlsafe_b64encode`, in C).
_URL_SAFE = bytes.maketrans(b"+/", b"-_")


#: How many stream ids one read of the OS's random source makes (`new_stream_id`).
IDS_PER_READ = 256

_ids: list[str] = []
"""Stream ids made ahead, taken from the end (`list.pop`, one step under the GIL: no two
callers, in any thread, take the same one)."""


def new_stream_id() -> str:
    """128 random bits from the OS, URL-safe (22 characters, as `secrets.token_urlsafe(16)`): one
    per request.

    Made `IDS_PER_READ` at a time, from one `os.urandom` read: a read lets go of the GIL for its
    system call, and on a busy server another thread waiting for the GIL (`SQLiteStore`'s writer)
    takes it then and holds up the event loop while it runs, up to milliseconds."""
    try:
        return _ids.pop()
    except IndexError:
        raw = os.urandom(16 * IDS_PER_READ)
        made = [
            binascii.b2a_base64(raw[i : i + 16], newline=False)[:22].translate(_URL_SAFE).decode("ascii")
            for i in range(0, len(raw), 16)
        ]
        mine = made.pop()
        _ids.extend(made)
        return mine


if hasattr(os, "register_at_fork"):  # (a child must not hand out the ids its parent made ahead)
    os.register_at_fork(after_in_child=_ids.clear)


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
        # The keys itsdangerous's `Signer` derives for these salts (the tokens stay as they were).
        self._event_key = _HmacSha256(
            _CachedKeySigner(
                secret, salt="mcp-resume-asgi/event-id", digest_method=hashlib.sha256
            ).derive_key()
        )
        self._link_key = _HmacSha256(
            _CachedKeySigner(secret, salt="mcp-resume-asgi/link", digest_method=hashlib.sha256).derive_key()
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
        """`<stream_id>.<sig>:`; append a seq to get an event id. The one HMAC of a stream."""
        name = stream_id.encode()
        return b"%s.%s:" % (name, _signature(self._event_key, name))

    def parse_event_id(self, value: str) -> tuple[str, int] | None:
        """(stream_id, seq) for a genuine event id, None for anything else."""
        if len(value) > MAX_EVENT_ID_LENGTH or not value.isascii():
            return None
        signed, colon, seq_text = value.rpartition(":")
        if not colon or len(seq_text) > 18 or not _DIGITS.fullmatch(seq_text):
            return None
        stream_id = self._signed_name(signed)
        return None if stream_id is None else (stream_id, int(seq_text))

    def link_token(self, stream_id: str, after_seq: int, prefix: bytes | None = None) -> str:
        """`<stream_id>.<sig>~<after_seq>`: URL-safe, minted on every request, so kept cheap:
        `prefix` is the stream's `event_prefix` where the caller has it (no second HMAC).

        `after_seq` is where the response that carries the Link starts: a client that
        resumes through it without `Last-Event-ID` has seen none of that response's
        events (SEP-1335: the URL resumes "regardless of having received an initial
        event"), so it is replayed from there, not from what the server believes it
        wrote (bytes written to a connection that then broke never arrived).
        """
        if prefix is None:
            prefix = self.event_prefix(stream_id)
        return f"{prefix[:-1].decode()}~{after_seq}"

    def parse_link_token(self, token: str) -> tuple[str, int] | None:
        """(stream_id, after_seq) for a genuine link token, None for anything else."""
        if len(token) > MAX_LINK_TOKEN_LENGTH or not token.isascii():
            return None
        signed, tilde, after = token.rpartition("~")
        if tilde and len(after) <= 18 and _DIGITS.fullmatch(after):
            stream_id = self._signed_name(signed)
            return None if stream_id is None else (stream_id, int(after))
        return self._parse_legacy_link_token(token)

    def _signed_name(self, signed: str) -> str | None:
        """The stream id of a genuine `<stream_id>.<sig>`, else None (checked in constant time)."""
        stream_id, dot, sig = signed.rpartition(".")
        if not dot or not _STREAM_ID.fullmatch(stream_id):
            return None
        name = stream_id.encode()
        if not hmac.compare_digest(sig.encode(), _signature(self._event_key, name)):
            return None
        return stream_id

    def _parse_legacy_link_token(self, token: str) -> tuple[str, int] | None:
        """A link token of the release before one HMAC per request, `<stream_id>~<after_seq>.<sig>`
        signed with the link key: a client may resume across the upgrade. Every stream such a link
        names was opened before the upgrade, and is gone once its retention (`retain_completed_s`,
        or its session's TTL) has passed: this can be deleted one release later."""
        value, dot, sig = token.rpartition(".")
        if not dot or not hmac.compare_digest(sig.encode(), _signature(self._link_key, value.encode())):
            return None
        stream_id, tilde, after = value.partition("~")
        if (
            not tilde
            or not _STREAM_ID.fullmatch(stream_id)
            or len(after) > 18
            or not _DIGITS.fullmatch(after)
        ):
            return None
        return stream_id, int(after)


def _builtin_sha256() -> Callable[[bytes], Any]:
    """CPython's own SHA-256 (`_sha2` from 3.12, `_sha256` before), else hashlib's (OpenSSL).

    Measured inside a request (caches cold after a millisecond of other work), one HMAC
    through OpenSSL 3 (`hmac.digest`, `hmac.new`) costs ~20 us of CPU, its provider lookup
    and dispatch being most of it; the same HMAC from copies of two SHA-256 states of the
    interpreter's own costs ~5 us. Both give the same bytes (tests/test_wire_tokens_links.py).
    """
    for name in ("_sha2", "_sha256"):
        try:
            return importlib.import_module(name).sha256  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            continue
    return hashlib.sha256


_SHA256 = _builtin_sha256()
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


class _HmacSha256:
    """HMAC-SHA256 under one key (RFC 2104), its two padded-key states hashed once: a MAC
    is then two copies, two updates and two digests."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > 64:
            key = hashlib.sha256(key).digest()
        key = key.ljust(64, b"\0")
        self._inner = _SHA256(key.translate(_IPAD))
        self._outer = _SHA256(key.translate(_OPAD))

    def digest(self, value: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(value)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()  # type: ignore[no-any-return]


def _signature(mac: _HmacSha256, value: bytes) -> bytes:
    """itsdangerous's `Signer` signature of `value` (HMAC-SHA256, URL-safe base64, unpadded):
    the tokens earlier releases minted still verify."""
    return binascii.b2a_base64(mac.digest(value), newline=False).rstrip(b"=").translate(_URL_SAFE)
