"""Which stores the tests can run against: memory always, and the suite's Redis.

The suite starts a `redis-server` of its own for the run (`start_run` in the controller,
`tests/support/redis_server.py`) and passes its URL to xdist workers and to child servers
through the environment (`SUITE_URL_ENV`). Nothing touches the Redis on 6379.

`REDIS_URL` set in the environment points the suite at another Redis instead: then every key
the suite writes is under one prefix of the run's own (`redis_prefix`), and `end_run`
deletes them all at the end.

Without Redis (no `redis-server` binary and no `REDIS_URL`) the Redis cases skip, saying
why; under `CI=true` they fail: CI must prove both stores.
"""

from __future__ import annotations

import functools
import logging
import os
import uuid

import pytest

from tests.support.redis_server import RedisServerMissing, SuiteRedis, start_suite_redis

logger = logging.getLogger(__name__)

IN_CI = os.environ.get("CI") == "true"
EXPLICIT_ENV = "REDIS_URL"
"""A Redis the user points the suite at (kept, cleaned of the run's keys afterwards)."""
SUITE_URL_ENV = "MCP_RESUME_TEST_REDIS_URL"
"""Set by the run for its workers and child servers: the Redis every Redis test uses."""
UNAVAILABLE_ENV = "MCP_RESUME_TEST_REDIS_UNAVAILABLE"
"""Set by the run instead when it has no Redis: why."""
RUN_ENV = "MCP_RESUME_TEST_RUN"
"""The run's id: every key the suite writes is under `mcp-resume-test:<run>:`."""


def run_prefix() -> str:
    """The key prefix of this whole run (every test's prefix starts with it)."""
    run = os.environ.get(RUN_ENV)
    if not run:  # outside a run set up by conftest.py (e.g. an app started by hand)
        run = os.environ[RUN_ENV] = uuid.uuid4().hex[:12]
    return f"mcp-resume-test:{run}:"


def redis_prefix(name: str) -> str:
    """A fresh key prefix for one test (or one fixture), under the run's prefix."""
    return f"{run_prefix()}{name}:{uuid.uuid4().hex}:"


def redis_url() -> str:
    """The Redis the tests use (call `require_redis()` first)."""
    url = os.environ.get(SUITE_URL_ENV)
    if not url:
        raise RuntimeError(f"no Redis for the tests: {redis_unavailable()}")
    return url


@functools.cache
def redis_unavailable() -> str | None:
    """Why the Redis cases cannot run here, or None when they can."""
    try:
        import redis
    except ImportError:
        return "the redis client is not installed (pip install 'mcp-resume-asgi[redis]')"
    url = os.environ.get(SUITE_URL_ENV)
    if not url:
        return os.environ.get(UNAVAILABLE_ENV) or "the run started no Redis (see tests/conftest.py)"
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        return f"no Redis answering at {url}: {exc}"
    return None


def require_redis() -> None:
    """Skip the calling test without Redis (fail under CI=true)."""
    reason = redis_unavailable()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)


# ----------------------------------------------------------------------------- the run
def start_run() -> SuiteRedis | None:
    """Once per run, before any test (the controller): choose the Redis, tell the environment.

    Returns the server it started, to stop in `end_run` (None: an explicit `REDIS_URL`, or none).
    """
    os.environ.setdefault(RUN_ENV, uuid.uuid4().hex[:12])
    explicit = os.environ.get(EXPLICIT_ENV)
    if explicit:
        os.environ[SUITE_URL_ENV] = explicit
        return None
    try:
        server = start_suite_redis()
    except (RedisServerMissing, RuntimeError) as exc:
        os.environ.pop(SUITE_URL_ENV, None)
        os.environ[UNAVAILABLE_ENV] = f"the suite could not start its Redis: {exc}"
        return None
    os.environ[SUITE_URL_ENV] = server.url
    return server


def end_run(server: SuiteRedis | None) -> int:
    """Once per run, after every test: stop the suite's Redis, or delete what the run wrote
    in the explicit one. Returns how many keys were deleted."""
    if server is not None:
        server.stop()
        return 0
    url = os.environ.get(SUITE_URL_ENV)
    if not url or not os.environ.get(EXPLICIT_ENV):
        return 0
    return delete_prefix_sync(url, run_prefix())


def escape_glob(text: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def delete_prefix_sync(url: str, prefix: str) -> int:
    """SCAN + DEL every key under `prefix`; how many were deleted."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
    deleted = 0
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=escape_glob(prefix) + "*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += int(client.delete(*batch))
                batch.clear()
        if batch:
            deleted += int(client.delete(*batch))
    finally:
        client.close()
    return deleted
