"""`SQLiteWriter`: when its thread waits for more writes to join a transaction.

A write that finds the thread idle (nothing queued behind it, one write in the last
transaction) is committed at once: a caller that waits for its commit does not pay the
gathering delay. While writes pile up, the thread gathers them into one transaction.
The thread's sleeps are recorded (by thread name); nothing here depends on timing: the
pile-up is made by holding the thread inside a write's `done` callback.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mcp_resume_asgi.store import sqlite_writer
from mcp_resume_asgi.store.sqlite_writer import Op, SQLiteWriter

NAME = "test-sqlite-writer"


@pytest.fixture
def gathers(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The writer thread's gathering sleeps, in order (other threads sleep as before)."""
    slept: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if threading.current_thread().name == NAME:
            slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(sqlite_writer.time, "sleep", sleep)
    return slept


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[SQLiteWriter]:
    connection = sqlite3.connect(tmp_path / "w.db", isolation_level=None, check_same_thread=False)
    connection.execute("CREATE TABLE t (x INTEGER)")
    w = SQLiteWriter(connection, name=NAME, maintain=lambda c: None, describe=lambda e: RuntimeError(str(e)))
    yield w
    w.close()


def insert(x: int) -> list[Op]:
    return [("INSERT INTO t VALUES (?)", (x,), False)]


def rows(path: Path) -> list[int]:
    with sqlite3.connect(path) as connection:
        return [x for (x,) in connection.execute("SELECT x FROM t ORDER BY x")]


def test_a_lone_write_is_committed_without_gathering(
    writer: SQLiteWriter, gathers: list[float], tmp_path: Path
) -> None:
    async def main() -> None:
        for x in range(5):
            await writer.write(insert(x))  # (each waits for its commit: nothing is ever queued behind it)

    anyio.run(main)
    assert gathers == []
    assert rows(tmp_path / "w.db") == [0, 1, 2, 3, 4]


def test_writes_that_pile_up_are_gathered_and_a_lone_one_after_them_is_not(
    writer: SQLiteWriter, gathers: list[float], tmp_path: Path
) -> None:
    held, release = threading.Event(), threading.Event()
    committed: list[tuple[int, BaseException | None]] = []

    def done_holding(error: BaseException | None) -> None:  # (on the writer's thread)
        committed.append((0, error))
        held.set()
        release.wait(10)

    writer.submit(insert(0), done_holding)  # (alone in the queue: committed at once)
    assert held.wait(10)
    for x in range(1, 6):  # (queued while the thread is held in the first write's `done`)
        writer.submit(insert(x), lambda error, x=x: committed.append((x, error)))
    release.set()

    async def main() -> None:
        # The thread gathered 1-5 (and 6, if it came in time); 6 follows a transaction of
        # several, so it is gathered either way; 7 follows a transaction of one: at once.
        await writer.write(insert(6))
        await writer.write(insert(7))

    anyio.run(main)
    assert sorted(committed) == [(x, None) for x in range(6)]
    assert gathers == [sqlite_writer.GATHER_S, sqlite_writer.GATHER_S]
    assert rows(tmp_path / "w.db") == list(range(8))
