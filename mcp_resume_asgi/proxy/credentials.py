"""Who calls through the proxy: the credentials the upstream authenticates, as a principal.

Behind the proxy the upstream is the app's auth: it accepts or refuses every request,
and the middleware asks it before serving anything from the store (a resume, a task's
result, a REST call: `engine/admission.py` sends the client's own headers up as a
`ping`). Accepting says the credentials are good, not whose they are, so two callers
the upstream both accepts must still not read each other's streams. The proxy therefore
names the caller by its credentials: the request headers that carry them
(`Authorization`, `Cookie`, `X-API-Key` unless configured otherwise), digested with a
key, become `scope["user"]` (a `ProxiedCaller`), and the middleware binds every stream,
task and REST call to that principal (`wire/principal.py` reads `identity`). A stream is
then served only to a request that the upstream accepts *and* that carries the same
credentials as the one that started it. A request without any is anonymous (None), as
on an app without auth; a user an outer auth layer already put in the scope is kept.

The digest is an HMAC-SHA256 under the proxy's key (every node of one service shares it:
the CLI uses the service's secret), so a principal read back from the store does not
give the credentials away.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from starlette.authentication import BaseUser

__all__ = ["DEFAULT_CREDENTIAL_HEADERS", "ProxiedCaller", "caller_of"]

#: The request headers that carry credentials, unless the proxy is told others.
DEFAULT_CREDENTIAL_HEADERS = ("authorization", "cookie", "x-api-key")
_PREFIX = "proxy:"


class ProxiedCaller(BaseUser):
    """`scope["user"]` for a request with credentials: named by their digest, nothing else."""

    def __init__(self, digest: str) -> None:
        self.digest = digest

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return self.identity

    @property
    def identity(self) -> str:
        return _PREFIX + self.digest


def caller_of(
    headers: Iterable[tuple[bytes, bytes]], names: frozenset[bytes], key: bytes
) -> ProxiedCaller | None:
    """The caller the credential headers in `headers` (those in `names`) stand for, or None."""
    found = sorted((name.lower(), value) for name, value in headers if name.lower() in names)
    if not found:
        return None
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for name, value in found:
        mac.update(len(name).to_bytes(4, "big") + name + len(value).to_bytes(4, "big") + value)
    return ProxiedCaller(mac.hexdigest())
