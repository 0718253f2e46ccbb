"""npm-installed test peers (the TypeScript clients): find node, `npm ci` once, run a script.

Each peer lives in a folder of its own with a pinned `package.json` and its lock. The
install is done the first time and then only when the lock changes (a stamp file
holds the lock's fingerprint). Without node or npm the tests skip, unless `CI=true`,
where a missing peer is a failure.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.timing import scaled

REPO_ROOT = Path(__file__).resolve().parents[2]
STAMP_NAME = ".mcp-resume-asgi-install-stamp"
NPM_TIMEOUT_S = 240.0


def skip_or_fail(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"{reason} (CI=true: not skipping)")
    pytest.skip(reason)


def node_major(node: str | Path) -> int | None:
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"v(\d+)\.", out.strip())
    return int(m.group(1)) if m else None


def find_node(min_major: int) -> str | None:
    """The system node if new enough, else the Node 22 that conformance/run.py installs."""
    candidates: list[str | Path] = []
    system = shutil.which("node")
    if system:
        candidates.append(system)
    cache = Path(os.environ.get("MCP_CONFORMANCE_CACHE") or REPO_ROOT / ".cache" / "conformance")
    candidates += sorted((cache / "node_modules").glob("node-*-*/bin/node"))
    for node in candidates:
        if (node_major(node) or 0) >= min_major:
            return str(node)
    return None


@dataclass(frozen=True)
class NpmPeer:
    """A folder of pinned npm packages (see the module docstring)."""

    folder: Path
    packages: tuple[str, ...]
    min_node_major: int

    def pinned_versions(self) -> dict[str, str]:
        lock = json.loads((self.folder / "package-lock.json").read_text())
        return {name: str(lock["packages"][f"node_modules/{name}"]["version"]) for name in self.packages}

    def _fingerprint(self) -> str:
        digest = hashlib.sha256()
        for name in ("package.json", "package-lock.json"):
            digest.update((self.folder / name).read_bytes())
        return digest.hexdigest()

    def _installed(self, fingerprint: str) -> bool:
        modules = self.folder / "node_modules"
        try:
            stamp = (modules / STAMP_NAME).read_text().strip()
            installed = {
                name: json.loads((modules / name / "package.json").read_text()).get("version")
                for name in self.packages
            }
        except (OSError, ValueError):
            return False
        return stamp == fingerprint and installed == self.pinned_versions()

    def prepare(self) -> tuple[str, float | None]:
        """node's path, and how long `npm ci` took (None: already installed); skips or fails
        (see the module docstring) when the peer cannot run here."""
        names = ", ".join(self.packages)
        node = find_node(self.min_node_major)
        if node is None:
            skip_or_fail(f"no node >= {self.min_node_major}: {names} cannot run")
            raise AssertionError("unreachable")
        fingerprint = self._fingerprint()
        if self._installed(fingerprint):
            return node, None
        # Test files in other xdist workers may share the peer: one installs, the others wait.
        with open(self.folder / ".install.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if self._installed(fingerprint):
                    return node, None
                return node, self._install(fingerprint)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _install(self, fingerprint: str) -> float:
        """`npm ci` into the folder (under `prepare`'s lock): how long it took."""
        names = ", ".join(self.packages)
        npm = shutil.which("npm")
        if npm is None:
            skip_or_fail(f"npm is not installed: {names} cannot be installed into {self.folder}")
            raise AssertionError("unreachable")
        cmd = [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error", "--prefer-offline"]
        started = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, cwd=self.folder, capture_output=True, text=True, timeout=scaled(NPM_TIMEOUT_S)
            )
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"{' '.join(cmd)} did not finish within {scaled(NPM_TIMEOUT_S):.0f}s (in {self.folder})"
            )
        if proc.returncode != 0:
            pytest.fail(
                f"{' '.join(cmd)} failed ({proc.returncode}) in {self.folder}:\n{proc.stdout}\n{proc.stderr}"
            )
        (self.folder / "node_modules" / STAMP_NAME).write_text(fingerprint + "\n")
        if not self._installed(fingerprint):
            pytest.fail(f"npm ci succeeded but {self.pinned_versions()} are not in {self.folder}")
        install_s = time.monotonic() - started
        print(f"[{self.folder.name}] npm ci: {install_s:.1f}s", file=sys.stderr)
        return install_s

    def run_script(
        self, node: str, script: Path, args: list[str], trace: Path, timeout_s: float
    ) -> tuple[dict[str, Any], int, str, float]:
        """Run a script that prints one JSON summary line: (summary, exit code, stderr, seconds)."""
        cmd = [node, str(script), *args]
        timeout_s = scaled(timeout_s)
        started = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=self.folder, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            tail = trace.read_text().splitlines()[-80:] if trace.exists() else []
            pytest.fail(f"{script.name} did not exit within {timeout_s:.0f}s: {exc}\n" + "\n".join(tail))
        elapsed = time.monotonic() - started
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if not lines:
            pytest.fail(
                f"{script.name} printed no JSON summary (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return json.loads(lines[-1]), proc.returncode, proc.stderr, elapsed
