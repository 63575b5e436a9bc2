"""A budget's spend kept in a file, so it outlives the process: every process on the host that
names the same file and budget key shares it (``rrcli serve`` restarted, several ``serve`` or
``rrcli.Pool`` processes side by side).

The file is SQLite in WAL mode (``LEDGER_NAME``, in the trace file's folder), one table of
budgets (``key``, the ``period`` its spend counts, the ``spent`` USD) and one of the
reservations in flight (``held``: token, key, the owner process, USD, when it expires). Each
step is one ``BEGIN IMMEDIATE`` transaction: SQLite's file lock makes the check and the booking
one step for every process, so two never pass the limit together. ``synchronous = NORMAL``: a
process killed at any moment loses nothing committed (a power cut may lose the last
transactions; ``FULL``, an fsync a step, cost 2.3 ms a step against 72 us here, measured on
this machine's disk, and would bound a gateway to a few hundred calls a second).

A reservation expires ``ttl`` seconds after its owner last renewed it (``renew``, every
``RENEW_S`` while the process lives), so only a dead process's reservations expire; an expired
one is CHARGED as spent (the process died with the call in flight, which the provider may have
billed: an unknown usage costs its reservation), and a settle that finds its reservation so
charged replaces the charge by the call's own.

A budget with a ``period`` (``day`` or ``month``, UTC) starts its spend again at each period's
start: the period a budget's spend counts is stored with it, and the first step in a later
period finds it over.
"""

from __future__ import annotations

import calendar
import os
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["LEDGER_NAME", "LEDGER_TTL", "PERIODS", "RENEW_S", "FileLedger", "period_of"]

LEDGER_NAME = "rrcli-budget.sqlite"
LEDGER_TTL = 60.0  # seconds a reservation outlives its owner's last renewal
RENEW_S = 15.0  # seconds between a live process's renewals of its reservations
PERIODS = ("day", "month")
_EPSILON = 1e-12  # USD: float sums that equal the limit do not pass it

_SCHEMA = """
CREATE TABLE IF NOT EXISTS budgets (
    key TEXT PRIMARY KEY, period TEXT NOT NULL, spent REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS held (
    token TEXT PRIMARY KEY, key TEXT NOT NULL, owner TEXT NOT NULL,
    cost REAL NOT NULL, expires REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS held_key ON held (key);
"""


def period_of(period: str, now: float) -> tuple[str, float | None]:
    """The period a budget's spend counts at ``now`` (epoch seconds), as stored ("" with no
    ``period``; ``2026-12-06`` a day; ``2026-12`` a month, UTC), and the epoch second the next
    one starts (None with no period)."""
    if not period:
        return "", None
    day = datetime.fromtimestamp(now, UTC)
    if period == "day":
        start = calendar.timegm((day.year, day.month, day.day, 0, 0, 0))
        return day.strftime("%Y-%m-%d"), start + 86400.0
    year, month = (day.year + 1, 1) if day.month == 12 else (day.year, day.month + 1)
    return day.strftime("%Y-%m"), float(calendar.timegm((year, month, 1, 0, 0, 0)))


class FileLedger:
    """A ``routing.budget.Ledger`` in the file at ``path``, under budget ``key``: ``spent`` and
    ``reserved`` are every process's, as last seen. ``clock``: epoch seconds (a reservation's
    expiry and the period are wall-clock times, shared by every process)."""

    def __init__(
        self,
        path: Path,
        key: str,
        limit: float,
        period: str = "",
        ttl: float = LEDGER_TTL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path, self.key, self.limit, self.period, self.ttl = path, key, limit, period, ttl
        self._clock = clock
        self.owner = f"{os.getpid()}-{os.urandom(4).hex()}"
        self._count = 0
        self._renews_at: float | None = None  # when the period seen last ends
        self._spent = self.reserved = 0.0
        self.renewing: object = None  # the renewal task a front-end's loop runs (``cancel``)
        self._db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.executescript(_SCHEMA)
        self._step(lambda now: None)

    @property
    def spent(self) -> float:
        """USD settled in the budget's period, as last seen; 0 once that period is over."""
        ends = self._renews_at
        if ends is not None and self._now() >= ends:
            return 0.0
        return self._spent

    def renews_in(self) -> float | None:
        """Seconds until the budget's period starts again (None: no period)."""
        ends = period_of(self.period, self._now())[1]
        return None if ends is None else max(0.0, ends - self._now())

    def _now(self) -> float:
        return self._clock()

    def _step(self, act: Callable[[float], object]) -> object:
        """One transaction: reservations expired charged, the period rolled, then ``act(now)``;
        ``spent`` and ``reserved`` read back."""
        db, key, now = self._db, self.key, self._now()
        label, self._renews_at = period_of(self.period, now)
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT period, spent FROM budgets WHERE key = ?", (key,)).fetchone()
            if row is None or row[0] != label:
                db.execute(
                    "INSERT OR REPLACE INTO budgets (key, period, spent) VALUES (?, ?, 0)",
                    (key, label),
                )
            expired = db.execute(
                "SELECT COALESCE(SUM(cost), 0) FROM held WHERE key = ? AND expires < ?",
                (key, now),
            ).fetchone()[0]
            if expired:
                db.execute("DELETE FROM held WHERE key = ? AND expires < ?", (key, now))
                db.execute("UPDATE budgets SET spent = spent + ? WHERE key = ?", (expired, key))
            outcome = act(now)
            self._spent = db.execute("SELECT spent FROM budgets WHERE key = ?", (key,)).fetchone()[
                0
            ]
            self.reserved = db.execute(
                "SELECT COALESCE(SUM(cost), 0) FROM held WHERE key = ?", (key,)
            ).fetchone()[0]
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return outcome

    async def reserve(self, cost: float) -> str | None:
        """Set ``cost`` aside: its token, or None when the spend, the reservations and it would
        pass the limit."""
        self._count += 1
        token = f"{self.owner}-{self._count}"
        db, key = self._db, self.key

        def act(now: float) -> str | None:
            spent = db.execute("SELECT spent FROM budgets WHERE key = ?", (key,)).fetchone()[0]
            held = db.execute(
                "SELECT COALESCE(SUM(cost), 0) FROM held WHERE key = ?", (key,)
            ).fetchone()[0]
            if spent + held + cost > self.limit + _EPSILON:
                return None
            db.execute(
                "INSERT INTO held (token, key, owner, cost, expires) VALUES (?, ?, ?, ?, ?)",
                (token, key, self.owner, cost, now + self.ttl),
            )
            return token

        return self._step(act)  # type: ignore[return-value]

    async def settle(self, token: str, reserved: float, actual: float) -> None:
        """Replace the reservation ``token`` of ``reserved`` by ``actual``; one that expired
        meanwhile was charged ``reserved``, which ``actual`` then replaces."""
        db, key = self._db, self.key

        def act(now: float) -> None:
            gone = db.execute("DELETE FROM held WHERE token = ?", (token,)).rowcount == 0
            charge = actual - reserved if gone else actual
            db.execute("UPDATE budgets SET spent = MAX(0, spent + ?) WHERE key = ?", (charge, key))

        self._step(act)

    def renew(self) -> None:
        """Push back the expiry of this process's reservations (it is alive)."""
        db, now = self._db, self._now()
        db.execute("UPDATE held SET expires = ? WHERE owner = ?", (now + self.ttl, self.owner))

    async def close(self) -> None:
        if self.renewing is not None:
            self.renewing.cancel()  # type: ignore[attr-defined]
        self._db.close()
