"""A `SQLiteStore`'s file: its lock, its tables, how records are written to it and read back.

One process per file. `lock` takes an exclusive `flock` on `<path>.lock` for as long as the
store is open (the kernel lets it go when the process dies, however it dies), and the SQLite
connection runs in `locking_mode=EXCLUSIVE` besides, so no other SQLite client writes the file
meanwhile either. A second process is refused at startup (`SQLiteStoreLockedError`), saying to
use Redis for several processes.

Durability: `journal_mode=WAL`, `synchronous=NORMAL`. A committed write is in the WAL file (in
the OS's page cache): the process may die at any point after (SIGKILL, a crash) and a restart
finds it (a write returns once committed with `wait_for_commit`, else at once, noted for the
writer's next transaction: `sqlite.py`). The WAL is synced to the disk at each checkpoint, not at each commit, so a
power loss or an OS crash can take the writes committed since the last checkpoint (SQLite
checkpoints every 1,000 pages of WAL); it does not corrupt the file. `synchronous=FULL` would
sync at each commit, at the cost of a disk flush per write.

The tables hold what `MemoryStore` holds: `streams` (a record per stream, as JSON, with its
expiry in unix time; no index on it: a stream's record is written at most once per round of
the event loop, the sweep that reads the expiries every few seconds scans), `events`
(`(stream, seq, payload)`, keyed by both: one B-tree), `sessions`, `keys`, `members` (index
members), and `info` (the schema version, the secret that signs this process's stream URLs and
event ids, so they still verify after a restart). Anything read back is checked before use: a
row that does not decode is skipped, and logged once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import sqlite3
import time
from typing import Any

from mcp_resume_asgi.store import keys
from mcp_resume_asgi.store.base import SessionInfo, StreamMeta, record_fields, record_from_fields
from mcp_resume_asgi.store.memory import MemoryStore

__all__ = [
    "SCHEMA_VERSION",
    "SQLiteStoreError",
    "SQLiteStoreLockedError",
    "connect",
    "decode_meta",
    "encode_meta",
    "load",
    "lock",
    "sweep",
    "unlock",
]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
#: Rows a sweep deletes per table, at most.
SWEEP_ROWS = 1000
#: A row is swept this long after it expired (a clock step back never sweeps a live one).
SWEEP_GRACE_S = 60.0
#: Free pages a sweep gives back to the file system, at most (`incremental_vacuum`).
VACUUM_PAGES = 2000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS info (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS streams (
    id TEXT PRIMARY KEY, meta TEXT NOT NULL, expires_at REAL NOT NULL, touched INTEGER NOT NULL)
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    stream TEXT NOT NULL, seq INTEGER NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (stream, seq))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, info TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_by_expiry ON sessions (expires_at);
CREATE TABLE IF NOT EXISTS keys (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS keys_by_expiry ON keys (expires_at);
CREATE TABLE IF NOT EXISTS members (
    idx TEXT NOT NULL, member TEXT NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (idx, member));
CREATE INDEX IF NOT EXISTS members_by_expiry ON members (expires_at);
"""


class SQLiteStoreLockedError(RuntimeError):
    """Another process has the store's file open: a `SQLiteStore` serves one process."""


class SQLiteStoreError(Exception):
    """A write to the store's file failed (the disk or the file's size bound is full, an I/O
    error): the middleware takes it as a store outage and serves without the store meanwhile."""


# ----------------------------------------------------------------------------- one process
def lock(path: str) -> int:
    """Take the file's lock (`<path>.lock`) for this process; its descriptor, to `unlock`."""
    lock_path = f"{path}.lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise SQLiteStoreLockedError(
            f"the store file {path} is in use by another process (pid {holder}, per {lock_path}): "
            "a SQLiteStore serves one process; for several processes use a RedisStore "
            "(store='redis://host:6379/0')"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)  # (closing the descriptor lets the lock go)


# ----------------------------------------------------------------------------- the file
def connect(path: str, *, max_file_bytes: int | None) -> sqlite3.Connection:
    """Open (or create) the file with the store's settings and tables; ValueError if it is not
    a store's file this version can read."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        connection.execute("PRAGMA locking_mode=EXCLUSIVE")
        connection.execute("PRAGMA auto_vacuum=INCREMENTAL")  # (takes effect in a new file)
        mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise ValueError(f"{path}: SQLite would not use a write-ahead log here (journal_mode {mode})")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA journal_size_limit=67108864")
        if max_file_bytes is not None:
            page_size = connection.execute("PRAGMA page_size").fetchone()[0]
            connection.execute(f"PRAGMA max_page_count={max(1, max_file_bytes // page_size)}")
        connection.executescript(_SCHEMA)
        found = connection.execute("SELECT value FROM info WHERE name = 'schema'").fetchone()
        if found is None:
            connection.execute("INSERT INTO info VALUES ('schema', ?)", (SCHEMA_VERSION,))
        elif found[0] != SCHEMA_VERSION:
            raise ValueError(
                f"{path}: a store file of schema {found[0]!r}; this version reads {SCHEMA_VERSION}"
            )
    except sqlite3.DatabaseError as exc:
        connection.close()
        raise ValueError(f"{path}: not a store file this version can open ({exc})") from None
    except BaseException:
        connection.close()
        raise
    return connection


def secret(connection: sqlite3.Connection) -> bytes:
    """The secret kept in the file (made on its first open)."""
    found = connection.execute("SELECT value FROM info WHERE name = 'secret'").fetchone()
    if found is not None and isinstance(found[0], bytes) and len(found[0]) >= 32:
        return found[0]
    made = secrets.token_bytes(32)
    connection.execute("INSERT OR REPLACE INTO info VALUES ('secret', ?)", (made,))
    return made


# ----------------------------------------------------------------------------- records
_ENCODER = json.JSONEncoder(separators=(",", ":"))
"""(One encoder for every record: `json.dumps` with options builds one per call.)"""


def encode_meta(meta: StreamMeta) -> str:
    return _ENCODER.encode(record_fields(meta))


def _is(value: Any, kind: type | tuple[type, ...], optional: bool = False) -> bool:
    return (optional and value is None) or (isinstance(value, kind) and not isinstance(value, bool))


def decode_meta(text: Any) -> StreamMeta | None:
    """The record `encode_meta` wrote, or None for anything else."""
    try:
        f = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(f, list) or len(f) != 23:
        return None
    texts = (f[0], f[4], f[5], f[19])
    ints = (f[9], f[10], f[12], f[15], f[18], f[20])
    if (
        not all(_is(x, str) for x in texts)
        or not all(_is(x, int) for x in ints)
        or not all(_is(x, str, optional=True) for x in (f[2], f[3], f[7], f[22]))
        or not _is(f[11], int, optional=True)
        or not _is(f[17], (int, float))
        or not isinstance(f[13], list)
        or not isinstance(f[14], list)
        or not isinstance(f[16], bool)
        or not isinstance(f[21], bool)
    ):
        return None
    f[16] = False  # (no connection outlives the process that held it)
    f[17] = float(f[17])
    try:
        return record_from_fields(f)
    except ValueError:  # (a kind or state that is none)
        return None


def encode_session(info: SessionInfo) -> str:
    return _ENCODER.encode([info.session_id, info.protocol_version, info.principal, info.capabilities])


def decode_session(text: Any) -> SessionInfo | None:
    try:
        f = json.loads(text)
    except (TypeError, ValueError):
        return None
    if (
        not isinstance(f, list)
        or len(f) != 4
        or not _is(f[0], str)
        or not _is(f[1], str)
        or not _is(f[2], str, optional=True)
        or not isinstance(f[3], dict)
    ):
        return None
    return SessionInfo(f[0], f[1], f[2], f[3])


# ----------------------------------------------------------------------------- startup
def load(connection: sqlite3.Connection, memory: MemoryStore) -> dict[str, tuple[int, int]]:
    """Read what the file holds, unexpired, into `memory`; forget the earlier life's node
    heartbeats (that process is gone: this one holds the lock). Returns, per stream, the
    `(last_seq, first_seq)` the file holds it at."""
    now = time.time()
    node_prefix = keys.node("")
    with connection:
        connection.execute(
            "DELETE FROM keys WHERE key >= ? AND key < ?", (node_prefix, node_prefix[:-1] + ";")
        )
    skipped = 0
    saved: dict[str, tuple[int, int]] = {}
    rows = connection.execute(
        "SELECT id, meta, expires_at FROM streams WHERE expires_at > ? ORDER BY touched", (now,)
    ).fetchall()
    for stream_id, text, expires_at in rows:
        meta = decode_meta(text)
        if meta is None or meta.stream_id != stream_id:
            skipped += 1
            continue
        events = [
            (seq, payload)
            for seq, payload in connection.execute(
                "SELECT seq, payload FROM events WHERE stream = ? AND seq >= ? AND seq <= ? ORDER BY seq",
                (stream_id, meta.first_seq, meta.last_seq),
            )
            if isinstance(seq, int) and isinstance(payload, bytes)
        ]
        memory.restore_stream(meta, expires_at - now, events)
        saved[stream_id] = (meta.last_seq, meta.first_seq)
    for text, expires_at in connection.execute(
        "SELECT info, expires_at FROM sessions WHERE expires_at > ?", (now,)
    ):
        info = decode_session(text)
        if info is None:
            skipped += 1
            continue
        memory.restore_session(info, expires_at - now)
    for key, value, expires_at in connection.execute(
        "SELECT key, value, expires_at FROM keys WHERE expires_at > ?", (now,)
    ):
        if isinstance(key, str) and isinstance(value, str):
            memory.restore_key(key, value, expires_at - now)
        else:
            skipped += 1
    for index, member, expires_at in connection.execute(
        "SELECT idx, member, expires_at FROM members WHERE expires_at > ?", (now,)
    ):
        if isinstance(index, str) and isinstance(member, str) and isinstance(expires_at, float | int):
            memory.restore_member(index, member, float(expires_at))
        else:
            skipped += 1
    if skipped:
        logger.warning("the store file held %d rows that do not decode: skipped", skipped)
    return saved


# ----------------------------------------------------------------------------- upkeep
def sweep(connection: sqlite3.Connection, *, max_sessions: int, max_keys: int, max_members: int) -> None:
    """Delete rows that expired (a bounded number per table: the next sweep takes the rest)
    and the soonest to expire of a table beyond its bound; give free pages back to the disk."""
    cutoff = time.time() - SWEEP_GRACE_S
    connection.execute("BEGIN IMMEDIATE")
    expired = connection.execute(
        "SELECT id FROM streams WHERE expires_at <= ? LIMIT ?", (cutoff, SWEEP_ROWS)
    ).fetchall()
    connection.executemany("DELETE FROM events WHERE stream = ?", expired)
    connection.executemany("DELETE FROM streams WHERE id = ?", expired)
    for table, bound in (("sessions", max_sessions), ("keys", max_keys), ("members", max_members)):
        connection.execute(
            f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE expires_at <= ? LIMIT ?)",
            (cutoff, SWEEP_ROWS),
        )
        over = connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0] - bound
        if over > 0:
            connection.execute(
                f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} ORDER BY expires_at LIMIT ?)",
                (min(over, SWEEP_ROWS),),
            )
    connection.execute("COMMIT")
    connection.execute(f"PRAGMA incremental_vacuum({VACUUM_PAGES})").fetchall()
