"""Server child processes forked from one process that imported their libraries once.

A test's server child (`python -m tests.support._uvicorn_main ...`, `python -m
mcp_resume_asgi.cli ...`) spends most of its start importing the stock `mcp` SDK, pydantic,
uvicorn, starlette and the package: about 1.5 CPU-seconds, paid again by every node a test
starts, which is most of the suite's CPU. `popen(cmd, ...)` starts such a child by forking it
from this module's server process instead (one per pytest process, started on first use), which
imported those libraries once and nothing of the tests: the child then imports only what the
server did not (the entry module, the test app, `tests.support.*`, all reading the environment
the test gave it) and runs the entry module as ``python -m`` would.

The child is still the caller's own child as far as the kernel is concerned: the caller
becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`) and the server forks twice, the middle
process exiting at once, so the child is reparented to the caller, which waits for it, signals
it and reads its status through the `subprocess.Popen` returned (stdin, stdout and stderr are
the file descriptors the caller's `Popen` made, passed over a Unix socket). Anything else -
another interpreter, another entry module, a platform without `fork` - and any failure of the
server falls back to `subprocess.Popen` (``MCP_RESUME_TEST_FORKSERVER=0`` always does).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import runpy
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any

ENV = "MCP_RESUME_TEST_FORKSERVER"
#: The entry modules a forked child may run (each a plain ``python -m`` program).
MODULES = frozenset({"tests.support._uvicorn_main", "mcp_resume_asgi.cli"})
#: What the server imports once, before it forks anything: libraries only (nothing that reads
#: the environment when imported: a forked child keeps what its modules read then).
PRELOAD = (
    "asyncio",
    "anyio",
    "httpx",
    "uvicorn",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.lifespan.on",
    "starlette.applications",
    "starlette.routing",
    "redis.asyncio",
    "mcp.types",
    "mcp.server.lowlevel",
    "mcp.server.mcpserver",
    "mcp.server.streamable_http_manager",
    "mcp_resume_asgi",
    "mcp_resume_asgi.store",
    "mcp_resume_asgi.cli",
)
_PR_SET_CHILD_SUBREAPER = 36
_MAX_MESSAGE = 1 << 20


def _entry(cmd: Sequence[str]) -> tuple[str, list[str], bool] | None:
    """(module, its arguments, unbuffered) when `cmd` is this interpreter running an allowed module."""
    args = [str(a) for a in cmd]
    if len(args) < 3 or args[0] != sys.executable:
        return None
    unbuffered = False
    i = 1
    while args[i] == "-u":
        unbuffered, i = True, i + 1
    if args[i] != "-m" or i + 1 >= len(args) or args[i + 1] not in MODULES:
        return None
    return args[i + 1], args[i + 2 :], unbuffered


class _Client:
    """This process's connection to its fork server."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.server: subprocess.Popen[bytes] | None = None
        self.broken = False

    def connect(self) -> socket.socket | None:
        if self.sock is not None or self.broken:
            return self.sock
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            env = {k: v for k, v in os.environ.items() if k != ENV}
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
            self.server = subprocess.Popen(
                [sys.executable, "-m", "tests.support.forkserver", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd=root,
                env=env,
            )
            theirs.close()
            if _receive(ours)[0].get("ready") is not True:
                raise OSError("the fork server did not start")
            self.sock = ours
            atexit.register(self.close)
        except (OSError, ValueError, AttributeError):
            self.broken = True
        return self.sock

    def close(self) -> None:
        """Close the connection (the server exits at its end) and wait for the server: its CPU,
        and that of the middle processes it waited for, is then counted as this process's children's."""
        with self.lock:
            if self.sock is not None:
                self.sock.close()
                self.sock = None
            if self.server is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.server.wait(10)

    def spawn(self, request: dict[str, Any], fds: list[int]) -> int | None:
        with self.lock:
            sock = self.connect()
            if sock is None:
                return None
            try:
                _send(sock, request, fds)
                answer, _ = _receive(sock)
            except (OSError, ValueError):
                self.broken = True
                self.sock = None
                return None
        pid = answer.get("pid")
        return pid if isinstance(pid, int) else None


_CLIENT = _Client()


class _ForkedPopen(subprocess.Popen):  # type: ignore[type-arg]
    """A `Popen` whose child the fork server made (see the module docstring)."""

    _entry: tuple[str, list[str], bool]

    def _execute_child(  # type: ignore[override]
        self,
        args: Any,
        executable: Any,
        preexec_fn: Any,
        close_fds: Any,
        pass_fds: Any,
        cwd: Any,
        env: Any,
        startupinfo: Any,
        creationflags: Any,
        shell: Any,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *rest: Any,
    ) -> None:
        module, arguments, unbuffered = self._entry
        request = {
            "module": module,
            "argv": arguments,
            "unbuffered": unbuffered,
            "env": dict(os.environ if env is None else env),
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "setsid": bool(self._new_session),
        }
        fds = [
            p2cread if p2cread != -1 else 0,
            c2pwrite if c2pwrite != -1 else 1,
            errwrite if errwrite != -1 else 2,
        ]
        pid = _CLIENT.spawn(request, fds)
        if pid is None:
            super()._execute_child(
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags,
                shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, *rest,
            )  # fmt: skip
            return
        self.pid = pid
        self._child_created = True
        for fd, parent_end in ((p2cread, p2cwrite), (c2pwrite, c2pread), (errwrite, errread)):
            if fd != -1 and parent_end != -1:
                os.close(fd)
        self._closed_child_pipe_fds = True


def popen(cmd: Sequence[str], *, start_new_session: bool = False, **kwargs: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen(cmd, ...)`, the child forked from the fork server when it can be."""
    entry = _entry(cmd)
    if entry is None or os.environ.get(ENV) == "0" or not hasattr(os, "fork") or _CLIENT.broken:
        return subprocess.Popen(cmd, start_new_session=start_new_session, **kwargs)
    proc = _ForkedPopen.__new__(_ForkedPopen)
    proc._entry = entry
    proc._new_session = start_new_session
    _ForkedPopen.__init__(proc, cmd, start_new_session=start_new_session, **kwargs)
    return proc


# ----------------------------------------------------------------------------- the wire
def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    header = len(data).to_bytes(4, "big")
    if fds:
        socket.send_fds(sock, [header + data], fds)
    else:
        sock.sendall(header + data)


def _receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 3)
    if len(data) < 4:
        raise ValueError("the fork server's connection closed")
    size = int.from_bytes(data[:4], "big")
    while len(data) < 4 + size:
        more = sock.recv(_MAX_MESSAGE)
        if not more:
            raise ValueError("the fork server's connection closed")
        data += more
    message: dict[str, Any] = json.loads(data[4 : 4 + size])
    return message, list(fds)


# ----------------------------------------------------------------------------- the server
def _serve(sock: socket.socket) -> None:
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            __import__(name)
    _send(sock, {"ready": True})
    while True:
        try:
            request, fds = _receive(sock)
        except (OSError, ValueError):
            return  # the pytest process is gone
        try:
            pid = _fork_child(sock, request, fds)
            _send(sock, {"pid": pid})
        except OSError as exc:
            _send(sock, {"error": str(exc)})
        finally:
            for fd in fds:
                os.close(fd)


def _fork_child(sock: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
    """Fork the middle process, which forks the child and exits: the child's pid."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(read_end)
            child = os.fork()
            if child == 0:
                os.close(write_end)
                sock.close()
                _run_child(request, fds)  # never returns
            os.write(write_end, str(child).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read()
    os.waitpid(middle, 0)
    if not said:
        raise OSError("the fork server's middle process said no pid")
    return int(said)


def _run_child(request: dict[str, Any], fds: list[int]) -> None:
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        if request["setsid"]:
            os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        wanted = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [request["cwd"], *wanted, *(p for p in sys.path[1:] if p not in wanted)]
        unbuffered = request["unbuffered"] or bool(os.environ.get("PYTHONUNBUFFERED"))
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = sys.__stdout__ = _text_out(1, write_through=unbuffered)
        sys.stderr = sys.__stderr__ = _text_out(2, write_through=True, errors="backslashreplace")
        sys.argv = [request["module"], *request["argv"]]
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except KeyboardInterrupt:
            _finish()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            traceback.print_exc()
            code = 1
        _finish()
    finally:
        os._exit(code)


def _finish() -> None:
    """What the interpreter does at exit: wait for non-daemon threads, run `atexit`, flush."""
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    with contextlib.suppress(BaseException):
        print(code, file=sys.stderr)
    return 1


def _text_out(fd: int, *, write_through: bool, errors: str = "strict") -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    buffered = io.BufferedWriter(raw)
    return io.TextIOWrapper(buffered, errors=errors, write_through=write_through, line_buffering=False)


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])))
