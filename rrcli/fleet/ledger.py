"""One budget for every process sharing it: spend reserved and settled atomically in
Redis, one Lua script a step (as the gate's own steps: ``_scripts``).

Keys of the budget named ``<name>`` (the profile's budget key, or the queue's; hash tag
``{budget:<name>}``, so one slot on a cluster; a budget with a ``period`` is named
``<name>@<period>``, ``team@2026-12-06``, its spend in each period kept apart)::

    shares   HASH  owner -> USD     what each results file's runs settled (owner: its path)
    held     ZSET  token -> expiry  the reservations of the attempts in flight
    amounts  HASH  token -> USD
    procs    ZSET  process -> expiry

The spend is the sum of the shares. A process joins with its results file's own earlier spend
(``--resume``: read from its traces; a run that starts the file afresh: 0), which REPLACES that
file's share: nothing else is reset, so a process that joins after every other one ended still
counts what they spent. A Redis that restarts empty never resets the spend either: each live
process puts its share and its reservations back every ``interval`` (as the gate puts back its
leases) and with each step; what is lost without persistence is the share of a results file
whose processes all ended before the restart. The keys expire ``KEEP_S`` after the budget's last
step. A reservation (and a process's membership) expires ``ttl`` after its last step: longer
than any attempt may take, so only a dead process's reservations ever expire. Numbers cross the
script boundary as strings.

A budget with a ``period`` (``day`` or ``month``, UTC, as ``records.ledger.period_of`` says)
counts each period's spend under that period's keys: a process's first step in a later period
(by its own clock) goes to the new keys with its share started again at nothing, and a call in
flight across the change settles in the period it ends in (its reservation in the old one
expires with its ``ttl``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from rrcli.config.profile import GateSettings, Profile
from rrcli.errors import RedisDown
from rrcli.fleet._hub import Hub
from rrcli.fleet._scripts import Script
from rrcli.records.ledger import period_of

__all__ = ["KEEP_S", "RedisLedger", "budget_hub"]

KEY_NAMES = ("shares", "held", "amounts", "procs")
KEEP_S = 7 * 24 * 3600  # seconds a budget outlives its last step

_COMMON = """
for _, dead in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('HDEL', KEYS[3], dead)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), ARGV[1])
local function keep()
  for i = 1, 4 do redis.call('EXPIRE', KEYS[i], KEEP_S) end
end
local function total(hash)
  local sum = 0
  for _, v in ipairs(redis.call('HVALS', hash)) do sum = sum + tonumber(v) end
  return sum
end
local function restore(owner, mine)
  local had = tonumber(redis.call('HGET', KEYS[1], owner) or 0)
  if mine > had then redis.call('HSET', KEYS[1], owner, fmt(mine)) end
end
""".replace("KEEP_S", str(KEEP_S))

# ARGV process ttl owner earlier. Returns the spend after joining.
JOIN = Script(
    KEY_NAMES,
    _COMMON
    + """
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
keep()
return fmt(total(KEYS[1]))
""",
)

# ARGV process ttl owner mine token cost limit. Sets ``cost`` aside unless the spend, the
# reservations in flight and it would pass ``limit``; ``mine``: the owner's share as this
# process knows it (put back if Redis lost it). Returns {1 if reserved else 0, spent, held}.
RESERVE = Script(
    KEY_NAMES,
    _COMMON
    + """
restore(ARGV[3], tonumber(ARGV[4]))
keep()
local held = total(KEYS[3])
local spent = total(KEYS[1])
local cost = tonumber(ARGV[6])
if spent + held + cost > tonumber(ARGV[7]) + 1e-12 then return {0, fmt(spent), fmt(held)} end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[5])
redis.call('HSET', KEYS[3], ARGV[5], ARGV[6])
return {1, fmt(spent), fmt(held + cost)}
""",
)

# ARGV process ttl owner mine token. Drops the reservation; the owner's share becomes ``mine``
# (what this process settled, the attempt's charge included). Returns the spend.
SETTLE = Script(
    KEY_NAMES,
    _COMMON
    + """
redis.call('ZREM', KEYS[2], ARGV[5])
redis.call('HDEL', KEYS[3], ARGV[5])
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
keep()
return fmt(total(KEYS[1]))
""",
)

# ARGV process ttl owner mine token amount token amount ... Puts back what Redis lost.
RESTORE = Script(
    KEY_NAMES,
    _COMMON
    + """
restore(ARGV[3], tonumber(ARGV[4]))
for i = 5, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 0 then
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[i])
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  end
end
keep()
return 0
""",
)

# ARGV process. A process leaves; the spend stays.
LEAVE = Script(
    KEY_NAMES,
    """
redis.call('ZREM', KEYS[4], ARGV[1])
return 0
""",
)


def budget_hub(url: str) -> Hub:
    """A connection of its own to the Redis at ``url``, for a budget on no Redis gate (a
    queue's, with a local gate); the ledger closes it."""
    import random
    import time

    settings = GateSettings(kind="redis", url=url)
    return Hub(settings, rng=random.Random(), clock=time.monotonic, sleep=asyncio.sleep)


def budget_keys(name: str) -> dict[str, str]:
    """The Redis keys of the budget named ``name``."""
    return {key: f"rrcli:{{budget:{name}}}:{key}" for key in KEY_NAMES}


class RedisLedger:
    """A ``budget.Ledger`` shared through Redis under the budget ``name``; ``spent`` and
    ``reserved`` are everyone's, as last seen; ``mine`` is this results file's share (in the
    period at hand), as this process settled it. ``period``: "day" or "month" (a budget that
    spends again from nothing at each one's start, UTC), "" for none; ``clock``: epoch
    seconds, which tell the period."""

    def __init__(
        self,
        hub: Hub,
        name: str,
        limit: float,
        ttl: float,
        owner: str,
        period: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spent = self.reserved = self.mine = 0.0
        self._hub, self._name, self._limit, self._ttl = hub, name, limit, ttl
        self._owner, self.period, self._clock = owner, period, clock
        self._label: str | None = None  # the period whose keys ``_keys`` are
        self._keys: dict[str, str] = {}
        self._held: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self.owns_hub = False  # a hub of its own (``budget_hub``): closed with the ledger
        self._period_keys()

    @classmethod
    async def join(
        cls,
        hub: Hub,
        profile: Profile,
        limit: float,
        earlier: float,
        name: str,
        owner: str,
        period: str = "",
    ) -> RedisLedger:
        """Join the budget ``name`` on ``hub``'s Redis as ``owner`` (a results file), whose
        earlier spend is ``earlier``, counted per ``period`` ("": never started again)."""
        ttl = hub.lease + max((b.timeout for b in profile.backends), default=60.0)
        ledger = cls(hub, name, limit, ttl, owner, period)
        ledger.mine = earlier
        spent = await hub.run_until_up(JOIN, ledger._keys, *ledger._me(), repr(earlier))
        ledger.spent = float(spent)
        ledger._task = asyncio.create_task(ledger._restoring(), name="rrcli.budget.restore")
        return ledger

    def renews_in(self) -> float | None:
        """Seconds until the budget's period starts again (None: no period)."""
        now = self._clock()
        ends = period_of(self.period, now)[1]
        return None if ends is None else max(0.0, ends - now)

    def _period_keys(self) -> dict[str, str]:
        """The keys of the period at hand; in a new one this process's share starts again."""
        label = period_of(self.period, self._clock())[0]
        if label != self._label:
            if self._label is not None:
                self.mine = 0.0
            self._label = label
            self._keys = budget_keys(f"{self._name}@{label}" if label else self._name)
        return self._keys

    def _me(self) -> tuple[str, float, str]:
        return self._hub.process, self._ttl, self._owner

    async def reserve(self, cost: float) -> str | None:
        """Set ``cost`` aside: its token, or None when it would pass the limit. Cancelled while
        Redis answers, the round trip goes on and a reservation it made is settled at nothing:
        room granted to an attempt that is gone is never held for it."""
        hub, token = self._hub, self._hub.token()
        await hub.wait_admissible()  # after an outage, the others' shares come back first
        keys = self._period_keys()
        asking = asyncio.ensure_future(
            hub.run_until_up(
                RESERVE,
                keys,
                *self._me(),
                repr(self.mine),
                token,
                repr(cost),
                repr(self._limit),
            )
        )
        try:
            ok, spent, held = await asyncio.shield(asking)
        except asyncio.CancelledError:
            hub.background(self._give_back(asking, keys, token))
            raise
        self.spent, self.reserved = float(spent), float(held)
        if not int(ok):
            return None
        self._held[token] = cost
        return token

    async def _give_back(
        self, asking: asyncio.Future[list[str]], keys: dict[str, str], token: str
    ) -> None:
        """Once the reservation ``token`` a cancelled attempt asked for (under ``keys``) is
        answered, drop it."""
        with contextlib.suppress(Exception):
            if int((await asking)[0]):
                await self._hub.run(SETTLE, keys, *self._me(), repr(self.mine), token)

    async def settle(self, token: str, reserved: float, actual: float) -> None:
        self._held.pop(token, None)
        keys = self._period_keys()
        self.mine += actual
        spent = await self._hub.run_until_up(SETTLE, keys, *self._me(), repr(self.mine), token)
        self.spent = float(spent)

    async def _restoring(self) -> None:
        """Every renewal period, put back this process's share and reservations."""
        while True:
            await asyncio.sleep(self._hub.interval)
            held = [x for token, cost in self._held.items() for x in (token, repr(cost))]
            with contextlib.suppress(RedisDown):
                keys = self._period_keys()
                await self._hub.run(RESTORE, keys, *self._me(), repr(self.mine), *held)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._hub.best_effort("budget", LEAVE, self._keys, self._hub.process)
        if self.owns_hub:
            await self._hub.close()
