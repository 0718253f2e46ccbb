"""Which failed task request `ResumableSession` sends again (`client/follow_ups.transient`).

A request the server *answered* - even with an error - is not retried; one whose
exchange broke, or that a gateway turned away while the server was out of reach,
is. The retries themselves (bounded) are in tests/test_client_tasks.py.
"""

from __future__ import annotations

import httpx
import pytest

from mcp_resume_asgi.client.errors import McpError, SessionError
from mcp_resume_asgi.client.follow_ups import transient


def broke(cause: Exception) -> SessionError:
    try:
        raise SessionError("'tasks/get' failed") from cause
    except SessionError as exc:
        return exc


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_gateway_that_could_not_reach_the_server_is_worth_another_try(status: int) -> None:
    assert transient(SessionError("refused", status))


def test_a_broken_exchange_is_worth_another_try() -> None:
    assert transient(broke(httpx.ReadError("cut")))
    assert transient(broke(httpx.ConnectError("refused")))


@pytest.mark.parametrize(
    "exc",
    [
        McpError(-32602, "unknown task"),
        SessionError("refused", 400),
        SessionError("refused", 500),
        SessionError("the answer ended without a response"),
        broke(ValueError("not a network error")),
        ValueError("anything else"),
    ],
)
def test_what_the_server_answered_is_not_sent_again(exc: Exception) -> None:
    assert not transient(exc)
