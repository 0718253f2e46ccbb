"""`redis-server` processes the suite starts itself, on free loopback ports, and stops.

Two uses, one class:

* **the suite's Redis**: `start_suite_redis()` starts it once per run (in pytest's controller,
  `conftest.py`) and every Redis test uses it through `tests.support.stores`. Its topology
  is a name in `TOPOLOGIES` (only `"single"` today); a Redis Cluster of three primaries
  started the same way is another entry there, another `SuiteRedis`, with the same
  `url` / `stop()`.
* **a test's own Redis**, for tests that kill and restart it (`own_redis()`): `kill()` is a
  SIGKILL, `start()` runs it again on the same port.

Each server runs in a temporary directory of its own (its log, and its append-only file
when `durable`), removed when it is stopped. Without `durable` nothing is persisted
(`--save "" --appendonly no`): a restart forgets everything, as a cache would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

from tests.support.timing import scaled

HOST = "127.0.0.1"
IN_CI = os.environ.get("CI") == "true"
START_TIMEOUT_S = 10.0
"""How long a quiet machine may take to start redis-server (scaled)."""


class RedisServerMissing(RuntimeError):
    """There is no `redis-server` binary on the PATH."""


def binary() -> str:
    """The `redis-server` to run (raises `RedisServerMissing`)."""
    found = shutil.which("redis-server")
    if found is None:
        raise RedisServerMissing("redis-server is not installed (apt-get install redis-server)")
    return found


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _ping(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One `redis-server` on a free loopback port, in a temporary directory of its own.

    `start()` returns once it answers PING; `kill()` SIGKILLs it (a crash; `start()` again
    brings it back on the same port); `stop()` kills it for good and removes its directory.
    """

    def __init__(
        self, *, durable: bool = False, extra_args: tuple[str, ...] = (), name: str = "redis"
    ) -> None:
        """`durable`: an append-only file fsynced on every write, so a restart keeps what was acknowledged."""
        self.binary = binary()
        self.durable = durable
        self.extra_args = extra_args
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"mcp-resume-test-{name}-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.die_with_parent = False
        """SIGKILL the server when the thread that started it ends (the suite's Redis, started on
        the main thread): a test run killed hard leaves no server behind."""

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def command(self) -> list[str]:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"] if self.durable else ["--appendonly", "no"]
        )
        return [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            HOST,
            "--dir",
            str(self.dir),
            "--logfile",
            "redis.log",
            "--daemonize",
            "no",
            "--save",
            "",
            *persistence,
            *self.extra_args,
        ]

    def start(self) -> None:
        """Start it (again, on the same port); returns once it answers PING."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"redis-server on port {self.port} is already running")
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if self.die_with_parent else None,
        )
        deadline = time.monotonic() + scaled(START_TIMEOUT_S)
        while not _ping(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log_tail()
                self.kill()
                raise RuntimeError(f"redis-server on port {self.port} did not start:\n{log}")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL it now (a crash). Idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(scaled(5))

    def stop(self) -> None:
        """Kill it for good and remove its directory. Idempotent."""
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join((self.dir / "redis.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _die_with_parent() -> None:
    """In the child, before exec: the kernel SIGKILLs it when the parent thread ends (Linux)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1
_PRCTL: Callable[..., int] | None = None
if sys.platform.startswith("linux"):  # looked up here, not in the forked child
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        _PRCTL = ctypes.CDLL(None, use_errno=True).prctl


# ----------------------------------------------------------------------------- a test's own
def require_binary() -> None:
    """Skip the calling test without `redis-server` (fail under CI=true)."""
    try:
        binary()
    except RedisServerMissing as exc:
        if IN_CI:
            pytest.fail(f"CI=true but {exc}")
        pytest.skip(str(exc))


@contextlib.contextmanager
def own_redis(*, durable: bool = False) -> Iterator[RedisServer]:
    """A running Redis of the calling test's own (to kill and restart), stopped on exit.

    Skips without `redis-server` (fails under CI=true).
    """
    require_binary()
    server = RedisServer(durable=durable, name="own")
    try:
        server.start()
        yield server
    finally:
        server.stop()


# ----------------------------------------------------------------------------- the suite's
class SuiteRedis(Protocol):
    """What the suite's Redis is to the suite: where it answers, and how it ends."""

    @property
    def url(self) -> str: ...

    def stop(self) -> None: ...


def _single() -> SuiteRedis:
    server = RedisServer(name="suite")
    server.die_with_parent = True
    server.start()
    return server


TOPOLOGIES: dict[str, Callable[[], SuiteRedis]] = {"single": _single}
"""How each topology the suite can run its Redis tests on is started (a cluster: later)."""


def start_suite_redis(topology: str = "single") -> SuiteRedis:
    """Start the suite's Redis (raises `RedisServerMissing`, or RuntimeError if it fails)."""
    try:
        start = TOPOLOGIES[topology]
    except KeyError:
        raise ValueError(f"unknown Redis topology {topology!r}; known: {sorted(TOPOLOGIES)}") from None
    return start()
