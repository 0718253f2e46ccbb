"""The signing-key cache of `wire/tokens.py` (`_CachedKeySigner`), without an event loop.

A cached key must be the key itsdangerous itself derives for that signer: the cache is keyed
by everything `Signer.derive_key` depends on (secret, salt, key derivation, digest method),
so two signers differing in any of them never share a key, and it stays bounded.
"""

from __future__ import annotations

import hashlib

from itsdangerous import Signer

from mcp_resume_asgi.wire.tokens import _CachedKeySigner

SECRET = b"a-secret-shared-by-the-nodes"
SALT = "mcp-resume-asgi/test"


def test_signers_differing_only_in_digest_method_derive_their_own_keys() -> None:
    _CachedKeySigner._keys.clear()
    sha256 = _CachedKeySigner(SECRET, salt=SALT, digest_method=hashlib.sha256)
    sha1 = _CachedKeySigner(SECRET, salt=SALT, digest_method=hashlib.sha1)
    assert sha256.derive_key() == Signer(SECRET, salt=SALT, digest_method=hashlib.sha256).derive_key()
    assert sha1.derive_key() == Signer(SECRET, salt=SALT, digest_method=hashlib.sha1).derive_key()
    assert sha256.derive_key() != sha1.derive_key()
    signed = sha1.sign(b"value")
    assert Signer(SECRET, salt=SALT, digest_method=hashlib.sha1).unsign(signed) == b"value"


def test_signers_differing_only_in_key_derivation_derive_their_own_keys() -> None:
    _CachedKeySigner._keys.clear()
    for derivation in ("django-concat", "hmac", "concat", "none"):
        cached = _CachedKeySigner(SECRET, salt=SALT, key_derivation=derivation, digest_method=hashlib.sha256)
        plain = Signer(SECRET, salt=SALT, key_derivation=derivation, digest_method=hashlib.sha256)
        assert cached.derive_key() == plain.derive_key(), derivation
        assert cached.derive_key(b"another-secret-of-the-nodes") == plain.derive_key(
            b"another-secret-of-the-nodes"
        ), derivation


def test_the_cache_stays_bounded() -> None:
    _CachedKeySigner._keys.clear()
    for n in range(10 * _CachedKeySigner.MAX_KEYS):
        _CachedKeySigner(SECRET, salt=f"salt-{n}", digest_method=hashlib.sha256).derive_key()
        assert len(_CachedKeySigner._keys) <= _CachedKeySigner.MAX_KEYS
