"""Shared pytest configuration: the run's Redis, its time scale, and no unhandled ASGI errors.

The run (pytest's controller: a serial run, or the process that starts the xdist workers)
starts the suite's own `redis-server` before any test and stops it at the end
(`tests/support/stores.py`); it measures how much to stretch every wait once
(`tests/support/timing.py`). Both reach the workers through `workerinput` and, from
there, every child server through the environment.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import stores, timing
from tests.support.redis_server import RedisClusterServers, RedisServerMissing, SuiteRedis, start_cluster

#: What the run hands on to its workers (and they to their child processes) as environment.
SHARED_ENV = (
    timing.ENV,
    stores.RUN_ENV,
    stores.SUITE_URL_ENV,
    stores.UNAVAILABLE_ENV,
)
_SUITE_REDIS = pytest.StashKey[SuiteRedis | None]()

#: What uvicorn and hypercorn log when an ASGI app raises: a crash of ours, never allowed.
UNHANDLED = "Exception in ASGI application"
#: The same from granian (tests/test_granian.py), on the inherited stderr of its child process.
UNHANDLED_GRANIAN = "Application callable raised an exception"


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """A Redis Cluster of three primaries with a replica each (`RedisClusterServers`), started
    the first time a test of this session (this xdist worker) asks for it and stopped when
    the session ends. Skips without `redis-server`; fails instead under `CI=true`."""
    try:
        cluster = start_cluster()
    except RedisServerMissing as exc:
        if stores.IN_CI:
            pytest.fail(f"CI=true but {exc}")
        pytest.skip(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(redis_cluster: RedisClusterServers) -> str:
    """The URL of one primary of the session's Redis Cluster (`redis_cluster`)."""
    return redis_cluster.url


@pytest.fixture
def anyio_backend() -> str:
    """Run ``@pytest.mark.anyio`` tests on asyncio (uvicorn-based servers need it in-loop)."""
    return "asyncio"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak", action="store_true", default=False, help="run the long fault tests (1000 calls)"
    )


def pytest_configure(config: pytest.Config) -> None:
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker: the run was set up by the controller
        for name in SHARED_ENV:
            value = workerinput.get(name)
            if value is not None:
                os.environ[name] = value
            else:
                os.environ.pop(name, None)
        timing.SCALE = timing.from_environment()
        return
    os.environ.setdefault(timing.ENV, f"{timing.SCALE:.2f}")
    config.stash[_SUITE_REDIS] = stores.start_run()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(xdist, in the controller) what each worker is told about the run."""
    for name in SHARED_ENV:
        if name in os.environ:
            node.workerinput[name] = os.environ[name]


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is not None or _SUITE_REDIS not in config.stash:
        return
    deleted = stores.end_run(config.stash[_SUITE_REDIS])
    if deleted:
        sys.stderr.write(f"\ndeleted the {deleted} keys this run wrote under {stores.run_prefix()}\n")


def pytest_report_header(config: pytest.Config) -> list[str]:
    url = os.environ.get(stores.SUITE_URL_ENV)
    redis = url or os.environ.get(stores.UNAVAILABLE_ENV, "none")
    return [f"redis: {redis}; waits scaled x{timing.SCALE:.2f} ({timing.ENV})"]


#: The test files that take longest, longest first: each starts its own servers, npm peers or
#: venvs and runs for minutes of waiting (`pytest --durations=0`, summed per file). They are
#: collected first, and scripts/test.sh hands files to the xdist workers in collection order
#: (`--no-loadscope-reorder`; xdist's own order is most tests first, which put these last), so
#: none of them starts last while the other workers sit idle. A stale list only costs wall time.
LONGEST_FILES = (
    "test_proxy_e2e.py",
    "test_proxy_e2e_ts.py",
    "test_conformance_requirements.py",
    "test_proxy_hostile.py",
    "test_tasks_result_races.py",
    "test_tasks_faults.py",
    "test_wheel_install.py",
    "test_conformance.py",
    "test_conformance_tasks.py",
    "test_conformance_sse_polling.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (`LONGEST_FILES`, each file's tests in their order); every test's
    pytest-timeout scaled like every other wait."""
    rank = {name: index for index, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keeps its order
    if timing.SCALE == 1:
        return
    try:
        from pytest_timeout import get_env_settings
    except ImportError:
        return
    default = get_env_settings(config).timeout
    for item in items:
        marker = item.get_closest_marker("timeout")
        kwargs: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
        seconds = (marker.args[0] if marker.args else kwargs.pop("timeout", None)) if marker else default
        kwargs.pop("timeout", None)
        if seconds:
            item.add_marker(pytest.mark.timeout(timing.scaled(float(seconds)), **kwargs), append=False)


@pytest.fixture(autouse=True)
def no_unhandled_asgi_errors(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> Iterator[None]:
    """Fail a test during which a server (in process or a child process) saw the app raise.

    Servers in child processes write to the inherited stderr, which `capfd` sees; in
    process, uvicorn logs through `logging`, which `caplog` sees.
    """
    capfd: pytest.CaptureFixture[str] | None = None
    if "capsys" not in request.fixturenames and "capsysbinary" not in request.fixturenames:
        capfd = request.getfixturevalue("capfd")
    caplog.set_level(logging.ERROR, logger="uvicorn.error")
    yield
    err = ""
    if capfd is not None:
        out, err = capfd.readouterr()
        sys.stdout.write(out)
        sys.stderr.write(err)
    logged = [r.getMessage() for r in caplog.records if UNHANDLED in r.getMessage()]
    crashed = UNHANDLED in err or UNHANDLED_GRANIAN in err
    assert not logged and not crashed, (
        f"a server saw an unhandled exception:\n{err[-6000:] if crashed else logged}"
    )
