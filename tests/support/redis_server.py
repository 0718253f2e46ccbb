"""`redis-server` processes the suite starts itself, on free loopback ports, and stops.

Two uses, one class:

* **the suite's Redis**: `start_suite_redis()` starts it once per run (in pytest's controller,
  `conftest.py`) and every Redis test uses it through `tests.support.stores`. Its topology
  is a name in `TOPOLOGIES`: `"single"`, or `"cluster"` (`RedisClusterServers`: three
  primaries with a replica each), the same `url` / `stop()`.
* **the suite's Redis Cluster**, for the tests that run on one (`tests/conftest.py`'s
  session fixture `redis_cluster_url`): started the first time a test of the session asks
  for it, stopped when the session ends.
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


#: How many times a server's first start picks its ports again when one was taken meanwhile.
PORT_ATTEMPTS = 4


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
        self.started = False
        """It ran once: a restart (after `kill`) keeps its ports."""
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
        """Start it (again, on the same port); returns once it answers PING.

        Its ports were free when picked; another process on the machine may have taken one
        since. On its first start, a port found taken is picked again (a few times)."""
        for attempt in range(PORT_ATTEMPTS):
            try:
                self._start()
            except RuntimeError as exc:
                if self.started or "Address already in use" not in str(exc) or attempt == PORT_ATTEMPTS - 1:
                    raise
                self._pick_ports()
            else:
                self.started = True
                return

    def _pick_ports(self) -> None:
        self.port = free_port()
        args = list(self.extra_args)
        for i, arg in enumerate(args[:-1]):
            if arg == "--cluster-port":
                args[i + 1] = str(free_port())
        self.extra_args = tuple(args)

    def _start(self) -> None:
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


CLUSTER_NODE_TIMEOUT_MS = 2000
"""The cluster's `cluster-node-timeout`: how long a primary may be silent before it is failed over."""


class RedisClusterServers:
    """A Redis Cluster of `primaries` primaries with `replicas` replicas each, on free loopback
    ports: `redis-server --cluster-enabled yes` processes joined by `redis-cli --cluster create`.

    `start()` returns once every node reports `cluster_state:ok`; `stop()` kills every node and
    removes their directories. `url` names one primary: a cluster client finds the others.
    """

    def __init__(self, *, primaries: int = 3, replicas: int = 1, name: str = "cluster") -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RedisServerMissing("redis-cli is not installed (apt-get install redis-server brings it)")
        self.cli = cli
        self.primaries = primaries
        self.replicas = replicas
        self.nodes = [
            RedisServer(
                name=f"{name}{i}",
                extra_args=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(CLUSTER_NODE_TIMEOUT_MS),
                    # The bus port is the client port + 10000 unless given: a free one instead.
                    "--cluster-port",
                    str(free_port()),
                    # A replica's first sync starts at once (not after the 5 s default).
                    "--repl-diskless-sync-delay",
                    "0",
                ),
            )
            for i in range(primaries * (1 + replicas))
        ]
        for node in self.nodes:
            node.die_with_parent = True

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> None:
        try:
            for node in self.nodes:
                node.start()
            create = [
                self.cli,
                "--cluster",
                "create",
                *(f"{HOST}:{node.port}" for node in self.nodes),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ]
            done = subprocess.run(
                create, capture_output=True, timeout=scaled(60), stdin=subprocess.DEVNULL, check=False
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"redis-cli --cluster create failed:\n{done.stdout.decode()}{done.stderr.decode()}"
                )
            deadline = time.monotonic() + scaled(START_TIMEOUT_S * 3)
            while not self._ready():
                if time.monotonic() > deadline:
                    raise RuntimeError("the Redis Cluster did not come up with every replica in sync")
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    def _ask(self, node: RedisServer, *command: str) -> bytes:
        done = subprocess.run(
            [self.cli, "-h", HOST, "-p", str(node.port), *command],
            capture_output=True,
            timeout=scaled(5),
            check=False,
        )
        return done.stdout

    def _ready(self) -> bool:
        """Every node sees the cluster ok and every replica as one (gossip takes a moment to tell
        them all), and every replica's link to its primary is up."""
        replicas = self.primaries * self.replicas
        linked = 0
        for node in self.nodes:
            if b"cluster_state:ok" not in self._ask(node, "cluster", "info"):
                return False
            view = [line.split() for line in self._ask(node, "cluster", "nodes").splitlines()]
            if sum(len(f) > 2 and b"slave" in f[2] for f in view) != replicas:
                return False
            linked += b"master_link_status:up" in self._ask(node, "info", "replication")
        return linked == replicas

    def stop(self) -> None:
        """Kill every node and remove their directories. Idempotent."""
        for node in self.nodes:
            node.stop()


def _cluster() -> SuiteRedis:
    cluster = RedisClusterServers()
    cluster.start()
    return cluster


def start_cluster() -> RedisClusterServers:
    """Start a Redis Cluster of three primaries with a replica each (raises `RedisServerMissing`)."""
    binary()
    cluster = RedisClusterServers()
    cluster.start()
    return cluster


TOPOLOGIES: dict[str, Callable[[], SuiteRedis]] = {"single": _single, "cluster": _cluster}
"""How each topology the suite can run its Redis tests on is started."""


def start_suite_redis(topology: str = "single") -> SuiteRedis:
    """Start the suite's Redis (raises `RedisServerMissing`, or RuntimeError if it fails)."""
    try:
        start = TOPOLOGIES[topology]
    except KeyError:
        raise ValueError(f"unknown Redis topology {topology!r}; known: {sorted(TOPOLOGIES)}") from None
    return start()
