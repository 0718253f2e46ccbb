"""The stock `mcp` client against three kinds of wrapped stock servers, with at-will disconnects.

The apps do nothing for resumability (no event store, no retry interval); every
resume the client makes is the middleware's doing.
"""

from __future__ import annotations

import pytest

from mcp_resume_asgi import Policy, resumable
from tests.apps import APP_FACTORIES
from tests.support.counting import Counting
from tests.support.mcp_client import call_with_progress, result_text, stock_session
from tests.support.server import load_app, serve

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("flavour", sorted(APP_FACTORIES))
@pytest.mark.slow
async def test_three_second_tool_survives_a_disconnect_every_200ms(flavour: str) -> None:
    policy = Policy(retry_ms=20, max_connection_s=0.2)
    app = resumable(load_app(APP_FACTORIES[flavour]), policy=policy)
    counting = Counting(app)
    async with serve(counting) as info, stock_session(info.mcp_url) as session:
        result, progress = await call_with_progress(session, "slow_progress", {"seconds": 3, "steps": 30})
        assert result_text(result) == "done 30"
        steps = [int(p[0]) for p in progress]
        print(f"{flavour}: {len(steps)} progress notifications, resumes: {dict(counting.counts)}")
        assert steps == list(range(1, 31)), "lost, duplicated or reordered progress"
        assert [p[2] for p in progress] == [f"step {i}" for i in range(1, 31)]
        assert counting.counts["GET resume"] >= 10, "the middleware should have cut the stream every 200 ms"


@pytest.mark.parametrize("flavour", sorted(APP_FACTORIES))
@pytest.mark.slow
async def test_elicitation_with_the_stock_client_while_disconnecting_on_input(flavour: str) -> None:
    policy = Policy(retry_ms=20, disconnect_on_input_request=True)
    app = resumable(load_app(APP_FACTORIES[flavour]), policy=policy)
    counting = Counting(app)
    async with serve(counting) as info, stock_session(info.mcp_url, elicit_name="carol") as session:
        result = await session.call_tool("ask_name", {})
        assert result_text(result) == "hello carol"
        assert counting.counts["GET resume"] >= 1


@pytest.mark.slow
async def test_tool_errors_and_plain_calls_are_unchanged() -> None:
    app = resumable(load_app(APP_FACTORIES["lowlevel"]), policy=Policy(retry_ms=20))
    async with serve(app) as info, stock_session(info.mcp_url) as session:
        assert result_text(await session.call_tool("echo", {"text": "hi"})) == "hi"
        tools = await session.list_tools()
        assert {t.name for t in tools.tools} >= {"echo", "slow_progress", "ask_name", "fail"}
        with pytest.raises(Exception, match="intentional failure"):
            await session.call_tool("fail", {})
