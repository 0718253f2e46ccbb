"""Which stores the tests can run against here: memory always, Redis when one answers.

Under `CI=true` a missing Redis is a failure, not a skip: CI must prove both stores.
"""

from __future__ import annotations

import functools
import os

import pytest

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI") == "true"


@functools.cache
def redis_unavailable() -> str | None:
    """Why the Redis cases cannot run here, or None when they can."""
    try:
        import redis
    except ImportError:
        return "the redis client is not installed (pip install 'mcp-resume-asgi[redis]')"
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        return f"no Redis answering at {REDIS_URL}: {exc}"
    return None


def require_redis() -> None:
    """Skip the calling test without Redis (fail under CI=true)."""
    reason = redis_unavailable()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
