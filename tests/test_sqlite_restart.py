"""A server on `SQLiteStore`, restarted (a real uvicorn process, stopped or SIGKILLed, and a new
one on the same file): its earlier life's work is found.

- A call that finished before the restart (stopped, killed, or killed the moment its answer
  reached the client): a resume from its first event, on the new process, gets the same events
  and the result, once (its stream URL and event ids verify: the secret is kept in the file).
  After a SIGKILL that fell within the commit window (a write returns once queued) the file
  lacks the call's end - told by the file, read between the two lives: a resume after any id
  the client holds of the events before the answer then gets the error a lost process's call
  ends with, once, under an id the earlier life never handed out.
- A call whose process handed its client events that never reached the file (killed within
  the commit window; in-process, the file written as such a life leaves it): a resume after
  the last id the client got, past what the file has, gets the error, once, under an id the
  earlier life never handed out.
- A call still running when its process was killed: a resume on the new process ends with
  the JSON-RPC error a lost node's call ends with, at once rather than at its resume window's
  end (the new process is a new node; the earlier one's heartbeat is gone: `durable`).
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mcp_resume_asgi import resumable
from mcp_resume_asgi.core.orphans import ORPHAN_TEXT
from mcp_resume_asgi.engine.sweep import indexed
from mcp_resume_asgi.store import StreamKind, StreamMeta, sqlite_file
from mcp_resume_asgi.store.sqlite import SQLiteStore
from mcp_resume_asgi.wire import jsonrpc as p
from mcp_resume_asgi.wire.sse import encode_payload
from mcp_resume_asgi.wire.tokens import TokenSigner, new_stream_id
from tests.apps.mcpserver_app import create_app
from tests.support.raw import RawSession, Reply
from tests.support.server import ServerInfo, SubprocessServer, serve_in_loop
from tests.support.timing import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(120)]

APP = "tests.apps.wrapped_app:create_app"


async def start(path: Path) -> tuple[SubprocessServer, ServerInfo]:
    server = SubprocessServer(APP, factory_kwargs={"store": f"sqlite://{path}"}, graceful_shutdown=1.0)
    return server, await anyio.to_thread.run_sync(server.start)


async def stop(server: SubprocessServer, how: signal.Signals) -> None:
    server.signal(how)
    await anyio.to_thread.run_sync(server.wait, scaled(30))
    server.kill()


def results(reply: Reply, request_id: int) -> list[Any]:
    return [m for m in reply.messages() if isinstance(m, dict) and m.get("id") == request_id]


async def resume(base_url: str, session: RawSession, last_id: str) -> Reply:
    async with httpx.AsyncClient(base_url=base_url, timeout=scaled(30)) as client:
        resumer = RawSession(client)
        resumer.session_id = session.session_id
        return await resumer.exchange(
            "GET",
            "/mcp",
            headers=resumer.headers(accept="text/event-stream", last_event_id=last_id),
            timeout=30,
        )


def file_record(path: Path, stream_id: str) -> StreamMeta | None:
    """The stream's record as the file holds it (its process gone: what a restart finds)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        row = db.execute("SELECT meta FROM streams WHERE id = ?", (stream_id,)).fetchone()
    return None if row is None else sqlite_file.decode_meta(row[0])


async def follow_and_kill(
    server: SubprocessServer, base_url: str, session: RawSession, last_id: str
) -> Reply:
    """Resume the call on its process and SIGKILL that process the moment the call's answer
    arrives: its end may not have reached the file yet (a write returns once queued)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=scaled(30)) as client:
        follower = RawSession(client)
        follower.session_id = session.session_id
        headers = follower.headers(accept="text/event-stream", last_event_id=last_id)
        async with follower.open("GET", "/mcp", headers=headers) as (response, reader):
            reply = Reply(response.status_code, response.headers)
            with anyio.fail_after(scaled(30)):
                async for event in reader:
                    reply.events.append(event)
                    message = event.message
                    if isinstance(message, dict) and "id" in message and "method" not in message:
                        server.signal(signal.SIGKILL)
                        break
    return reply


@pytest.mark.parametrize("how", ["stopped", "killed", "killed-at-the-answer"])
async def test_a_finished_calls_result_is_served_to_a_resume_after_a_restart(
    tmp_path: Path, how: str
) -> None:
    path = tmp_path / "mcp.db"
    first, info = await start(path)
    try:
        async with httpx.AsyncClient(base_url=info.base_url, timeout=scaled(30)) as client:
            session = RawSession(client)
            await session.initialize()
            call = session.tool_call("slow_progress", {"seconds": 0.2, "steps": 2}, progress=True)
            cut = await session.exchange("POST", "/mcp", call, stop_after=1)  # the client's connection drops
            assert cut.status == 200 and cut.last_id is not None and not results(cut, call["id"])
        if how == "killed-at-the-answer":
            before = await follow_and_kill(first, info.base_url, session, cut.last_id)
        else:  # (on the first process: it finished)
            before = await resume(info.base_url, session, cut.last_id)
        assert results(before, call["id"])[0]["result"]["content"][0]["text"] == "done 2"
    finally:
        await stop(first, signal.SIGTERM if how == "stopped" else signal.SIGKILL)
    # Every id the earlier life handed out (of the events the client got), and what the file kept.
    handed_out = [e.id for e in cut.events + before.events if e.data and e.id]
    stream_id = cut.last_id.rpartition(":")[0].rpartition(".")[0]
    kept = file_record(path, stream_id)
    assert kept is not None, "the call's record was written with its first event"
    second, info = await start(path)
    try:
        if kept.final_seq is not None:  # (its end reached the file)
            after = await resume(info.base_url, session, cut.last_id)
            assert after.status == 200
            answers = results(after, call["id"])
            assert [e.id for e in after.events if e.data] == [e.id for e in before.events if e.data]
            assert len(answers) == 1 and answers[0]["result"]["content"][0]["text"] == "done 2"
            return
        # Killed within the commit window (a write returns once queued, `SQLiteStore`'s
        # durability): the call's end is not in the file. A resume after any id the client
        # holds of the events before the answer - those in the file and those the file lacks -
        # gets one answer: the error saying the call's process stopped (the restarted node's
        # sweep, or this resume, ended it), under an id the earlier life never handed out.
        assert how != "stopped", "a drained process writes what it recorded"
        print(f"\n{how}: the call's end was lost (the file holds seqs up to {kept.last_seq})")
        for held in handed_out[:-1]:  # (the last one is the answer's: the client has it)
            after = await resume(info.base_url, session, held)
            assert after.status == 200, (held, after.raw)
            answers = results(after, call["id"])
            assert len(answers) == 1 and "stopped" in answers[0]["error"]["message"], (held, answers)
            answer_id = next(e.id for e in after.events if e.data and "error" in e.data)
            assert answer_id is not None and answer_id not in handed_out, (answer_id, handed_out)
    finally:
        await stop(second, signal.SIGTERM)


async def test_a_call_running_when_its_process_was_killed_ends_with_an_error_after_the_restart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mcp.db"
    first, info = await start(path)
    try:
        async with httpx.AsyncClient(base_url=info.base_url, timeout=scaled(30)) as client:
            session = RawSession(client)
            await session.initialize()
            call = session.tool_call("slow_progress", {"seconds": 600, "steps": 6000}, progress=True)
            cut = await session.exchange("POST", "/mcp", call, stop_after=5)
            # From its first event: the last ones sent may not have reached the file when the
            # process is killed (a write returns once queued), and the resume says so instead.
            first_id = next(e.id for e in cut.events if e.data and e.id)
    finally:
        await stop(first, signal.SIGKILL)
    second, info = await start(path)
    try:
        after = await resume(info.base_url, session, first_id)
        answers = results(after, call["id"])
        assert len(answers) == 1 and "stopped" in answers[0]["error"]["message"]
    finally:
        await stop(second, signal.SIGTERM)


async def test_a_call_that_finishes_during_the_drain_is_served_after_the_restart(tmp_path: Path) -> None:
    """SIGTERM mid-call: the drain lets the call finish and the store writes what it recorded
    before the process exits (uvicorn ends it with the signal: no exit hook would run)."""
    path = tmp_path / "mcp.db"
    first, info = await start(path)
    try:
        async with httpx.AsyncClient(base_url=info.base_url, timeout=scaled(30)) as client:
            session = RawSession(client)
            await session.initialize()
            call = session.tool_call("slow_progress", {"seconds": 1.5, "steps": 15}, progress=True)
            async with session.open("POST", "/mcp", call) as (_, reader):
                async for event in reader:
                    if event.data and event.id:
                        first_id = event.id
                        break
            first.signal(signal.SIGTERM)  # mid-call: the call goes on during the drain
            await anyio.to_thread.run_sync(first.wait, scaled(60))
    finally:
        first.kill()
    second, info = await start(path)
    try:
        after = await resume(info.base_url, session, first_id)
        answers = results(after, call["id"])
        assert len(answers) == 1 and answers[0]["result"]["content"][0]["text"] == "done 15"
    finally:
        await stop(second, signal.SIGTERM)


def progress(n: int) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": 1, "progress": n},
    }
    return encode_payload(p.dumps(message), b"message")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_resume_after_an_id_the_file_never_got_gets_the_error_once(tmp_path: Path) -> None:
    """The file as a life killed within its commit window leaves it: the call's record running
    under that life's node, two of its events; the client got a third (its id signed with the
    file's secret, as that life minted it), which never reached the file. The restarted node's
    sweep ends the call; the client's resume after its third id gets the error, once, under an
    id that life never handed out."""
    path = tmp_path / "mcp.db"
    stream_id = new_stream_id()
    earlier = SQLiteStore(path)
    try:
        record = StreamMeta(
            stream_id=stream_id,
            kind=StreamKind.REQUEST,
            session_id="a-session-of-the-earlier-life",
            principal=None,
            protocol_version="2025-11-25",
            path="/mcp",
            request_id=7,
            method="tools/call",
            owner="the-earlier-life",
        )
        await earlier.create_stream(record, ttl_s=300)
        assert await indexed(earlier, stream_id, 300)  # (listed for the sweep, as its engine lists it)
        await earlier.append(
            stream_id, [(1, progress(1)), (2, progress(2))], max_events=100, max_bytes=1 << 20
        )
        handed_out = TokenSigner(earlier.own_secret()).event_prefix(stream_id).decode()
    finally:
        await earlier.aclose()  # (committed: the first two events are in the file, the third is not)
    store = SQLiteStore(path)
    async with (
        contextlib.AsyncExitStack() as closing,
        serve_in_loop(resumable(create_app(), store=store)) as info,
        httpx.AsyncClient(base_url=info.base_url, timeout=scaled(30)) as client,
    ):
        closing.push_async_callback(store.aclose)
        with anyio.fail_after(scaled(30)):  # (its sweep runs at startup: the earlier life is gone)
            while (meta := await store.get_stream(stream_id)) is None or meta.final_seq is None:
                await anyio.sleep(0.05)
        resumer = RawSession(client)
        resumer.session_id = record.session_id
        replies = []
        for last in (3, 2):
            replies.append(
                await resumer.exchange(
                    "GET",
                    "/mcp",
                    headers=resumer.headers(accept="text/event-stream", last_event_id=f"{handed_out}{last}"),
                    timeout=30,
                )
            )
    error = {"jsonrpc": "2.0", "id": 7, "error": {"code": -32000, "message": ORPHAN_TEXT}}
    for reply in replies:
        assert reply.status == 200, reply.raw
        assert [m for m in reply.messages() if m.get("id") == 7] == [error], reply.raw
        ids = [e.id for e in reply.events if e.data]
        assert len(ids) == 1 and ids[0] is not None and ids[0].startswith(handed_out), ids
        assert int(ids[0][len(handed_out) :]) > 3, "an id the earlier life never handed out"
