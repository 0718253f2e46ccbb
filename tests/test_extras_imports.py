"""What an import says when an optional extra is missing (issue 11, issue 25).

The core needs none of the extras; a feature whose extra is not installed fails on its
import with an `ImportError` naming the extra to install, not a bare "No module named".
Each check runs in a child interpreter whose import system hides the extra's package
(a meta path finder that refuses it), as if it were not installed.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support.server import REPO_ROOT


def hiding(package: str, code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a child where importing `package` fails as if it were not installed."""
    prelude = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.partition('.')[0] == {package!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60
    )


def test_redis_store_is_top_level_and_imported_lazily() -> None:
    import mcp_resume_asgi
    from mcp_resume_asgi.store import RedisStore

    assert "RedisStore" in mcp_resume_asgi.__all__
    assert mcp_resume_asgi.RedisStore is RedisStore
    check = (
        "import sys, mcp_resume_asgi\n"
        "assert 'redis' not in sys.modules, 'import mcp_resume_asgi imported redis'\n"
        "from mcp_resume_asgi import RedisStore\n"
        "assert 'redis' in sys.modules and RedisStore.__module__ == 'mcp_resume_asgi.store.redis'\n"
    )
    subprocess.run([sys.executable, "-c", check], check=True, cwd=REPO_ROOT, timeout=60)


def test_without_redis_the_top_level_import_says_what_to_install() -> None:
    proc = hiding(
        "redis",
        "import mcp_resume_asgi\n"
        "try:\n"
        "    from mcp_resume_asgi import RedisStore\n"
        "except ImportError as exc:\n"
        "    print(exc)\n",
    )
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'mcp-resume-asgi[redis]'" in proc.stdout


def test_without_httpx_the_client_import_names_the_client_extra() -> None:
    proc = hiding("httpx", "import mcp_resume_asgi\nimport mcp_resume_asgi.client\n")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: mcp_resume_asgi.client needs httpx"), proc.stderr
    assert "pip install 'mcp-resume-asgi[client]'" in last, last


def test_without_httpx_the_proxy_import_names_the_proxy_extra() -> None:
    proc = hiding("httpx", "import mcp_resume_asgi\nimport mcp_resume_asgi.proxy\n")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: mcp_resume_asgi.proxy needs httpx"), proc.stderr
    assert "pip install 'mcp-resume-asgi[proxy]'" in last, last


def test_the_core_imports_without_any_extra() -> None:
    """`import mcp_resume_asgi` and `resumable()` need none of httpx, redis, jsonschema."""
    code = (
        "import mcp_resume_asgi\n"
        "async def app(scope, receive, send): ...\n"
        "mcp_resume_asgi.resumable(app, tasks=True)\n"
        "import sys\n"
        "assert not {'httpx', 'redis', 'jsonschema'} & set(sys.modules), sorted(sys.modules)\n"
    )
    for package in ("httpx", "redis", "jsonschema"):
        proc = hiding(package, code)
        assert proc.returncode == 0, f"without {package}: {proc.stderr}"
