"""Run the MCP conformance suite (``@modelcontextprotocol/conformance``) against conformance/server.py.

The suite is an npm package that needs Node >= 22.  It is installed, with a Node 22
binary from the npm package ``node-<os>-<arch>`` when the system Node is older, into
``.cache/conformance/`` (gitignored).  Once installed, nothing touches the network.

Examples (from the repository root)::

    python -m conformance.run --install-only                  # fetch node22 + suite (idempotent)
    python -m conformance.run                                 # active suite, bare SDK server
    python -m conformance.run --wrapped --strict              # active suite, behind mcp_resume_asgi
    python -m conformance.run --compare                       # bare vs wrapped; exit 1 on regressions
    python -m conformance.run --requirements 2026-07-28 --compare   # a revision's frozen requirement set
    python -m conformance.run --scenario tasks --wrapped --strict     # the ten tasks-* scenarios (SEP-2663)
    python -m conformance.run --scenario server-sse-polling --wrapped \\
        --expect-success server-sse-priming-event,server-sse-retry-field,server-sse-disconnect-resume

Results are written as JSON ``{scenario: {check_id: status}}`` (``--output``; by default
under ``.cache/conformance/results/``), next to a ``*.details.json`` holding every raw
check the suite emitted (descriptions, error messages, details such as SSE events and
response headers).  A check id the suite emits more than once in a scenario (e.g. the
INFO log entries ``incoming-sse-event``) is reported with its most severe status.

Statuses are the suite's own: SUCCESS, FAILURE, WARNING, INFO, SKIPPED.  SEP-1699 checks
are SHOULD-level, so the suite reports a missing priming event / retry field / resume
as WARNING (or INFO), never FAILURE; use ``--expect-success`` to require them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
# Override with MCP_CONFORMANCE_CACHE (e.g. a CI cache path).
DEFAULT_CACHE_DIR = Path(os.environ.get("MCP_CONFORMANCE_CACHE") or REPO_ROOT / ".cache" / "conformance")

SUITE_PACKAGE = "@modelcontextprotocol/conformance"
SUITE_VERSION = "0.1.16"
#: The suite release that carries frozen per-revision requirement sets (``--requirements``);
#: installed next to the default one, in ``<cache>/requirements/``.
REQUIREMENTS_SUITE_VERSION = "0.2.0-alpha.12"
REQUIREMENT_SETS = ("2025-11-25", "2026-07-28")
#: The Tasks extension's scenarios (SEP-2663), in that release only; `--scenario tasks`
#: runs all of them against one server (fixtures: `conformance/tasks_fixtures.py`).
TASKS_SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)


def scenarios_of(scenario: str | None) -> list[str]:
    """The scenarios `--scenario` names: one, a comma-separated list, or `tasks` (all ten)."""
    if scenario is None:
        return []
    if scenario == "tasks":
        return list(TASKS_SCENARIOS)
    return [name.strip() for name in scenario.split(",") if name.strip()]


def needs_requirements_suite(scenario: str | None) -> bool:
    """Whether the scenarios exist only in the requirements release (the `tasks-*` ones)."""
    return any(name.startswith("tasks-") for name in scenarios_of(scenario))


NODE_MAJOR = 22

# The SEP-1699 checks of scenario ``server-sse-polling`` (a *pending* scenario in 0.1.16:
# it is not part of the "active" suite, only of "all"/"pending", or run by name).
SSE_POLLING_SCENARIO = "server-sse-polling"
SSE_POLLING_CHECKS = ("server-sse-priming-event", "server-sse-retry-field", "server-sse-disconnect-resume")

SEVERITY = {"FAILURE": 4, "WARNING": 3, "SUCCESS": 2, "INFO": 1, "SKIPPED": 0}
STATUSES = ("SUCCESS", "FAILURE", "WARNING", "INFO", "SKIPPED")

_RESULT_DIR_RE = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")
_RUNNING_RE = re.compile(r"^=== Running scenario: (?P<scenario>\S+) ===$", re.MULTILINE)
_SINGLE_RE = re.compile(r"^Running client scenario '(?P<scenario>[^']+)'", re.MULTILINE)


class ConformanceError(RuntimeError):
    """The harness could not run (install, server start-up or suite crash)."""


# --------------------------------------------------------------------------- install


@dataclass(frozen=True)
class Suite:
    node: Path
    cli: Path
    cache_dir: Path

    def command(self, *args: str) -> list[str]:
        return [str(self.node), str(self.cli), *args]


def _node_package() -> str:
    system = {"linux": "linux", "darwin": "darwin", "win32": "win"}.get(sys.platform)
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    if system is None or arch is None:
        raise ConformanceError(
            f"no Node {NODE_MAJOR} npm package known for {sys.platform}/{platform.machine()}"
        )
    return f"node-{system}-{arch}"


def _node_major(node: str | Path) -> int | None:
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"v(\d+)\.", out.strip())
    return int(m.group(1)) if m else None


def _installed_suite_version(cache_dir: Path) -> str | None:
    pkg = cache_dir / "node_modules" / SUITE_PACKAGE / "package.json"
    try:
        return str(json.loads(pkg.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def _local_node(cache_dir: Path) -> Path:
    name = _node_package()
    return cache_dir / "node_modules" / name / "bin" / ("node.exe" if name.startswith("node-win") else "node")


def find_suite(cache_dir: Path = DEFAULT_CACHE_DIR, version: str = SUITE_VERSION) -> Suite | None:
    """The installed suite and a Node >= 22 to run it with, or None (nothing is installed)."""
    cli = cache_dir / "node_modules" / SUITE_PACKAGE / "dist" / "index.js"
    if _installed_suite_version(cache_dir) != version or not cli.is_file():
        return None
    local = _local_node(cache_dir)
    if local.is_file() and (_node_major(local) or 0) >= NODE_MAJOR:
        return Suite(local, cli, cache_dir)
    system = shutil.which("node")
    if system and (_node_major(system) or 0) >= NODE_MAJOR:
        return Suite(Path(system), cli, cache_dir)
    return None


def npm_available() -> bool:
    return shutil.which("npm") is not None


def ensure_suite(
    cache_dir: Path = DEFAULT_CACHE_DIR, *, quiet: bool = False, version: str = SUITE_VERSION
) -> Suite:
    """Install the suite (and a Node 22 if the system one is older) unless already there.

    Several processes may ask at once (the test files of the conformance suite run in
    parallel xdist workers): the first installs while holding a lock on the cache directory,
    the others wait for it and then find the suite installed."""
    suite = find_suite(cache_dir, version)
    if suite is not None:
        return suite
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _install_lock(cache_dir):
        return _install_suite(cache_dir, quiet=quiet, version=version)


@contextlib.contextmanager
def _install_lock(cache_dir: Path) -> Iterator[None]:
    """An exclusive lock on ``cache_dir`` between processes (where `fcntl` exists)."""
    try:
        import fcntl
    except ImportError:  # Windows has no fcntl: there, concurrent installs are not guarded
        yield
        return
    with open(cache_dir / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _install_suite(cache_dir: Path, *, quiet: bool, version: str) -> Suite:
    """`ensure_suite`'s install, under its lock: another process may have installed it meanwhile."""
    suite = find_suite(cache_dir, version)
    if suite is not None:
        return suite
    npm = shutil.which("npm")
    if npm is None:
        raise ConformanceError(
            f"npm is not installed and {SUITE_PACKAGE}@{version} is not in {cache_dir}; "
            "install Node.js/npm (any version) so the harness can fetch the suite and a Node 22"
        )
    system_node = shutil.which("node")
    packages = [f"{SUITE_PACKAGE}@{version}"]
    if not (system_node and (_node_major(system_node) or 0) >= NODE_MAJOR):
        packages.append(f"{_node_package()}@{NODE_MAJOR}")
    manifest = cache_dir / "package.json"
    if not manifest.exists():
        manifest.write_text(
            json.dumps({"name": "mcp-resume-asgi-conformance", "private": True}, indent=2) + "\n"
        )
    cmd = [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", *packages]
    if not quiet:
        print(f"[conformance] installing {' '.join(packages)} into {cache_dir} ...", file=sys.stderr)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cache_dir, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ConformanceError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    suite = find_suite(cache_dir, version)
    if suite is None:
        raise ConformanceError(f"npm install succeeded but no usable suite/Node {NODE_MAJOR} in {cache_dir}")
    if not quiet:
        print(f"[conformance] installed in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return suite


# ---------------------------------------------------------------------------- server


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(wrapped: bool, log_path: Path, *, startup_timeout: float = 20.0) -> Iterator[str]:
    """Run conformance/server.py under uvicorn on a free loopback port; yield its /mcp URL."""
    port = _free_port()
    cmd = [sys.executable, "-m", "conformance.server", "--port", str(port), "--log-level", "warning"]
    if wrapped:
        cmd.append("--wrapped")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            deadline = time.monotonic() + startup_timeout
            while True:
                if proc.poll() is not None:
                    raise ConformanceError(
                        f"{'wrapped' if wrapped else 'bare'} server exited with {proc.returncode} "
                        f"during start-up:\n{log_path.read_text(errors='replace')[-4000:]}"
                    )
                try:
                    # Any HTTP answer (a 4xx for a bare GET without session) means it is serving.
                    urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=2).close()
                    break
                except urllib.error.HTTPError:
                    break
                except (urllib.error.URLError, OSError):
                    if time.monotonic() > deadline:
                        raise ConformanceError(
                            f"server did not answer on {url} within {startup_timeout}s"
                        ) from None
                    time.sleep(0.1)
            yield url
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


# ----------------------------------------------------------------------------- suite


@dataclass
class RunResult:
    label: str  # "bare" / "wrapped"
    statuses: dict[str, dict[str, str]]  # {scenario: {check_id: status}}
    checks: dict[str, list[dict[str, Any]]]  # raw checks per scenario
    seconds: float
    exit_code: int
    stdout_path: Path
    server_log: Path
    notes: list[str] = field(default_factory=list)

    def failures(self) -> list[tuple[str, str]]:
        return [(s, c) for s, cs in self.statuses.items() for c, st in cs.items() if st == "FAILURE"]


def collapse(checks: Sequence[dict[str, Any]]) -> dict[str, str]:
    """{check_id: status}, keeping the most severe status of a repeated id, in first-seen order."""
    out: dict[str, str] = {}
    for check in checks:
        cid, status = str(check.get("id")), str(check.get("status"))
        if cid not in out or SEVERITY.get(status, -1) > SEVERITY.get(out[cid], -1):
            out[cid] = status
    return out


def parse_results(
    out_dir: Path, stdout: str, expected: Sequence[str] = ()
) -> dict[str, list[dict[str, Any]]]:
    """Raw checks per scenario from the suite's ``-o`` directory (one checks.json per scenario).

    A scenario that the suite started (per its stdout) or that was expected but that left
    no checks.json (the scenario itself crashed) gets a synthetic FAILURE ``scenario-error``.
    """
    per: dict[str, list[dict[str, Any]]] = {}
    for sub in sorted(out_dir.iterdir()) if out_dir.is_dir() else []:
        m = _RESULT_DIR_RE.match(sub.name)
        if not m or not (sub / "checks.json").is_file():
            continue
        per[m.group("scenario")] = json.loads((sub / "checks.json").read_text())
    started = [*_RUNNING_RE.findall(stdout), *_SINGLE_RE.findall(stdout)]
    ordered: dict[str, list[dict[str, Any]]] = {}
    for name in dict.fromkeys([*expected, *started, *per]):
        ordered[name] = per.get(name) or [
            {
                "id": "scenario-error",
                "name": "ScenarioError",
                "status": "FAILURE",
                "description": "scenario produced no checks.json (it crashed or was not run)",
                "errorMessage": _scenario_error(stdout, name),
            }
        ]
    return ordered


def _scenario_error(stdout: str, scenario: str) -> str:
    m = re.search(rf"Failed to run scenario {re.escape(scenario)}:(.*?)(?:\n=== |\Z)", stdout, re.DOTALL)
    return m.group(1).strip()[:2000] if m else "no result"


def run_suite(
    suite: Suite,
    *,
    wrapped: bool,
    scenario: str | None = None,
    suite_name: str = "active",
    requirements: str | None = None,
    work_dir: Path,
    timeout: float = 600.0,
    startup_timeout: float = 20.0,
) -> RunResult:
    """Start the server (bare or wrapped), run the scenario / suite against it, parse the checks.

    `startup_timeout` bounds the server's start-up (the tests stretch it for a loaded machine)."""
    label = "wrapped" if wrapped else "bare"
    run_dir = work_dir / label
    if run_dir.exists():
        shutil.rmtree(run_dir)
    out_dir = run_dir / "suite-output"
    out_dir.mkdir(parents=True)
    stdout_path = run_dir / "suite-stdout.txt"
    server_log = run_dir / "server.log"
    names = scenarios_of(scenario)
    runs: list[list[str]] = [["--scenario", name] for name in names]
    if not runs:
        runs = [["--requirements", requirements] if requirements else ["--suite", suite_name]]
    stdout = stderr = ""
    returncode = 0
    with serve(wrapped, server_log, startup_timeout=startup_timeout) as url:
        started = time.monotonic()
        for what in runs:  # several scenarios run one after another against the same server
            try:
                proc = subprocess.run(
                    suite.command("server", "--url", url, "-o", str(out_dir), *what),
                    cwd=suite.cache_dir,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    env={**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"},
                )
            except subprocess.TimeoutExpired as exc:
                raise ConformanceError(
                    f"conformance suite timed out after {timeout}s against the {label} server"
                ) from exc
            stdout, stderr = stdout + proc.stdout, stderr + proc.stderr
            returncode = returncode or proc.returncode
        seconds = time.monotonic() - started
    stdout_path.write_text(stdout + ("\n--- stderr ---\n" + stderr if stderr else ""))
    if "Validation error" in stdout + stderr or "Unknown suite" in stdout + stderr:
        raise ConformanceError(f"suite rejected its arguments:\n{stdout}\n{stderr}")
    raw = parse_results(out_dir, stdout, names)
    if not raw:
        raise ConformanceError(f"suite produced no results (exit {returncode}):\n{stdout}\n{stderr}")
    statuses = {name: collapse(checks) for name, checks in raw.items()}
    return RunResult(label, statuses, raw, seconds, returncode, stdout_path, server_log)


# --------------------------------------------------------------------------- reports


def write_results(result: RunResult, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.statuses, indent=2) + "\n")
    details = path.with_name(path.stem + ".details.json")
    details.write_text(json.dumps(result.checks, indent=2) + "\n")
    return details


def summary_table(result: RunResult) -> str:
    rows: list[tuple[str, ...]] = [("scenario", *STATUSES)]
    totals = dict.fromkeys(STATUSES, 0)
    for scenario, checks in result.statuses.items():
        counts = dict.fromkeys(STATUSES, 0)
        for status in checks.values():
            counts[status] = counts.get(status, 0) + 1
            totals[status] = totals.get(status, 0) + 1
        rows.append((scenario, *(str(counts[s]) for s in STATUSES)))
    rows.append((f"TOTAL ({len(result.statuses)} scenarios)", *(str(totals[s]) for s in STATUSES)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)) for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    return "\n".join(lines)


def problem_lines(result: RunResult, *, verbose: bool = False) -> list[str]:
    """One line per FAILURE/WARNING check, with the suite's error message (and details if verbose)."""
    out = []
    for scenario, checks in result.checks.items():
        for check in checks:
            if check.get("status") in ("FAILURE", "WARNING"):
                msg = check.get("errorMessage") or check.get("description", "")
                out.append(f"  {check['status']:<7} {scenario} / {check['id']}: {msg}")
                if verbose and check.get("details"):
                    out.append("          details: " + json.dumps(check["details"])[:2000])
    return out


def print_report(result: RunResult, json_path: Path | None, *, verbose: bool = False) -> None:
    n = len(result.statuses)
    print(f"\n=== {result.label} server: {n} scenario(s), suite ran {result.seconds:.1f}s ===")
    print(summary_table(result))
    problems = problem_lines(result, verbose=verbose)
    if problems:
        print("non-SUCCESS checks (FAILURE / WARNING):")
        print("\n".join(problems))
    if json_path:
        print(f"results: {json_path}  (raw checks: {json_path.with_name(json_path.stem + '.details.json')})")
    totals = suite_totals(result)
    if totals:
        print(f"suite's own count: {totals}")
    print(f"suite output: {result.stdout_path}   server log: {result.server_log}")


def suite_totals(result: RunResult) -> str | None:
    """The suite's own last ``Total: N passed, M failed`` line (it counts every check it ran)."""
    try:
        found = re.findall(r"^Total: .*$", result.stdout_path.read_text(), re.MULTILINE)
    except OSError:
        return None
    return found[-1] if found else None


def compare(bare: RunResult, wrapped: RunResult) -> tuple[list[str], list[str]]:
    """(regressions, degradations) of wrapped relative to bare.

    regression: a check that FAILs wrapped but does not FAIL bare (including checks only
    the wrapped run emitted), or a check that SUCCEEDs bare and is missing wrapped.
    degradation: SUCCESS bare -> WARNING/INFO/SKIPPED wrapped (reported, not fatal).
    """
    regressions, degradations = [], []
    for scenario in dict.fromkeys([*bare.statuses, *wrapped.statuses]):
        b, w = bare.statuses.get(scenario, {}), wrapped.statuses.get(scenario, {})
        for cid in dict.fromkeys([*b, *w]):
            bs, ws = b.get(cid, "ABSENT"), w.get(cid, "ABSENT")
            line = f"{scenario} / {cid}: bare={bs} wrapped={ws}"
            if (ws == "FAILURE" and bs != "FAILURE") or (bs == "SUCCESS" and ws == "ABSENT"):
                regressions.append(line + _error_of(wrapped, scenario, cid))
            elif bs == "SUCCESS" and ws != "SUCCESS":
                degradations.append(line + _error_of(wrapped, scenario, cid))
    return regressions, degradations


def _error_of(result: RunResult, scenario: str, cid: str) -> str:
    for check in result.checks.get(scenario, []):
        if check.get("id") == cid and check.get("errorMessage"):
            return f"  -- {check['errorMessage']}"
    return ""


def check_expectations(result: RunResult, expected: Sequence[str]) -> list[str]:
    """Unmet ``--expect-success`` items; an item is ``check_id`` or ``scenario:check_id``."""
    unmet = []
    for item in expected:
        scenario, _, cid = item.rpartition(":")
        found = [
            (s, checks[cid])
            for s, checks in result.statuses.items()
            if cid in checks and (not scenario or s == scenario)
        ]
        if not found:
            unmet.append(f"{item}: not reported by the suite")
        unmet += [f"{s} / {cid}: {st}{_error_of(result, s, cid)}" for s, st in found if st != "SUCCESS"]
    return unmet


# ------------------------------------------------------------------------------- CLI


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m conformance.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--wrapped", action="store_true", help="test the server wrapped by mcp_resume_asgi.resumable"
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--scenario",
        help="run one scenario (e.g. server-sse-polling), a comma-separated list, or `tasks` "
        f"(the ten tasks-* scenarios of suite {REQUIREMENTS_SUITE_VERSION}) instead of a suite",
    )
    what.add_argument(
        "--suite",
        default="active",
        choices=("active", "all", "pending"),
        help="suite to run (default: active)",
    )
    what.add_argument(
        "--requirements",
        choices=REQUIREMENT_SETS,
        help=f"run exactly the scenarios a spec revision requires (suite {REQUIREMENTS_SUITE_VERSION})",
    )
    p.add_argument("--compare", action="store_true", help="run bare and wrapped; exit 1 if wrapped regresses")
    p.add_argument(
        "--expect-success",
        default="",
        metavar="IDS",
        help="comma-separated check ids ([scenario:]check_id) that must be SUCCESS, e.g. "
        + ",".join(SSE_POLLING_CHECKS),
    )
    p.add_argument("--strict", action="store_true", help="exit 1 if any check is FAILURE")
    p.add_argument("--output", type=Path, help="results JSON path (compare mode: a directory)")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="where node22 + the suite live")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for one suite run")
    p.add_argument("--install-only", action="store_true", help="install node22 + the suite, then exit")
    p.add_argument("--verbose", action="store_true", help="print the details of FAILURE/WARNING checks")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        started = time.monotonic()
        if args.requirements or needs_requirements_suite(args.scenario):
            cache_dir = args.cache_dir / "requirements"
            suite = ensure_suite(cache_dir, version=REQUIREMENTS_SUITE_VERSION)
        else:
            cache_dir = args.cache_dir
            suite = ensure_suite(cache_dir)
        if args.install_only:
            print(f"suite ready: {' '.join(suite.command())} ({time.monotonic() - started:.1f}s)")
            return 0
        results_dir = cache_dir / "results"
        results_dir.mkdir(parents=True, exist_ok=True)
        what = args.scenario or (
            f"requirements-{args.requirements}" if args.requirements else f"{args.suite}-suite"
        )
        work_dir = results_dir / "work" / what
        expected = [e.strip() for e in args.expect_success.split(",") if e.strip()]
        kwargs: dict[str, Any] = {
            "scenario": args.scenario,
            "suite_name": args.suite,
            "requirements": args.requirements,
            "work_dir": work_dir,
            "timeout": args.timeout,
        }

        if args.compare:
            out_dir = args.output or results_dir
            bare = run_suite(suite, wrapped=False, **kwargs)
            wrapped = run_suite(suite, wrapped=True, **kwargs)
            code = 0
            for res in (bare, wrapped):
                path = out_dir / f"{res.label}-{what}.json"
                write_results(res, path)
                print_report(res, path, verbose=args.verbose)
            regressions, degradations = compare(bare, wrapped)
            print(f"\n=== compare: {len(regressions)} regression(s), {len(degradations)} degradation(s) ===")
            for line in regressions:
                print("  REGRESSION  " + line)
            for line in degradations:
                print("  degraded    " + line)
            if regressions:
                code = 1
            if args.strict and (wrapped.failures() or bare.failures()):
                code = 1
            if expected:
                unmet = check_expectations(wrapped, expected)
                for line in unmet:
                    print("  EXPECTED SUCCESS (wrapped)  " + line)
                code = code or int(bool(unmet))
            return code

        result = run_suite(suite, wrapped=args.wrapped, **kwargs)
        path = args.output or results_dir / f"{result.label}-{what}.json"
        write_results(result, path)
        print_report(result, path, verbose=args.verbose)
        code = 0
        if args.strict and result.failures():
            print(f"\n--strict: {len(result.failures())} FAILURE check(s)")
            code = 1
        if expected:
            unmet = check_expectations(result, expected)
            if unmet:
                print(f"\n--expect-success: {len(unmet)} check(s) not SUCCESS on the {result.label} server:")
                print("\n".join("  " + line for line in unmet))
                code = 1
            else:
                print(f"\n--expect-success: all of {', '.join(expected)} are SUCCESS")
        return code
    except ConformanceError as exc:
        print(f"conformance harness error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
