"""A child process that says it is ready on one stdout line: the `mcp-resume` command and the
TypeScript server of tests/ts_server, each started as its own process.

`ReadyProcess(cmd, ready=regex)` starts `cmd`, reads its stdout until a line matches `ready`
(its first group, a port, is `port`) and keeps reading it afterwards (`lines`), so the child
never blocks on a full pipe. `stop()` is SIGTERM, bounded, then SIGKILL; stderr is inherited
(pytest shows it when a test fails).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support import forkserver
from tests.support.timing import scaled

REPO_ROOT = Path(__file__).resolve().parents[2]
#: What `mcp-resume proxy|serve` says once it accepts requests (`mcp_resume_asgi.cli.serving`).
SERVING = re.compile(r"^mcp-resume: serving .* at http://127\.0\.0\.1:(\d+)/")
#: What tests/ts_server/server.mjs says once it listens.
NODE_READY = re.compile(r"^READY (\d+)$")


class ReadyProcess:
    def __init__(
        self,
        cmd: Sequence[str],
        *,
        ready: re.Pattern[str],
        env: dict[str, str] | None = None,
        cwd: Path = REPO_ROOT,
    ) -> None:
        self.cmd = list(cmd)
        self.ready = ready
        self.env = {**os.environ, **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(
            x for x in (str(REPO_ROOT), self.env.get("PYTHONPATH", "")) if x
        )
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.cwd = cwd
        self.port = 0
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def start(self, timeout_s: float = 30.0) -> ReadyProcess:
        self._proc = proc = forkserver.popen(
            self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=self.cwd, env=self.env
        )
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()
        deadline = time.monotonic() + scaled(timeout_s)
        while True:
            try:
                line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                self.stop()
                raise RuntimeError(
                    f"{self.cmd} said nothing ready within {timeout_s}s: {self.lines}"
                ) from None
            if line is None:
                raise RuntimeError(f"{self.cmd} exited with {proc.wait()} before it was ready: {self.lines}")
            found = self.ready.match(line)
            if found:
                self.port = int(found.group(1))
                return self

    def signal(self, sig: int) -> None:
        """Send `sig` to the child (SIGTERM: the server's own drain and stop)."""
        assert self._proc is not None
        self._proc.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        """The child's exit status once it exited (`subprocess.TimeoutExpired` after `timeout_s`)."""
        assert self._proc is not None
        return self._proc.wait(scaled(timeout_s))

    def stop(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(scaled(10))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(scaled(5))
        if proc.stdin is not None:
            proc.stdin.close()


def mcp_resume(*args: str, env: dict[str, str] | None = None) -> ReadyProcess:
    """`mcp-resume ARGS` as a child process (`python -m mcp_resume_asgi.cli`), not yet started."""
    return ReadyProcess([sys.executable, "-m", "mcp_resume_asgi.cli", *args], ready=SERVING, env=env)
