"""Shared pytest configuration."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import pytest

#: What uvicorn and hypercorn log when an ASGI app raises: a crash of ours, never allowed.
UNHANDLED = "Exception in ASGI application"
#: The same from granian (tests/test_granian.py), on the inherited stderr of its child process.
UNHANDLED_GRANIAN = "Application callable raised an exception"


@pytest.fixture
def anyio_backend() -> str:
    """Run ``@pytest.mark.anyio`` tests on asyncio (uvicorn-based servers need it in-loop)."""
    return "asyncio"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak", action="store_true", default=False, help="run the long fault tests (1000 calls)"
    )


@pytest.fixture(autouse=True)
def no_unhandled_asgi_errors(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> Iterator[None]:
    """Fail a test during which a server (in process or a child process) saw the app raise.

    Servers in child processes write to the inherited stderr, which `capfd` sees; in
    process, uvicorn logs through `logging`, which `caplog` sees.
    """
    capfd: pytest.CaptureFixture[str] | None = None
    if "capsys" not in request.fixturenames and "capsysbinary" not in request.fixturenames:
        capfd = request.getfixturevalue("capfd")
    caplog.set_level(logging.ERROR, logger="uvicorn.error")
    yield
    err = ""
    if capfd is not None:
        out, err = capfd.readouterr()
        sys.stdout.write(out)
        sys.stderr.write(err)
    logged = [r.getMessage() for r in caplog.records if UNHANDLED in r.getMessage()]
    crashed = UNHANDLED in err or UNHANDLED_GRANIAN in err
    assert not logged and not crashed, (
        f"a server saw an unhandled exception:\n{err[-6000:] if crashed else logged}"
    )
