"""The `mcp-resume` command line: its options (each also from the environment), its errors (one
line, exit status 2: a bad upstream URL, a bad store URL, an app not found, a bad policy),
`serve` of an `MCPServer` object found by import string (a real process, called by the client
helper), and `inspect` of a memory store (refused: nothing to see from outside)."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from mcp_resume_asgi.cli import build_parser, main
from mcp_resume_asgi.cli.options import OptionError, parse_pairs, with_environment
from mcp_resume_asgi.cli.serving import AppNotFound, find_app
from mcp_resume_asgi.client import ResumableSession
from tests.support.processes import mcp_resume


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["proxy", "--upstream", "ftp://127.0.0.1/mcp"], "bad upstream URL 'ftp://127.0.0.1/mcp'"),
        (["proxy", "--upstream", "127.0.0.1:3000/mcp"], "expected http://host[:port]/path"),
        (["proxy"], "--upstream URL is required"),
        (["proxy", "--upstream", "http://127.0.0.1:9/mcp", "--store", "mongodb://x"], "--store: store URL"),
        (
            ["proxy", "--upstream", "http://127.0.0.1:9/mcp", "--prefix", "p:"],
            "--prefix is a Redis key prefix",
        ),
        (["proxy", "--upstream", "http://127.0.0.1:9/mcp", "--policy", "retry_mz=1"], "--policy"),
        (["proxy", "--upstream", "http://127.0.0.1:9/mcp", "--policy", "retry_ms"], "expected NAME=VALUE"),
        (
            ["proxy", "--upstream", "http://127.0.0.1:9/mcp", "--store", "redis://127.0.0.1:9/0"],
            "needs a shared `secret`",
        ),
        (
            ["proxy", "--upstream", "http://127.0.0.1:9/mcp", "--encryption-key", "short"],
            "the encryption key must be at least 16 characters",
        ),
        (["serve", "no_such_module_here:app"], "cannot import 'no_such_module_here'"),
        (["serve", "tests.apps.served_mcpserver:nothing"], "has no attribute 'nothing'"),
        (["serve", "tests.apps.served_mcpserver"], "expected module:attribute"),
        (["inspect", "--store", "memory://"], "memory:// lives inside the process"),
        (["inspect"], "--store URL is required"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_status_2(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fails(argv, capsys)
    assert said in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_inspect_does_not_open_a_sqlite_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Opening the file would take its one-process lock from the server holding it: refused unopened."""
    path = tmp_path / "served.db"
    err = _fails(["inspect", "--store", f"sqlite:///{path}"], capsys)
    assert "a SQLite file belongs to the one process serving it" in err, err
    assert not path.exists() and not list(tmp_path.iterdir())


def test_every_option_comes_from_the_environment_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCP_RESUME_UPSTREAM", "gopher://x/mcp")
    assert "bad upstream URL 'gopher://x/mcp'" in _fails(["proxy"], capsys)
    parser = build_parser()
    env = {
        "MCP_RESUME_PORT": "9123",
        "MCP_RESUME_TASKS": "yes",
        "MCP_RESUME_POLICY": "retry_ms=5,keepalive_s=null",
    }
    for action in parser._subparsers._group_actions[0].choices.values():  # type: ignore[union-attr]
        with_environment(action, env)
    args = parser.parse_args(["proxy", "--upstream", "http://h/mcp"])
    assert (args.port, args.tasks, args.policy) == (9123, True, ["retry_ms=5", "keepalive_s=null"])
    assert parser.parse_args(["proxy", "--port", "7"]).port == 7  # the command line wins
    with pytest.raises(OptionError, match="MCP_RESUME_PORT='x'"):
        with_environment(
            build_parser()._subparsers._group_actions[0].choices["proxy"], {"MCP_RESUME_PORT": "x"}
        )  # type: ignore[union-attr]


def test_the_help_names_each_options_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["proxy", "--help"])
    out = capsys.readouterr().out
    for name in ("MCP_RESUME_UPSTREAM", "MCP_RESUME_STORE", "MCP_RESUME_SECRET", "MCP_RESUME_POLICY"):
        assert name in out
    assert "upstream authenticates every request" in out


def test_policy_pairs_are_read_as_json_values() -> None:
    assert parse_pairs(["retry_ms=20", "keepalive_s=null", "x=text", '{"task_after_s": 2}'], "--policy") == {
        "retry_ms": 20,
        "keepalive_s": None,
        "x": "text",
        "task_after_s": 2,
    }


def test_serve_finds_an_asgi_app_a_factory_and_an_mcpserver_object() -> None:
    assert callable(find_app("tests.apps.lowlevel_app:create_app", factory=True))
    assert callable(find_app("tests.apps.served_mcpserver:mcp"))
    with pytest.raises(AppNotFound, match="not an ASGI app"):
        find_app("tests.apps:APP_FACTORIES")


@pytest.mark.anyio
@pytest.mark.slow
async def test_serve_runs_an_mcpserver_object_wrapped_in_its_own_process() -> None:
    node = mcp_resume("serve", "tests.apps.served_mcpserver:mcp", "--port", "0", "--log-level", "warning")
    await anyio.to_thread.run_sync(node.start)
    try:
        async with (
            httpx.AsyncClient(timeout=30) as http,
            ResumableSession(f"{node.url}/mcp", http_client=http) as s,
        ):
            result = await s.call_tool("echo", {"text": "served"})
        assert result["content"][0]["text"] == "served"
    finally:
        await anyio.to_thread.run_sync(node.stop)
