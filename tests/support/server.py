"""Run an ASGI app under uvicorn on 127.0.0.1 for end-to-end tests.

Three flavours, all with the same guarantees: the app's lifespan runs
(``lifespan="on"``, a startup failure raises), the listening socket is bound
before uvicorn starts (so there is no free-port race) and the port accepts
connections before the context manager yields, and shutdown is bounded
(graceful for ``graceful_shutdown`` seconds, then forced).

* :func:`serve_in_thread` (sync) / :func:`serve` (async, any anyio backend):
  uvicorn in a background thread with its own asyncio loop.
* :func:`serve_in_loop` (async, asyncio backend only): uvicorn in the current
  event loop, for tests that want to share loop-bound objects with the app.
* :func:`serve_subprocess_sync` (sync) / :func:`serve_subprocess` (async): uvicorn in a
  child process built from an import string ``"module:factory"``; the child is
  killed on exit (and exits by itself if the test process dies).
* :func:`serve_granian` (async): the same with granian (one worker process) instead
  of uvicorn.

Each yields a :class:`ServerInfo` (``.base_url``, ``.mcp_url``, ``.port``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from starlette.types import ASGIApp

from tests.support import forkserver
from tests.support.timing import scaled

HOST = "127.0.0.1"
DEFAULT_GRACEFUL_SHUTDOWN = 1.0
"""Seconds uvicorn waits for open responses (e.g. SSE streams) before cancelling them."""
DEFAULT_STARTUP_TIMEOUT = 30.0
"""Seconds a server may take to start on a quiet machine (a child process imports the `mcp` SDK),
times `tests.support.timing.SCALE`."""
STOP_MARGIN = 5.0
"""Seconds beyond the graceful shutdown a server may take to stop (scaled)."""
REPO_ROOT = Path(__file__).resolve().parents[2]
READY_PREFIX = "MCP-TEST-SERVER-READY"

AppSource = ASGIApp | str
"""An ASGI app instance, or an import string ``"module:factory"`` (the factory is called)."""


class ServerStartError(RuntimeError):
    """The server did not start (lifespan startup failed, import error, timeout...)."""


@dataclass(frozen=True)
class ServerInfo:
    """Where a test server listens."""

    host: str
    port: int

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash)."""
        return f"http://{self.host}:{self.port}"

    @property
    def mcp_url(self) -> str:
        """``<base_url>/mcp``."""
        return f"{self.base_url}/mcp"


def load_app(source: AppSource, factory_kwargs: Mapping[str, Any] | None = None) -> ASGIApp:
    """Resolve an :data:`AppSource`: import ``"module:factory"`` and call it, or return the app itself."""
    if not isinstance(source, str):
        if factory_kwargs:
            raise TypeError("factory_kwargs only apply to an import string source")
        return source
    module_name, sep, attr = source.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected 'module:factory', got {source!r}")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    factory: Callable[..., ASGIApp] = target
    return factory(**dict(factory_kwargs or {}))


def bind_socket(host: str = HOST, port: int = 0, *, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port=0``: a free port); SO_REUSEADDR is set.

    ``reuse_port`` also sets SO_REUSEPORT, so several servers (e.g. subprocesses)
    can listen on the same port and the kernel spreads connections over them.
    """
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted sockets only when the
    # listening socket names its protocol, and without it every SSE answer waits ~40 ms
    # for Nagle/delayed-ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def wait_for_port(host: str, port: int, timeout: float = 5.0) -> None:
    """Block until ``host:port`` accepts a TCP connection (raises :class:`TimeoutError`).

    ``timeout`` is scaled for the machine's load (`tests.support.timing`).
    """
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{host}:{port} did not accept connections within {timeout}s") from None
            time.sleep(0.02)


class _QuietServer(uvicorn.Server):
    """A uvicorn server that never touches signal handlers (tests own them)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _make_config(app: ASGIApp, graceful_shutdown: float, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        lifespan="on",
        log_config=None,  # do not reconfigure the test process's logging
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=max(graceful_shutdown, 0.01),  # type: ignore[arg-type]  # float is fine
        # Keep idle keep-alive connections around for a while so that the proxy
        # tests are not disturbed by server-side idle closes.
        timeout_keep_alive=30,
    )


class ThreadedServer:
    """uvicorn serving ``app`` in a daemon thread with its own asyncio loop.

    Use :func:`serve_in_thread` / :func:`serve` rather than this class directly,
    unless you need ``start()`` / ``stop()`` at arbitrary points (e.g. to
    restart a server on the same port: pass ``port=old.port``).
    """

    def __init__(
        self,
        app: AppSource,
        *,
        factory_kwargs: Mapping[str, Any] | None = None,
        host: str = HOST,
        port: int = 0,
        graceful_shutdown: float = DEFAULT_GRACEFUL_SHUTDOWN,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        log_level: str = "warning",
    ) -> None:
        if not isinstance(app, str) and factory_kwargs:
            raise TypeError("factory_kwargs only apply to an import string source")
        self._source = app
        self._factory_kwargs = dict(factory_kwargs or {})
        self._app: ASGIApp | None = None if isinstance(app, str) else app
        self._host = host
        self._port = port
        self._graceful = graceful_shutdown
        self._startup_timeout = scaled(startup_timeout)
        self._log_level = log_level
        self._server: _QuietServer | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.info: ServerInfo | None = None

    @property
    def app(self) -> ASGIApp:
        """The ASGI app being served (for an import string: built by ``start()``)."""
        if self._app is None:
            raise RuntimeError("the app is built when the server starts")
        return self._app

    async def _serve(self, sock: socket.socket) -> None:
        # An import-string app is built here, inside the server's own asyncio
        # loop: anyio primitives created by the app then belong to this loop
        # even when the test itself runs on trio.
        app = load_app(self._source, self._factory_kwargs)
        self._app = app
        server = _QuietServer(_make_config(app, self._graceful, self._log_level))
        self._server = server
        await server.serve(sockets=[sock])

    def _run(self, sock: socket.socket) -> None:
        try:
            asyncio.run(self._serve(sock))
        except BaseException as exc:  # SystemExit on lifespan startup failure, import errors...
            self._error = exc
        finally:
            sock.close()

    def start(self) -> ServerInfo:
        """Start serving; returns once the lifespan ran and the port accepts connections."""
        if self._thread is not None:
            raise RuntimeError("ThreadedServer can only be started once")
        sock = bind_socket(self._host, self._port)
        info = ServerInfo(self._host, sock.getsockname()[1])
        self._thread = thread = threading.Thread(
            target=self._run, args=(sock,), name=f"uvicorn-{info.port}", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + self._startup_timeout
        while self._server is None or not self._server.started:
            if not thread.is_alive():
                raise ServerStartError(f"server on port {info.port} exited during startup") from self._error
            if time.monotonic() >= deadline:
                self.stop()
                raise ServerStartError(
                    f"server on port {info.port} did not start within {self._startup_timeout:.1f}s"
                )
            time.sleep(0.01)
        wait_for_port(info.host, info.port)
        self.info = info
        return info

    def stop(self) -> None:
        """Shut down: graceful for ``graceful_shutdown`` seconds, then forced. Idempotent."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        server = self._server
        if server is None:  # still importing / building the app
            thread.join(self._startup_timeout)
            server = self._server
        if server is not None:
            server.should_exit = True
        thread.join(self._graceful + scaled(STOP_MARGIN))
        if thread.is_alive() and server is not None:
            server.force_exit = True
            thread.join(scaled(STOP_MARGIN))
        if thread.is_alive():
            raise RuntimeError(f"uvicorn thread {thread.name} did not stop")

    def __enter__(self) -> ThreadedServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> ThreadedServer:
        await anyio.to_thread.run_sync(self.start)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop)


@contextlib.contextmanager
def serve_in_thread(
    app: AppSource,
    *,
    factory_kwargs: Mapping[str, Any] | None = None,
    port: int = 0,
    graceful_shutdown: float = DEFAULT_GRACEFUL_SHUTDOWN,
    log_level: str = "warning",
) -> Iterator[ServerInfo]:
    """Sync context manager: serve ``app`` in a background thread, yield its :class:`ServerInfo`."""
    server = ThreadedServer(
        app,
        factory_kwargs=factory_kwargs,
        port=port,
        graceful_shutdown=graceful_shutdown,
        log_level=log_level,
    )
    info = server.start()
    try:
        yield info
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def serve(
    app: AppSource,
    *,
    factory_kwargs: Mapping[str, Any] | None = None,
    port: int = 0,
    graceful_shutdown: float = DEFAULT_GRACEFUL_SHUTDOWN,
    log_level: str = "warning",
) -> AsyncIterator[ServerInfo]:
    """Async context manager (asyncio or trio): serve ``app`` in a background thread.

    The server has its own event loop, so nothing the test does in its loop can
    stall it (and vice versa).
    """
    server = ThreadedServer(
        app,
        factory_kwargs=factory_kwargs,
        port=port,
        graceful_shutdown=graceful_shutdown,
        log_level=log_level,
    )
    info = await anyio.to_thread.run_sync(server.start)
    try:
        yield info
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(server.stop)


@contextlib.asynccontextmanager
async def serve_in_loop(
    app: AppSource,
    *,
    factory_kwargs: Mapping[str, Any] | None = None,
    port: int = 0,
    graceful_shutdown: float = DEFAULT_GRACEFUL_SHUTDOWN,
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
    log_level: str = "warning",
) -> AsyncIterator[ServerInfo]:
    """Async context manager, asyncio backend only: serve ``app`` in the current event loop."""
    asyncio.get_running_loop()  # raises RuntimeError under trio
    server = _QuietServer(_make_config(load_app(app, factory_kwargs), graceful_shutdown, log_level))
    sock = bind_socket(HOST, port)
    info = ServerInfo(HOST, sock.getsockname()[1])
    done = anyio.Event()
    error: list[BaseException] = []

    async def run() -> None:
        try:
            await server.serve(sockets=[sock])
        except BaseException as exc:  # SystemExit on lifespan startup failure
            error.append(exc)
        finally:
            sock.close()
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            with anyio.fail_after(scaled(startup_timeout)):
                while not server.started:
                    if done.is_set():
                        raise ServerStartError(f"server on port {info.port} exited during startup") from (
                            error[0] if error else None
                        )
                    await anyio.sleep(0.01)
        except BaseException:
            server.should_exit = True
            tg.cancel_scope.cancel()
            raise
        try:
            yield info
        finally:
            server.should_exit = True
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(graceful_shutdown + scaled(STOP_MARGIN)):
                    await done.wait()
                if not done.is_set():
                    server.force_exit = True
                    with anyio.move_on_after(scaled(STOP_MARGIN)):
                        await done.wait()
            tg.cancel_scope.cancel()


# --------------------------------------------------------------------------- subprocess


class SubprocessServer:
    """uvicorn serving ``module:factory`` in a child Python process.

    The child binds the socket itself and reports ``READY <port>`` on stdout
    once the app's lifespan has started; it also watches its stdin and exits
    when the parent goes away. Use :func:`serve_subprocess_sync` / :func:`serve_subprocess`,
    or ``start()`` / ``stop()`` / ``kill()`` directly (e.g. to crash a server
    and restart another one on the same port with ``port=old.port``).

    Subclasses run another server: ``RUNNER`` is the child's entry module (same
    arguments and ready line as ``tests.support._uvicorn_main``); ``OWN_SESSION`` puts
    the child in a process group of its own, which ``kill()`` kills whole (for servers
    that fork workers).
    """

    RUNNER = "tests.support._uvicorn_main"
    OWN_SESSION = False
    #: The child's interpreter (None: this one); another venv's, to serve another `mcp`.
    PYTHON: str | None = None

    def __init__(
        self,
        target: str,
        *,
        factory_kwargs: Mapping[str, Any] | None = None,
        port: int = 0,
        reuse_port: bool = False,
        env: Mapping[str, str] | None = None,
        graceful_shutdown: float = DEFAULT_GRACEFUL_SHUTDOWN,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        log_level: str = "warning",
    ) -> None:
        if ":" not in target:
            raise ValueError(f"expected 'module:factory', got {target!r}")
        self.target = target
        self._factory_kwargs = dict(factory_kwargs or {})
        self._port = port
        self._reuse_port = reuse_port
        self._env = dict(env or {})
        self._graceful = graceful_shutdown
        self._startup_timeout = scaled(startup_timeout)
        self._log_level = log_level
        self._proc: subprocess.Popen[str] | None = None
        self._stdout_lines: queue.Queue[str | None] = queue.Queue()
        self._pump: threading.Thread | None = None
        self.info: ServerInfo | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id (None before ``start()``)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The child's exit status, or None while it runs."""
        return self._proc.poll() if self._proc is not None else None

    def _pump_stdout(self, proc: subprocess.Popen[str]) -> None:
        stdout = proc.stdout
        assert stdout is not None
        try:
            for line in stdout:
                self._stdout_lines.put(line.rstrip("\n"))
        except (OSError, ValueError):
            pass
        finally:
            stdout.close()
            self._stdout_lines.put(None)

    def start(self) -> ServerInfo:
        """Spawn the child; returns once it reported readiness and the port accepts connections."""
        if self._proc is not None:
            raise RuntimeError("SubprocessServer can only be started once")
        env = {**os.environ, **self._env}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        cmd = [
            self.PYTHON or sys.executable,
            "-m",
            self.RUNNER,
            self.target,
            "--port",
            str(self._port),
            "--factory-kwargs",
            json.dumps(self._factory_kwargs),
            "--graceful-shutdown",
            str(self._graceful),
            "--log-level",
            self._log_level,
        ]
        if self._reuse_port:
            cmd.append("--reuse-port")
        self._proc = proc = forkserver.popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # inherited: pytest's fd-level capture shows it on failure
            text=True,
            cwd=str(REPO_ROOT),
            env=env,
            start_new_session=self.OWN_SESSION,
        )
        self._pump = threading.Thread(target=self._pump_stdout, args=(proc,), daemon=True)
        self._pump.start()
        deadline = time.monotonic() + self._startup_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise ServerStartError(
                    f"{self.target} did not become ready within {self._startup_timeout:.1f}s"
                )
            try:
                line = self._stdout_lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                code = proc.wait()
                raise ServerStartError(f"{self.target} exited during startup with status {code}")
            if line.startswith(READY_PREFIX):
                port = int(line.split()[1])
                break
        info = ServerInfo(HOST, port)
        wait_for_port(info.host, info.port)
        self.info = info
        return info

    def stop(self) -> None:
        """Graceful stop (SIGTERM), bounded; SIGKILL if the child does not exit in time. Idempotent."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            self._close_pipes()
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(self._graceful + scaled(STOP_MARGIN))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(scaled(STOP_MARGIN))
        self._close_pipes()

    def signal(self, sig: int) -> None:
        """Send `sig` to the child (a server's own shutdown signal: SIGTERM, SIGINT)."""
        assert self._proc is not None
        self._proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """The child's exit status, once it exited (raises `subprocess.TimeoutExpired` after `timeout`)."""
        assert self._proc is not None
        return self._proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the child immediately (simulates a crash). Idempotent."""
        proc = self._proc
        if proc is not None and self.OWN_SESSION:
            with contextlib.suppress(ProcessLookupError):  # the group outlives its leader
                os.killpg(proc.pid, signal.SIGKILL)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(scaled(STOP_MARGIN))
        self._close_pipes()

    def _close_pipes(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        if self._pump is not None:
            self._pump.join(scaled(STOP_MARGIN))

    def __enter__(self) -> SubprocessServer:
        try:
            self.start()
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()

    async def __aenter__(self) -> SubprocessServer:
        try:
            await anyio.to_thread.run_sync(self.start)
        except BaseException:
            self.kill()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(self.stop)
            finally:
                self.kill()


@contextlib.contextmanager
def serve_subprocess_sync(
    target: str,
    *,
    factory_kwargs: Mapping[str, Any] | None = None,
    port: int = 0,
    reuse_port: bool = False,
    env: Mapping[str, str] | None = None,
    graceful_shutdown: float = DEFAULT_GRACEFUL_SHUTDOWN,
    log_level: str = "warning",
) -> Iterator[ServerInfo]:
    """Sync context manager: serve ``"module:factory"`` in a child process; always killed on exit."""
    server = SubprocessServer(
        target,
        factory_kwargs=factory_kwargs,
        port=port,
        reuse_port=reuse_port,
        env=env,
        graceful_shutdown=graceful_shutdown,
        log_level=log_level,
    )
    try:
        yield server.start()
    finally:
        try:
            server.stop()
        finally:
            server.kill()


@contextlib.asynccontextmanager
async def serve_subprocess(
    target: str,
    *,
    factory_kwargs: Mapping[str, Any] | None = None,
    port: int = 0,
    reuse_port: bool = False,
    env: Mapping[str, str] | None = None,
    graceful_shutdown: float = DEFAULT_GRACEFUL_SHUTDOWN,
    log_level: str = "warning",
) -> AsyncIterator[ServerInfo]:
    """Async context manager (asyncio or trio): serve ``"module:factory"`` in a child process."""
    server = SubprocessServer(
        target,
        factory_kwargs=factory_kwargs,
        port=port,
        reuse_port=reuse_port,
        env=env,
        graceful_shutdown=graceful_shutdown,
        log_level=log_level,
    )
    try:
        yield await anyio.to_thread.run_sync(server.start)
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(server.stop)
            finally:
                server.kill()


class GranianServer(SubprocessServer):
    """granian (ASGI interface, one worker process) serving ``module:factory`` in a child process."""

    RUNNER = "tests.support._granian_main"
    OWN_SESSION = True


class HypercornServer(SubprocessServer):
    """hypercorn (asyncio, its own signal handlers) serving ``module:factory`` in a child process."""

    RUNNER = "tests.support._hypercorn_main"


@contextlib.asynccontextmanager
async def serve_granian(
    target: str,
    *,
    factory_kwargs: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    graceful_shutdown: float = DEFAULT_GRACEFUL_SHUTDOWN,
    log_level: str = "warning",
) -> AsyncIterator[ServerInfo]:
    """Async context manager (asyncio or trio): serve ``"module:factory"`` under granian."""
    server = GranianServer(
        target,
        factory_kwargs=factory_kwargs,
        env=env,
        graceful_shutdown=graceful_shutdown,
        log_level=log_level,
    )
    try:
        yield await anyio.to_thread.run_sync(server.start)
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(server.stop)
            finally:
                server.kill()
