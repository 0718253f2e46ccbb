"""Encryption of what the store and its pub/sub carry, with a key the app's nodes share.

The seals (`relay_seal.py`, a stored re-run request's) say who wrote a message; they hide
nothing. Whoever can read the store (a replica, a backup, `MONITOR`, a subscriber to a node's
channel) reads stored requests with their bearer tokens and cookies, the app's answers in the
events, and relayed requests and answers in the clear. With an `encryption_key`, the store
wrapper (`store/encrypted.py`) encrypts each of them with this cipher before it leaves the
process, and opens what it reads back.

AES-SIV (RFC 5297, from the `cryptography` package: the `encryption` extra): authenticated,
and deterministic - one plaintext under one context always gives one ciphertext - which the
store's compare-and-set (`replace_key`, a retried `append` checked against what it wrote) needs,
since it compares what is stored. What that tells a reader (two equal values under one key or
one event seq are equal) is all it tells. Each ciphertext is bound to its context (the key's
name, the stream and seq of an event, the channel of a message): moved elsewhere it does not
open. The key is derived from the configured one (HKDF-SHA256), so any string of 16 or more
characters will do, as for the secret.

Plain data in, plain data out: no I/O.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MARK", "StoreCipher"]

#: The start of every ciphertext: a value without it is not one of ours (written in the clear,
#: or by an attacker) and is refused, never taken as plaintext.
MARK = b"mre1:"
_INFO = b"mcp-resume-asgi/store-encryption/aes-siv-256"


class StoreCipher:
    """Encrypts and opens the store's values (see the module docstring)."""

    def __init__(self, key: str | bytes) -> None:
        if isinstance(key, str):
            key = key.encode("utf-8")
        if not isinstance(key, bytes) or len(key) < 16:
            raise ValueError("the encryption key must be at least 16 characters or bytes")
        try:
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.ciphers.aead import AESSIV
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF
        except ImportError as exc:  # pragma: no cover - the extra is missing
            raise ImportError(
                "encryption_key needs the `cryptography` package: pip install 'mcp-resume-asgi[encryption]'"
            ) from exc
        derived = HKDF(algorithm=hashes.SHA256(), length=64, salt=None, info=_INFO).derive(key)
        self._aead: Any = AESSIV(derived)
        self._invalid: type[Exception] = InvalidTag

    def encrypt(self, context: bytes, data: bytes) -> bytes:
        """`data` encrypted for `context` (the same `data` and `context`: the same bytes)."""
        sealed: bytes = self._aead.encrypt(data, [context])
        return MARK + sealed

    def decrypt(self, context: bytes, blob: bytes) -> bytes | None:
        """What `encrypt(context, ...)` made `blob` of; None when it is not one of ours, was
        made with another key or for another context, or was altered."""
        if not blob.startswith(MARK):
            return None
        try:
            data: bytes = self._aead.decrypt(blob[len(MARK) :], [context])
        except (self._invalid, ValueError):
            return None
        return data
