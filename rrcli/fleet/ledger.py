"""One budget for every process on a Redis gate (SPEC §13): spend reserved and settled
atomically in Redis, one Lua script a step (as the gate's own steps: ``_scripts``).

Keys of the budget of one profile (hash tag ``{budget:<profile>}``, so one slot on a cluster)::

    spent    STR   USD settled by every process
    held     ZSET  reservation token -> expiry   the reservations of the attempts in flight
    amounts  HASH  reservation token -> USD
    procs    ZSET  process -> expiry             the processes sharing the budget now

A process joins with the spend of its own earlier runs (``--resume``: read from its traces);
the first to join while no other is alive starts from zero, so a budget lives as long as some
process uses it and the next run starts afresh. A reservation (and a process's membership)
expires ``ttl`` after its last step: longer than any attempt may take (the gate's lease plus
the longest backend timeout), so only a dead process's reservations ever expire. Numbers cross
the script boundary as strings.
"""

from __future__ import annotations

from collections.abc import Mapping

from rrcli.config.profile import Profile
from rrcli.fleet._hub import Hub
from rrcli.fleet._scripts import Script

__all__ = ["RedisLedger"]

KEY_NAMES = ("spent", "held", "amounts", "procs")

_EXPIRE = """
for _, dead in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('HDEL', KEYS[3], dead)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
"""

# ARGV process ttl earlier. Returns the spend after joining.
JOIN = Script(
    KEY_NAMES,
    _EXPIRE
    + """
if redis.call('ZCARD', KEYS[4]) == 0 then redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) end
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), ARGV[1])
return redis.call('INCRBYFLOAT', KEYS[1], ARGV[3])
""",
)

# ARGV process ttl token cost limit. Sets ``cost`` aside unless the spend, the reservations in
# flight and it would pass ``limit``. Returns {1 if reserved else 0, spent, held}: held the
# reservations in flight, this one's included when it was made.
RESERVE = Script(
    KEY_NAMES,
    _EXPIRE
    + """
local held = 0
for _, amount in ipairs(redis.call('HVALS', KEYS[3])) do held = held + tonumber(amount) end
local spent = tonumber(redis.call('GET', KEYS[1]) or 0)
local cost = tonumber(ARGV[4])
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), ARGV[1])
if spent + held + cost > tonumber(ARGV[5]) + 1e-12 then return {0, fmt(spent), fmt(held)} end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[3])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
return {1, fmt(spent), fmt(held + cost)}
""",
)

# ARGV process ttl token actual. Drops the reservation, adds what the attempt cost. Returns the
# spend.
SETTLE = Script(
    KEY_NAMES,
    """
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('HDEL', KEYS[3], ARGV[3])
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), ARGV[1])
return redis.call('INCRBYFLOAT', KEYS[1], ARGV[4])
""",
)

# ARGV process. The last process to leave ends the budget.
LEAVE = Script(
    KEY_NAMES,
    """
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
if redis.call('ZCARD', KEYS[4]) == 0 then redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) end
return 0
""",
)


def budget_keys(name: str) -> dict[str, str]:
    """The Redis keys of the budget named ``name`` (the profile's label)."""
    return {key: f"rrcli:{{budget:{name}}}:{key}" for key in KEY_NAMES}


class RedisLedger:
    """A ``budget.Ledger`` shared through Redis; ``spent`` is everyone's, as last seen."""

    def __init__(self, hub: Hub, keys: Mapping[str, str], limit: float, ttl: float) -> None:
        self.spent = self.reserved = 0.0
        self._hub, self._keys, self._limit, self._ttl = hub, dict(keys), limit, ttl

    @classmethod
    async def join(cls, hub: Hub, profile: Profile, limit: float, earlier: float) -> RedisLedger:
        """Join the budget of ``profile`` on ``hub``'s Redis, adding ``earlier`` spend."""
        ttl = hub.lease + max((b.timeout for b in profile.backends), default=60.0)
        ledger = cls(hub, budget_keys(profile.label), limit, ttl)
        spent = await hub.run_until_up(JOIN, ledger._keys, hub.process, ttl, repr(earlier))
        ledger.spent = float(spent)
        return ledger

    async def reserve(self, cost: float) -> str | None:
        hub, token = self._hub, self._hub.token()
        ok, spent, held = await hub.run_until_up(
            RESERVE, self._keys, hub.process, self._ttl, token, repr(cost), repr(self._limit)
        )
        self.spent, self.reserved = float(spent), float(held)
        return token if int(ok) else None

    async def settle(self, token: str, reserved: float, actual: float) -> None:
        hub = self._hub
        spent = await hub.run_until_up(
            SETTLE, self._keys, hub.process, self._ttl, token, repr(actual)
        )
        self.spent = float(spent)

    async def close(self) -> None:
        await self._hub.best_effort("budget", LEAVE, self._keys, self._hub.process)
