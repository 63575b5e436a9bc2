"""The response cache file (``--cache PATH``): an SQLite database of answers by request key.

Why a module of its own: SQLite calls block, and the run is one event loop. A lookup is a
SELECT through the key's index on an in-process connection (a few microseconds: cheaper than a
hop to a thread and back), made on the loop; every write goes to ONE writer thread through a
queue, and the thread commits what has queued up as one transaction, so the loop never waits
for a commit or a lock held by another process (and the thread gathers answers for LINGER
before each commit: one commit a call would cost more CPU than the call).

Several processes may share one file: it is in WAL mode (readers never wait for writers), each
connection waits up to BUSY_TIMEOUT for a lock, and a batch that still meets a lock is tried
again until WRITE_DEADLINE, so no answer is dropped under contention. Keys and values are opaque
bytes here: what a key hashes and how an answer is encoded is ``run.cached``'s business.

The answers are a rowid table, appended in the order they are stored, and the keys a unique
index beside it: keys are hashes, so they land anywhere in their B-tree, and a batch of answers
kept in the key's own B-tree dirtied about a page an answer (the run was 0.89 × a run without a
cache, a bench_cache figure); appended, a batch fills a few pages at the table's end plus the
index leaves of its keys (0.95 ×).

A file that is not an rrcli cache is refused before anything is sent (``CacheError``, exit 2,
naming the file and the fix): not an SQLite database, a corrupt one, another program's
database (it has tables, none of them ours), a newer format. A file without write permission
is refused when answers would be stored (``read-only use`` is ``--cache-mode read``, explicit).
"""

from __future__ import annotations

import os
import queue
import sqlite3
import stat
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from rrcli.errors import CacheError
from rrcli.logs import get_logger

__all__ = ["FORMAT", "CacheFile"]

log = get_logger("rrcli")

FORMAT = 2  # the table layout's version, in the meta table as ("format", "2")
#: the layouts this rrcli reads and writes: 1 kept its answers in the key's B-tree (WITHOUT
#: ROWID), so every answer stored dirtied a page of its own; both answer ``_GET`` and ``_PUT``
READS = frozenset({"1", "2"})
BUSY_TIMEOUT = 30.0  # seconds a connection waits for another process's lock
WRITE_DEADLINE = 300.0  # seconds a batch keeps being retried against locks before it is lost
BATCH = 1024  # answers committed in one transaction at most
LINGER = 0.05  # seconds the writer gathers answers after the first before committing them
_HEADER = b"SQLite format 3\x00"
_META = "rrcli_cache_meta"
_TABLE = "rrcli_cache"
_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {_META} (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {_TABLE} (id INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE, "
    "model TEXT NOT NULL, answer BLOB NOT NULL, stored REAL NOT NULL)",
    f"INSERT OR IGNORE INTO {_META} VALUES ('format', '{FORMAT}')",
)
_GET = f"SELECT answer FROM {_TABLE} WHERE key = ?"
_GET_MANY = f"SELECT key, answer FROM {_TABLE} WHERE key IN ({{}})"
MANY = 256  # keys looked up in one SELECT at most (under any SQLite's limit of parameters)
#: the file's bytes the reader maps into memory, its pages then read without a copy (a lookup
#: of a chunk of 256 keys in a 31 MB file: 3.2 µs a key mapped, 5.8 read through the page cache)
MMAP_BYTES = 1 << 30
_PUT = f"INSERT OR REPLACE INTO {_TABLE} (key, model, answer, stored) VALUES (?, ?, ?, ?)"
_STOP = None
_FIX = "delete it (answers are stored again as jobs run) or name another --cache file"


class CacheFile:
    """One run's handle on a cache file: ``get`` on the caller's thread, ``put`` queued for the
    writer thread, ``close`` waits for the queue to be written. ``read``/``write`` say what the
    run may do (``--cache-mode``)."""

    def __init__(self, path: Path, *, read: bool = True, write: bool = True) -> None:
        self.path = path
        self.stored = 0  # answers committed by this handle
        self.lost = 0  # answers that could not be written (an error logged for them)
        self._reader: sqlite3.Connection | None = None
        self._lookup: sqlite3.Cursor | None = None
        self._queue: queue.SimpleQueue[tuple[bytes, str, bytes, float] | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        _refuse_unusable(path, write)
        conn = _connect(path, read_only=not write)
        try:
            _prepare(conn, path, write)
        except BaseException:
            conn.close()
            raise
        if read:
            conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            self._reader = conn
            self._lookup = conn.cursor()  # one cursor for every lookup: 4 µs less than a new one
        else:
            conn.close()
        if write:
            self._writer = threading.Thread(
                target=self._write_loop, name="rrcli-cache", daemon=True
            )
            self._writer.start()

    def get(self, key: bytes) -> bytes | None:
        """The answer stored under ``key``, None when there is none (or reads are off)."""
        if self._lookup is None:
            return None
        try:
            row = self._lookup.execute(_GET, (key,)).fetchone()
        except sqlite3.DatabaseError as exc:  # damaged under us: a miss, said once
            log.warning("rrcli.cache_unreadable", path=str(self.path), error=str(exc))
            self._lookup = None
            return None
        return None if row is None else row[0]

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The answers stored under ``keys`` (at most MANY), by key: one SELECT for them all;
        a key with none is absent."""
        if self._lookup is None or not keys:
            return {}
        try:
            rows = self._lookup.execute(_GET_MANY.format(",".join("?" * len(keys))), keys)
            return dict(rows.fetchall())
        except sqlite3.DatabaseError as exc:  # damaged under us: misses, said once
            log.warning("rrcli.cache_unreadable", path=str(self.path), error=str(exc))
            self._lookup = None
            return {}

    def put(self, key: bytes, model: str, answer: bytes) -> None:
        """Store ``answer`` under ``key`` (by the writer thread, soon); no-op when writes are
        off."""
        if self._writer is not None:
            self._queue.put((key, model, answer, time.time()))

    def close(self) -> None:
        """Write everything queued, then close both connections."""
        if self._writer is not None:
            self._queue.put(_STOP)
            self._writer.join()
            self._writer = None
        self._lookup = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _write_loop(self) -> None:
        """The writer thread: whatever has queued up, committed as one transaction (WAL with
        synchronous NORMAL, a per-connection setting: no fsync a commit)."""
        conn = _connect(self.path, read_only=False)
        conn.execute("PRAGMA synchronous=NORMAL")
        try:
            stopping = False
            while not stopping:
                batch, stopping = self._gather()
                if batch:
                    self._commit(conn, batch)
        finally:
            conn.close()

    def _gather(self) -> tuple[list, bool]:
        """(the next batch: the first answer and what queued up in the LINGER after it, at most
        BATCH; whether the handle is closing). A commit costs about 100 µs of CPU and waking
        this thread for each answer half that: a commit a call would cost more than the call."""
        item = self._queue.get()
        if item is _STOP:
            return [], True
        if self._queue.qsize() < BATCH:  # a full batch waiting is committed at once
            time.sleep(LINGER)
        batch = [item]
        while len(batch) < BATCH:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return batch, False
            if item is _STOP:
                return batch, True
            batch.append(item)
        return batch, False

    def _commit(self, conn: sqlite3.Connection, batch: list) -> None:
        """One transaction for ``batch``; a lock held by another process is waited out (the
        busy timeout, then again until WRITE_DEADLINE); any other failure loses the batch,
        logged."""
        deadline = time.monotonic() + WRITE_DEADLINE
        while True:
            try:
                with conn:  # BEGIN ... COMMIT, ROLLBACK on error
                    conn.executemany(_PUT, batch)
            except sqlite3.OperationalError as exc:
                if _locked(exc) and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                self._lose(batch, exc)
            except sqlite3.DatabaseError as exc:
                self._lose(batch, exc)
            else:
                self.stored += len(batch)
            return

    def _lose(self, batch: list, exc: Exception) -> None:
        self.lost += len(batch)
        log.error(
            "rrcli.cache_write_failed", path=str(self.path), answers=len(batch), error=str(exc)
        )


def _locked(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _connect(path: Path, *, read_only: bool) -> sqlite3.Connection:
    """A connection in autocommit mode (``with conn`` opens the writer's transactions), with the
    busy timeout; ``read_only`` opens the file as it is, never creating it."""
    try:
        if read_only:
            uri = f"{path.resolve().as_uri()}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT, check_same_thread=False)
        else:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT, check_same_thread=False)
    except sqlite3.Error as exc:
        raise CacheError(f"{path}: cannot open the cache file: {exc} — {_FIX}") from exc
    conn.isolation_level = "IMMEDIATE"  # the writer takes the write lock at BEGIN, waiting
    return conn


def _refuse_unusable(path: Path, write: bool) -> None:
    """CacheError for what is wrong before SQLite is asked: a folder, a file without the SQLite
    header, a read-only file (or folder) when answers would be stored, a missing file to read."""
    try:
        info = path.stat()
    except FileNotFoundError:
        if not write:
            raise CacheError(
                f"{path}: no such cache file — --cache-mode read needs an existing cache; run "
                "once with --cache-mode readwrite to fill one"
            ) from None
        folder = path.parent
        if not folder.is_dir():
            raise CacheError(
                f"{path}: cannot create the cache file: no folder {folder} — create it, or name "
                "a --cache file in an existing folder"
            ) from None
        if not os.access(folder, os.W_OK):
            raise CacheError(
                f"{path}: cannot create the cache file: the folder {folder} is not writable — "
                "name a --cache file in a writable folder"
            ) from None
        return
    if not stat.S_ISREG(info.st_mode):
        raise CacheError(f"{path}: the cache must be a regular file — name a file for --cache")
    if info.st_size:
        with open(path, "rb") as f:
            if f.read(len(_HEADER)) != _HEADER:
                raise CacheError(
                    f"{path}: not an SQLite database, so not an rrcli cache — name another "
                    "--cache file (rrcli creates it), or delete this one if it is an old cache"
                )
    if write and (not info.st_mode & 0o222 or not os.access(path, os.W_OK)):
        raise CacheError(
            f"{path}: the cache file is read-only — make it writable (chmod u+w {path}), or "
            "pass --cache-mode read to use its answers without storing new ones"
        )
    if write and not os.access(path.parent, os.W_OK):
        raise CacheError(
            f"{path}: the cache's folder is not writable (SQLite keeps its write-ahead log "
            "next to the file) — make it writable, or pass --cache-mode read"
        )


def _prepare(conn: sqlite3.Connection, path: Path, write: bool) -> None:
    """``_prepare_once``, again while another process holds the file's lock (switching to WAL
    mode waits for no busy handler), for up to BUSY_TIMEOUT."""
    deadline = time.monotonic() + BUSY_TIMEOUT
    while True:
        try:
            return _prepare_once(conn, path, write)
        except sqlite3.OperationalError as exc:
            if time.monotonic() >= deadline:
                raise CacheError(
                    f"{path}: the cache file stayed locked for {BUSY_TIMEOUT:.0f} s ({exc}) — "
                    "another program holds it; wait for it or name another --cache file"
                ) from exc
            time.sleep(0.05)


def _prepare_once(conn: sqlite3.Connection, path: Path, write: bool) -> None:
    """WAL mode and our tables on a new or empty file; CacheError for a corrupt file, another
    program's database or a newer format; a lock held elsewhere raised as it is."""
    try:
        if write:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            _create(conn)
        tables = _tables(conn)
        if not tables:  # an empty database opened read-only: nothing stored yet
            return
        if _META not in tables or _TABLE not in tables:
            names = ", ".join(sorted(tables)[:4])
            raise CacheError(
                f"{path}: an SQLite database of another program (tables: {names}), not an rrcli "
                "cache — name another --cache file; rrcli never writes into a database it did "
                "not create"
            )
        row = conn.execute(f"SELECT value FROM {_META} WHERE name = 'format'").fetchone()
        conn.execute(f"SELECT 1 FROM {_TABLE} LIMIT 1").fetchall()
    except sqlite3.OperationalError as exc:
        if _locked(exc):
            raise
        raise CacheError(f"{path}: the cache file is damaged ({exc}) — {_FIX}") from exc
    except sqlite3.DatabaseError as exc:
        raise CacheError(f"{path}: the cache file is damaged ({exc}) — {_FIX}") from exc
    if row is None or row[0] not in READS:
        raise CacheError(
            f"{path}: a cache of another format ({row[0] if row else 'none'}; this rrcli reads "
            f"{', '.join(sorted(READS))}) — {_FIX}"
        )


def _create(conn: sqlite3.Connection) -> None:
    """Our tables and format, in one write transaction, on a database that holds no other
    table: processes opening a new file at once never see it half made."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not _tables(conn) - {_META, _TABLE}:
            for statement in _SCHEMA:
                conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
