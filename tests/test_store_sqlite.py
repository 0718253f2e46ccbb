"""`SQLiteStore` beyond the contract suite (which runs it too): what it survives on one node.

- Closed and opened again, the store holds what it held: streams and their retained events,
  completed or not, sessions, keys, index members, deletions and evictions (all read back
  from the file, on asyncio and on trio).
- One process per file: a second process (a real one) is refused at startup, told to use Redis.
- SIGKILL mid-write: a child writing as fast as it can is killed; the file is intact and
  holds every write the child saw return.
- A full file (`max_file_bytes`, SQLite's `max_page_count`: real SQLITE_FULL errors): the
  write raises `SQLiteStoreError`, an outage to the middleware, and the store goes on.
- Expired rows are swept (bounded), and the earlier life's node heartbeats are gone on open.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from mcp_resume_asgi.core.orphans import after_loss
from mcp_resume_asgi.store import (
    SessionInfo,
    SQLiteStoreError,
    SQLiteStoreLockedError,
    StreamKind,
    StreamMeta,
    StreamState,
    keys,
    store_from_url,
)
from mcp_resume_asgi.store.sqlite import SQLiteStore
from mcp_resume_asgi.store.sqlite_file import sweep
from tests.support.server import REPO_ROOT
from tests.support.timing import scaled

pytestmark = pytest.mark.anyio

BOUNDS = {"max_events": 100, "max_bytes": 1 << 20}


def meta(stream_id: str = "s1", session_id: str | None = "sess", **fields: object) -> StreamMeta:
    return StreamMeta(
        stream_id=stream_id,
        kind=StreamKind.REQUEST,
        session_id=session_id,
        principal="alice",
        protocol_version="2025-11-25",
        path="/mcp",
        request_id=7,
        method="tools/call",
        **fields,  # type: ignore[arg-type]
    )


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_store_opened_again_holds_what_it_held(tmp_path: Path) -> None:
    path = tmp_path / "mcp.db"
    store = SQLiteStore(path)
    await store.open_with(
        meta("done", owner="n1", route=2, trace="00-" + "a" * 32 + "-" + "b" * 16 + "-01"),
        60,
        [(1, b"data: one\n\n"), (2, b"data: two\n\n")],
        final_seq=2,
        retain_s=120,
        **BOUNDS,
    )
    await store.create_stream(meta("running", pending_inputs=["q1"]), 60)
    await store.append(
        "running", [(i, f"data: {i}\n\n".encode()) for i in range(1, 6)], max_events=3, max_bytes=1 << 20
    )
    await store.create_stream(meta("gone"), 60)
    await store.delete_stream("gone")
    await store.put_session(SessionInfo("sess", "2025-11-25", "alice", {"elicitation": {}}), 60)
    await store.set_key("k", "v", 60)
    await store.set_key("short", "v", 0.01)
    assert await store.add_key("added", "1", 60) is None
    assert await store.replace_key("k", "v", "v2", 60)
    await store.index_add("idx", "m1", time.time() + 60, cap=10)
    await store.index_add("idx", "m2", time.time() + 60, cap=10)
    await store.index_remove("idx", "m2")
    await store.aclose()
    await anyio.sleep(0.05)  # past the 10 ms TTL of "short", however fast the lines above ran

    again = SQLiteStore(path)
    try:
        done = await again.get_stream("done")
        assert done is not None and done.state is StreamState.COMPLETED and done.final_seq == 2
        assert (done.owner, done.route, done.trace) == ("n1", 2, "00-" + "a" * 32 + "-" + "b" * 16 + "-01")
        assert await again.read("done", 0) == [(1, b"data: one\n\n"), (2, b"data: two\n\n")]
        running = await again.get_stream("running")
        assert running is not None and running.state is StreamState.RUNNING
        assert (running.first_seq, running.last_seq, running.pending_inputs) == (3, 5, ["q1"])
        assert [seq for seq, _ in await again.read("running", 2)] == [3, 4, 5]
        assert await again.get_stream("gone") is None
        session = await again.get_session("sess")
        assert session == SessionInfo("sess", "2025-11-25", "alice", {"elicitation": {}})
        assert await again.get_key("k") == "v2" and await again.get_key("added") == "1"
        assert await again.get_key("short") is None
        assert [m for m, _ in await again.index_page("idx")] == ["m1"]
        assert (await again.usage()).streams == 2
        # Still a working store: its waiters, its writes.
        await again.append("running", [(6, b"data: 6\n\n")], **BOUNDS)
        assert (await again.read("running", 5)) == [(6, b"data: 6\n\n")]
    finally:
        await again.aclose()
    third = SQLiteStore(path)
    try:
        assert [seq for seq, _ in await third.read("running", 2)] == [3, 4, 5, 6]
        # A stream taken from a lost node goes on far past its last event (`after_loss`).
        far = after_loss(6)
        assert await third.append_final("running", [(far, b"data: end\n\n")], final_seq=far, **BOUNDS)
    finally:
        await third.aclose()
    fourth = SQLiteStore(path)
    try:
        running = await fourth.get_stream("running")
        assert running is not None and (running.first_seq, running.last_seq, running.final_seq) == (
            3,
            far,
            far,
        )
        assert (
            await fourth.read("running", 6)
            == await fourth.read("running", far - 1)
            == [(far, b"data: end\n\n")]
        )
        assert [seq for seq, _ in await fourth.read("running", 2)] == [3, 4, 5, 6, far]
    finally:
        fourth.close()


async def test_a_stream_trimmed_by_the_global_budget_is_trimmed_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mcp.db"
    store = SQLiteStore(path, max_bytes=100)
    await store.create_stream(meta("a"), 60)
    await store.append("a", [(1, b"x" * 40), (2, b"x" * 40)], **BOUNDS)
    await store.create_stream(meta("b"), 60)
    await store.append("b", [(1, b"y" * 40)], **BOUNDS)  # the budget drops a's oldest
    await store.aclose()
    again = SQLiteStore(path, max_bytes=100)
    try:
        a = await again.get_stream("a")
        assert a is not None and a.first_seq == 2
        assert [seq for seq, _ in await again.read("a", 1)] == [2]
        assert (await again.usage()).bytes == 80
    finally:
        await again.aclose()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT stream, seq FROM events ORDER BY stream, seq").fetchall() == [
            ("a", 2),
            ("b", 1),
        ]


async def test_cold_streams_trimmed_evicted_or_deleted_are_so_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finished streams kept cold (`memory_stream.freeze`) have no entry to note their changes:
    what the store does to them reaches the file all the same."""
    from mcp_resume_asgi.store import memory

    monkeypatch.setattr(memory, "COLD_AFTER_S", 0.0)
    path = tmp_path / "mcp.db"
    store = SQLiteStore(path, max_streams=3, max_bytes=200, wait_for_commit=True)  # (each in the file first)
    for name in ("trimmed", "evicted", "deleted"):
        await store.open_with(
            meta(name), 60, [(1, b"x" * 40), (2, b"x" * 40)], **BOUNDS, final_seq=2, retain_s=60
        )
    await store.create_stream(meta("cools"), 60)  # full: "trimmed" leaves, the others go cold
    assert set(store._memory._cold) == {"evicted", "deleted"}
    await store.append("cools", [(1, b"y" * 100)], **BOUNDS)  # over the budget: trims "evicted"
    await store.delete_stream("deleted")
    await store.aclose()
    again = SQLiteStore(path, max_streams=3, max_bytes=200)
    try:
        assert await again.get_stream("trimmed") is None and await again.get_stream("deleted") is None
        evicted = await again.get_stream("evicted")
        assert evicted is not None and evicted.first_seq == 3 and evicted.state is StreamState.COMPLETED
    finally:
        await again.aclose()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT stream, seq FROM events ORDER BY stream, seq").fetchall() == [("cools", 1)]


async def test_the_earlier_lifes_node_heartbeats_are_gone_on_open(tmp_path: Path) -> None:
    path = tmp_path / "mcp.db"
    store = SQLiteStore(path)
    await store.set_key(keys.node("earlier"), "alive", 60)
    await store.set_key(keys.session_owner("s"), "earlier", 60)
    await store.aclose()
    again = SQLiteStore(path)
    try:
        assert await again.get_key(keys.node("earlier")) is None  # that node is not alive
        assert await again.get_key(keys.session_owner("s")) == "earlier"  # what it held is found
        assert again.own_secret() == SQLiteStore.own_secret(again) and len(again.own_secret()) == 32
    finally:
        await again.aclose()


async def test_the_secret_is_kept_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mcp.db"
    first = SQLiteStore(path)
    kept = first.own_secret()
    first.close()
    again = SQLiteStore(path)
    try:
        assert again.own_secret() == kept
    finally:
        again.close()


# ----------------------------------------------------------------------------- one process
def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}


def test_a_second_process_on_the_same_file_is_refused_at_startup(tmp_path: Path) -> None:
    path = tmp_path / "mcp.db"
    store = SQLiteStore(path)
    try:
        done = subprocess.run(
            python(f"from mcp_resume_asgi.store import store_from_url; store_from_url('sqlite://{path}')"),
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=scaled(60),
        )
        assert done.returncode != 0
        assert "SQLiteStoreLockedError" in done.stderr
        assert f"in use by another process (pid {os.getpid()}" in done.stderr
        assert "use a RedisStore" in done.stderr
        with pytest.raises(SQLiteStoreLockedError):  # (a second store in this process too)
            SQLiteStore(path)
    finally:
        store.close()
    reopened = store_from_url(f"sqlite://{path}")  # the file is free again
    assert isinstance(reopened, SQLiteStore)
    reopened.close()


WRITER = """
import sys, anyio
from mcp_resume_asgi.store import StreamKind, StreamMeta
from mcp_resume_asgi.store.sqlite import SQLiteStore
from mcp_resume_asgi.store.sqlite_file import sweep

async def main():
    store = SQLiteStore(sys.argv[1], wait_for_commit=sys.argv[2] == "wait")
    await store.create_stream(StreamMeta("w", StreamKind.REQUEST, "sess", None, "2025-11-25", "/mcp"), 600)
    seq = 0
    while True:
        seq += 1
        await store.append("w", [(seq, b"data: " + b"x" * (seq % 5000) + b"\\n\\n")], max_events=10**9, max_bytes=10**12)
        await store.set_key(f"k{seq % 1000}", str(seq), 600)
        print(seq, flush=True)
        await anyio.sleep(0)  # (as a server's loop goes round)

anyio.run(main)
"""


@pytest.mark.parametrize("writes", ["wait", "queue"])
def test_sigkill_mid_write_leaves_a_file_that_opens(tmp_path: Path, writes: str) -> None:
    """Waiting for commits (`wait_for_commit`), every write that returned is found; queued, a
    prefix of them is (what the writer had committed), whole."""
    path = tmp_path / "mcp.db"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), writes], env=child_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        returned = 0
        while returned < 1500:
            line = child.stdout.readline()
            assert line, "the writer stopped"
            returned = int(line)
        child.send_signal(signal.SIGKILL)  # mid-write: it writes without a pause
    finally:
        child.kill()
        child.wait(timeout=scaled(30))
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    async def reopened() -> None:
        store = SQLiteStore(path)
        try:
            found = await store.get_stream("w")
            if writes == "wait":
                assert found is not None and found.last_seq >= returned
                assert int(await store.get_key(f"k{returned % 1000}") or 0) >= returned
            elif found is None:  # (queued, none committed yet: a loaded machine's writer may lag)
                return
            events = await store.read("w", 0, limit=10**6)
            assert [seq for seq, _ in events] == list(range(1, found.last_seq + 1))
            assert all(payload == b"data: " + b"x" * (seq % 5000) + b"\n\n" for seq, payload in events)
            await store.append("w", [(found.last_seq + 1, b"data: after\n\n")], **BOUNDS)  # it writes on
        finally:
            await store.aclose()

    anyio.run(reopened)


# ----------------------------------------------------------------------------- a full file
async def test_a_full_file_fails_the_write_as_an_outage_and_the_store_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "mcp.db"
    store = SQLiteStore(path, max_file_bytes=128 * 1024, wait_for_commit=True)
    try:
        await store.set_key("small", "fits", 60)
        await store.create_stream(meta("big"), 60)
        with pytest.raises(SQLiteStoreError, match="database or disk is full") as caught:
            await store.append("big", [(1, os.urandom(512 * 1024))], **{**BOUNDS, "max_bytes": 1 << 30})
        assert store.is_unavailable_error(caught.value)
        assert str(path) in str(caught.value)
        await store.set_key("after", "fits too", 60)  # other writes go on
        await store.delete_stream("big")
    finally:
        await store.aclose()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    again = SQLiteStore(path)
    try:
        assert await again.get_key("small") == "fits" and await again.get_key("after") == "fits too"
        assert await again.get_stream("big") is None
    finally:
        await again.aclose()


async def test_a_queued_write_that_fails_is_logged_and_the_next_writes_wait_until_one_succeeds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    path = tmp_path / "mcp.db"
    store = SQLiteStore(path, max_file_bytes=128 * 1024)
    big = {**BOUNDS, "max_bytes": 1 << 30}
    try:
        await store.create_stream(meta("big"), 60)
        await store.create_stream(meta("bigger"), 60)
        await store.append("big", [(1, os.urandom(512 * 1024))], **big)  # queued: returns
        with anyio.fail_after(scaled(30)):
            while not any("could not be written" in r.getMessage() for r in caplog.records):
                await anyio.sleep(0.01)
        assert (await store.read("big", 0))[0][0] == 1  # (memory keeps it)
        with pytest.raises(SQLiteStoreError, match="database or disk is full") as caught:
            await store.append("bigger", [(1, os.urandom(512 * 1024))], **big)  # waits, and fails
        assert store.is_unavailable_error(caught.value)
        await store.set_key("after", "fits", 60)  # waited for: it succeeds, the outage is over
        await store.set_key("queued again", "fits", 60)
        logged = [r.getMessage() for r in caplog.records]
        assert sum("could not be written" in line for line in logged) == 1  # once per outage
        assert f"the store file {path} is written again" in logged
    finally:
        await store.aclose()
    again = SQLiteStore(path)
    try:
        assert await again.get_key("after") == "fits" and await again.get_key("queued again") == "fits"
    finally:
        await again.aclose()


# ----------------------------------------------------------------------------- upkeep
async def test_the_sweep_deletes_expired_rows_a_bounded_number_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "mcp.db"
    store = SQLiteStore(path)
    for i in range(1500):
        await store.set_key(f"k{i}", "v", 0.001)
    await store.set_key("kept", "v", 3600)
    await store.aclose()
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("UPDATE keys SET expires_at = expires_at - 3600 WHERE key != 'kept'")  # long expired
        sweep(db, max_sessions=10, max_keys=10_000, max_members=10)
        assert db.execute("SELECT count(*) FROM keys").fetchone()[0] == 501  # 1,000 per sweep
        sweep(db, max_sessions=10, max_keys=10_000, max_members=10)
        assert db.execute("SELECT key FROM keys").fetchall() == [("kept",)]
    finally:
        db.close()


async def test_store_urls_name_a_sqlite_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absolute = store_from_url(f"sqlite://{tmp_path}/abs.db", max_streams=5)
    assert isinstance(absolute, SQLiteStore) and absolute.max_streams == 5
    assert absolute.path == f"{tmp_path}/abs.db"
    absolute.close()
    monkeypatch.chdir(tmp_path)
    relative = store_from_url("sqlite://rel.db")
    assert isinstance(relative, SQLiteStore) and (tmp_path / "rel.db").exists()
    relative.close()


@pytest.mark.parametrize("encryption_key", [None, "an encryption key of 32 characters"])
def test_the_middleware_runs_a_node_on_a_durable_store_and_signs_with_its_secret(
    tmp_path: Path, encryption_key: str | None
) -> None:
    """(Through the store's wrappers too: telemetry's, the encryption's.)"""
    if encryption_key is not None:
        pytest.importorskip("cryptography")
    from mcp_resume_asgi import ResumeMiddleware
    from mcp_resume_asgi.wire.tokens import TokenSigner
    from tests.apps.mcpserver_app import create_app

    store = SQLiteStore(tmp_path / "mcp.db")
    try:
        middleware = ResumeMiddleware(create_app(), store=store, encryption_key=encryption_key)
        assert middleware.node is not None and middleware.store.durable
        assert middleware.store.own_secret() == store.own_secret()
        expected = TokenSigner(store.own_secret()).event_prefix("s" * 22)
        assert middleware.engine.services.signer.event_prefix("s" * 22) == expected
    finally:
        store.close()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("wait_for_commit", [True, False])
async def test_a_full_file_under_the_middleware_passes_the_answer_through(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, wait_for_commit: bool
) -> None:
    """Answers too big for the file: each client gets its answer, as on a store outage, and the
    cause is logged; the file is intact."""
    import httpx

    from mcp_resume_asgi import resumable
    from tests.apps.mcpserver_app import create_app
    from tests.support.raw import RawSession
    from tests.support.server import serve_in_loop

    caplog.set_level(logging.WARNING)
    path = tmp_path / "mcp.db"
    store = SQLiteStore(path, max_file_bytes=256 * 1024, wait_for_commit=wait_for_commit)
    big = "x" * (400 * 1024)
    try:
        async with (
            serve_in_loop(resumable(create_app(), store=store)) as info,
            httpx.AsyncClient(base_url=info.base_url, timeout=scaled(30)) as client,
        ):
            session = RawSession(client)
            await session.initialize()
            for _ in range(3):
                call = session.tool_call("echo", {"text": big})
                reply = await session.exchange("POST", "/mcp", call)
                assert reply.status == 200
                if reply.events:
                    answers = [
                        m for m in reply.messages() if isinstance(m, dict) and m.get("id") == call["id"]
                    ]
                else:
                    answers = [json.loads(reply.raw)]
                assert answers[0]["result"]["content"][0]["text"] == big
    finally:
        await store.aclose()
    assert any("database or disk is full" in r.getMessage() for r in caplog.records)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
