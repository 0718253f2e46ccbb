"""The README's install lines work on a fresh venv, against what would be published (issue 25).

The distribution is not on PyPI yet, so the PyPI line (`pip install
'mcp-resume-asgi[client,redis]'`) is run against the wheel the suite built: same
requirement, same extras, `--no-index --find-links` pointing at that wheel and at a
wheel cache of its dependencies (`.cache/wheelhouse`, filled from PyPI the first time
and whenever a dependency is missing from it). The clone line (`pip install
'.[client,redis]'`) is run from the repository's root, building from source in pip's
isolated build environment (hatchling from the same cache). Each installs into a fresh
venv whose pip is the one `python -m venv` brings (a copy each of one venv made so), then
imports what the extras promise.

`scripts/test.sh` builds the wheel and sdist (`python -m build`, `twine check --strict`)
and passes their directory in `MCP_RESUME_DIST`; alone, this test builds the wheel itself.
Without the network to fill the cache it skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.server import REPO_ROOT
from tests.support.stores import IN_CI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WHEELHOUSE = REPO_ROOT / ".cache" / "wheelhouse"
PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
VERSION = PROJECT["version"]

CHECK = """
import importlib.metadata as metadata, importlib.util, pathlib, sys
import anyio
import mcp_resume_asgi, mcp_resume_asgi.client, redis
from mcp_resume_asgi import RedisStore, resumable

package = pathlib.Path(mcp_resume_asgi.__file__).parent
assert "site-packages" in str(package), f"imported from the clone: {package}"
assert (package / "py.typed").is_file(), "py.typed is not shipped"
assert metadata.version("mcp-resume-asgi") == sys.argv[1], metadata.version("mcp-resume-asgi")
assert metadata.metadata("mcp-resume-asgi")["License-Expression"] == "MIT"
extras = set(metadata.metadata("mcp-resume-asgi").get_all("Provides-Extra"))
assert extras == {"cli", "client", "encryption", "otel", "proxy", "redis", "rest"}, f"published extras must be features only: {extras}"
for tool in ("pytest", "mypy", "ruff", "mcp", "mkdocs"):
    assert importlib.util.find_spec(tool) is None, f"{tool} came with the install: a dev tool in an extra"

async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})

async def main():
    wrapped = resumable(app)
    sent = []
    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}
    async def send(message):
        sent.append(message)
    scope = {"type": "http", "method": "GET", "path": "/", "raw_path": b"/", "root_path": "", "query_string": b"",
             "headers": [], "scheme": "http", "server": ("127.0.0.1", 80), "http_version": "1.1",
             "asgi": {"version": "3.0"}}
    await wrapped(scope, receive, send)
    assert sent[0]["status"] == 200 and sent[1]["body"] == b"hello", sent

anyio.run(main)
print("installed", metadata.version("mcp-resume-asgi"))
"""
"""Run in the fresh venv: the package, its `py.typed`, the extras' imports, a wrapped app."""


def readme_install_lines() -> dict[str, list[str]]:
    """The README's `pip install` lines, by kind ("pypi", "clone"), as pip arguments."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    lines = re.findall(r"^pip install (.+)$", text, flags=re.MULTILINE)
    found: dict[str, list[str]] = {}
    for line in lines:
        args = shlex.split(line.split("  #")[0])
        found["clone" if args[0].startswith(".") else "pypi"] = args
    assert set(found) == {"pypi", "clone"}, f"README.md should have both install lines: {lines}"
    assert found["pypi"][0].startswith(f"{PROJECT['name']}["), found["pypi"]
    return found


def run(argv: list[str], *, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")
    }
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env)


def built_wheel_dir(tmp_path: Path) -> Path:
    """Where the wheel of this version is: the suite's build, or one made here."""
    given = os.environ.get("MCP_RESUME_DIST")
    if given:
        dist = Path(given)
    else:
        dist = tmp_path / "dist"
        proc = run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO_ROOT)], cwd=REPO_ROOT
        )
        unavailable(proc, "cannot build the wheel")
    wheels = list(dist.glob(f"mcp_resume_asgi-{VERSION}-*.whl"))
    assert len(wheels) == 1, f"one wheel of {VERSION} expected in {dist}: {wheels}"
    return dist


def unavailable(proc: subprocess.CompletedProcess[str], what: str) -> None:
    """Skip (fail under CI) when a step that needs the network could not run."""
    if proc.returncode == 0:
        return
    reason = f"{what}: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    if IN_CI:
        pytest.fail(f"CI=true but {reason}\n{proc.stdout}\n{proc.stderr}")
    pytest.skip(reason)


def fill_wheelhouse(requirements: list[str]) -> None:
    """Download the dependencies (of every extra) and `requirements` into the cache."""
    extras = [req for reqs in PROJECT["optional-dependencies"].values() for req in reqs]
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    proc = run(
        [*pip, "--dest", str(WHEELHOUSE), *PROJECT["dependencies"], *extras, *requirements], cwd=REPO_ROOT
    )
    unavailable(proc, "cannot fill the wheel cache from PyPI")


@pytest.fixture(scope="module")
def made_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One venv as `python -m venv` makes it (its pip installed by ensurepip), nothing installed
    in it: each test installs into a copy of its own (`fresh_venv`)."""
    path = tmp_path_factory.mktemp("made") / "venv"
    proc = run([sys.executable, "-m", "venv", str(path)], cwd=path.parent)
    assert proc.returncode == 0, proc.stderr
    return path


def fresh_venv(made: Path, path: Path) -> Path:
    """A copy of the venv `python -m venv` made, at `path` (its interpreter a symlink, as made;
    pip is run as `python -m pip`, which the copy's place does not change)."""
    shutil.copytree(made, path, symlinks=True)
    return path / "bin" / "python"


def install(
    python: Path, args: list[str], *, links: list[Path], cwd: Path
) -> subprocess.CompletedProcess[str]:
    find_links = [option for link in links for option in ("--find-links", str(link))]
    # --no-compile: what is checked is what pip installs and that it imports; compiling every
    # module of every dependency to bytecode proves nothing more and was a third of the CPU.
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile", "--no-index"]
    pip += find_links
    return run([*pip, *args], cwd=cwd)


def install_offline_or_fill(
    python: Path, args: list[str], *, dist: Path | None, cwd: Path, also: list[str]
) -> None:
    """Install from the cache; if something is missing there, fill it once and try again."""
    links = [WHEELHOUSE, *([dist] if dist else [])]
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    proc = install(python, args, links=links, cwd=cwd)
    if proc.returncode != 0:
        fill_wheelhouse(also)
        proc = install(python, args, links=links, cwd=cwd)
    assert proc.returncode == 0, f"pip install {shlex.join(args)}:\n{proc.stdout}\n{proc.stderr}"


def check_installed(python: Path, cwd: Path) -> None:
    proc = run([str(python), "-c", CHECK, VERSION], cwd=cwd, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"installed {VERSION}", proc.stdout


def test_the_readme_pypi_line_installs_the_built_wheel(tmp_path: Path, made_venv: Path) -> None:
    args = readme_install_lines()["pypi"]
    dist = built_wheel_dir(tmp_path)
    python = fresh_venv(made_venv, tmp_path / "venv")
    install_offline_or_fill(python, args, dist=dist, cwd=tmp_path, also=[])
    check_installed(python, tmp_path)
    # The console script is installed with the package (its `--help` needs no extra).
    helped = run([str(python.parent / "mcp-resume"), "--help"], cwd=tmp_path, timeout=60)
    assert helped.returncode == 0 and "mcp-resume proxy --upstream" in helped.stdout, helped.stderr


def test_the_readme_clone_line_installs_from_the_source_tree(tmp_path: Path, made_venv: Path) -> None:
    """From the clone's root, as the README says: pip builds the project with hatchling."""
    args = readme_install_lines()["clone"]
    build_requires = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    python = fresh_venv(made_venv, tmp_path / "venv")
    source = tmp_path / "clone"  # a copy: pip must not leave build/ or *.egg-info in the repository
    shutil.copytree(
        REPO_ROOT, source, ignore=shutil.ignore_patterns(".venv", ".cache", ".git", "node_modules")
    )
    install_offline_or_fill(python, args, dist=None, cwd=source, also=build_requires)
    check_installed(python, tmp_path)
