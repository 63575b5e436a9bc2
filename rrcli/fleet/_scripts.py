"""The Lua scripts behind the Redis gate, one atomic step each.

Why Lua: every step of the shared gate (admit a waiter, renew leases, charge a rate budget) reads
and writes several keys; a script runs them as one atomic step on the server, so no two processes
can both see the last free slot. Time is the server's (``TIME``), never a host's clock, so hosts
with skewed clocks agree. Every key of one scope carries the hash tag ``{scope}``
(``rrcli:{scope}:slots``...) so each script touches one hash slot and also runs on Redis Cluster.

Keys of one scope (see ``scope_keys``)::

    slots   ZSET  lease token -> expiry       the slots held now (a dead holder's expire)
    queue   ZSET  ticket -> arrival number    the waiters, FIFO across processes
    qexp    ZSET  ticket -> expiry            the waiters' own short leases
    seq     STR   arrival counter
    aimd:N  HASH  cap, streak, ceiling,       the shared adaptive cap of a scope whose cap is N
                  probe, hold                 (the rule: gate.aimd_step); read only with adaptive
    pause   STR   server time until which no slot is granted (Retry-After)
    gcra    HASH  r, t                        theoretical arrival times of the rpm and tpm budgets
    wake    pub/sub channel                   a slot was released (payload: the releasing process)

A key holds what was computed for one setting, and names it: the adaptive state of a cap of 4
is never read by a run whose cap is 8 (it would start halved for no 429 of its own), and a run
without ``adaptive`` reads none at all. Numbers cross the script boundary as strings: Redis
truncates Lua numbers to integers.
"""

from __future__ import annotations

import hashlib

__all__ = [
    "ABANDON",
    "ACQUIRE",
    "AIMD",
    "PAUSE",
    "RELEASE",
    "RENEW",
    "RESERVE",
    "SETTLE",
    "Script",
    "scope_keys",
]

KEY_NAMES = ("slots", "queue", "qexp", "seq", "aimd", "pause", "gcra", "wake")


def scope_keys(scope: str, max_cap: int) -> dict[str, str]:
    """The Redis keys of one gate scope whose cap is ``max_cap``, all with the hash tag
    ``{scope}``; the adaptive state's key names the cap it was computed for."""
    keys = {name: f"rrcli:{{{scope}}}:{name}" for name in KEY_NAMES}
    keys["aimd"] += f":{max_cap}"
    return keys


class Script:
    """A Lua script and its SHA1, so callers can send ``EVALSHA`` and fall back to ``EVAL``."""

    __slots__ = ("keys", "sha", "text")

    def __init__(self, keys: tuple[str, ...], body: str) -> None:
        self.keys = keys
        self.text = _PRELUDE + body
        self.sha = hashlib.sha1(self.text.encode()).hexdigest()


_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function fmt(x) return string.format('%.6f', x) end
local function ms(x) return math.ceil(x * 1000) end
"""

# KEYS slots queue qexp seq aimd pause; ARGV token ticket('' = try, no queuing) max_cap lease
# ticket_lease max_pause adaptive(0|1). A pause longer than max_pause (left by a run with a longer
# bound) is cut to it; the adaptive cap is read only when adaptive is 1. Returns {admitted, cap,
# pause_remaining, ahead, free}.
ACQUIRE = Script(
    ("slots", "queue", "qexp", "seq", "aimd", "pause"),
    """
local token, ticket = ARGV[1], ARGV[2]
local max_cap, lease, ticket_lease = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for _, dead in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('ZREM', KEYS[2], dead)
  redis.call('ZREM', KEYS[3], dead)
end
local cap = max_cap
if ARGV[7] == '1' then cap = tonumber(redis.call('HGET', KEYS[5], 'cap') or max_cap) end
if cap > max_cap then cap = max_cap end
if cap < 1 then cap = 1 end
local max_pause = tonumber(ARGV[6])
local pause = tonumber(redis.call('GET', KEYS[6]) or 0) - now
if pause < 0 then pause = 0 end
if not (pause <= max_pause) then
  pause = max_pause
  redis.call('SET', KEYS[6], fmt(now + pause), 'PX', ms(pause) + 1000)
end
local used = redis.call('ZCARD', KEYS[1])
local admitted, ahead = 0, 0
if redis.call('ZSCORE', KEYS[1], token) then
  admitted = 1  -- admitted already; the reply was lost on the way back
elseif ticket == '' then
  if pause == 0 and used < cap and redis.call('ZCARD', KEYS[2]) == 0 then admitted = 1 end
else
  local rank = redis.call('ZRANK', KEYS[2], ticket)
  if not rank then
    redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), ticket)
    rank = redis.call('ZRANK', KEYS[2], ticket)
  end
  ahead = rank
  if pause == 0 and rank < cap - used then
    admitted = 1
    redis.call('ZREM', KEYS[2], ticket)
    redis.call('ZREM', KEYS[3], ticket)
  else
    redis.call('ZADD', KEYS[3], now + ticket_lease, ticket)
    for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], ms(ticket_lease) + 1000) end
  end
end
if admitted == 1 then
  redis.call('ZADD', KEYS[1], now + lease, token)
  redis.call('PEXPIRE', KEYS[1], ms(lease) + 1000)
  used = used + 1
end
return {admitted, cap, fmt(pause), ahead, cap - used}
""",
)

# KEYS slots wake; ARGV token process. Frees one slot and wakes the waiters of every process.
RELEASE = Script(
    ("slots", "wake"),
    """
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('PUBLISH', KEYS[2], ARGV[2])
return removed
""",
)

# KEYS slots queue qexp wake; ARGV token process. A waiter that gave up (cancelled): leaves the
# queue, and frees the slot if it was admitted on the way.
ABANDON = Script(
    ("slots", "queue", "qexp", "wake"),
    """
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if removed == 1 then redis.call('PUBLISH', KEYS[4], ARGV[2]) end
return removed
""",
)

# KEYS slots; ARGV lease token... Pushes the expiry of every held lease to now + lease. A lease
# that is missing (Redis restarted empty, or the lease ran out while this process was cut off) is
# added back: the call is still in flight, so the slot is taken. Returns how many were re-added.
RENEW = Script(
    ("slots",),
    """
local lease = tonumber(ARGV[1])
local added = 0
for i = 2, #ARGV do
  added = added + redis.call('ZADD', KEYS[1], now + lease, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ms(lease) + 1000)
return added
""",
)

# KEYS gcra; ARGV request_interval request_burst token_interval token_burst cost.
# GCRA on both budgets at once: a call starts only if both admit it, and only then is either
# charged. An interval of 0 means "no such limit". Returns the seconds to wait ('0' = charged).
RESERVE = Script(
    ("gcra",),
    """
local wait, new, horizon = 0, {}, 0
local specs = {{'r', tonumber(ARGV[1]), tonumber(ARGV[2]), 1},
               {'t', tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])}}
for _, s in ipairs(specs) do
  local field, interval, burst, cost = s[1], s[2], s[3], s[4]
  if interval > 0 then
    local tat = tonumber(redis.call('HGET', KEYS[1], field) or now)
    if tat < now then tat = now end
    new[field] = tat + cost * interval
    local w = new[field] - now - math.max(burst, cost) * interval
    if w > wait then wait = w end
    if new[field] - now > horizon then horizon = new[field] - now end
  end
end
if wait > 0 then return fmt(wait) end
for field, tat in pairs(new) do redis.call('HSET', KEYS[1], field, fmt(tat)) end
redis.call('PEXPIRE', KEYS[1], ms(horizon) + 1000)
return '0'
""",
)

# KEYS gcra; ARGV token_interval delta_tokens. Charges (delta > 0) or refunds (delta < 0) the tpm
# budget once the real usage is known; a refund never moves the budget before now.
SETTLE = Script(
    ("gcra",),
    """
local tat = tonumber(redis.call('HGET', KEYS[1], 't') or now)
tat = tat + tonumber(ARGV[2]) * tonumber(ARGV[1])
if tat < now then tat = now end
redis.call('HSET', KEYS[1], 't', fmt(tat))
if tat > now then redis.call('PEXPIRE', KEYS[1], ms(tat - now) + 1000) end
return fmt(tat - now)
""",
)

# KEYS pause; ARGV seconds. Pauses the scope for every process; extends, never shortens.
PAUSE = Script(
    ("pause",),
    """
local until_ = now + tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or 0)
if until_ > cur then
  redis.call('SET', KEYS[1], fmt(until_), 'PX', ms(tonumber(ARGV[1])) + 1000)
  cur = until_
end
return fmt(cur - now)
""",
)

# KEYS aimd slots; ARGV max_cap rate_limited(0|1) ttl probe_initial probe_max. The shared
# adaptive cap, step for step the rule of ``gate.aimd_step`` (tests/test_redis_aimd.py drives both
# with the same events): a 429/529 halves the cap (never below 1) and remembers the load that drew
# it (the scope's calls in flight, when fewer than the cap) as the ceiling; below it each success
# grows the cap by one, but growing back TO the ceiling takes `probe` runs of `cap` successes; a
# 429 there again sets the cap just below it and doubles `probe` (up to probe_max); `probe` runs
# at the ceiling without a 429 forget it. The calls that were in flight when
# the cap was halved answered from the old load: their next reports (`hold`, as many as the other
# slots held then) cannot halve it again. Returns the new cap.
AIMD = Script(
    ("aimd", "slots"),
    """
local max_cap, initial, most = tonumber(ARGV[1]), tonumber(ARGV[4]), tonumber(ARGV[5])
local s = redis.call('HMGET', KEYS[1], 'cap', 'streak', 'ceiling', 'probe', 'hold')
local cap, streak = tonumber(s[1] or max_cap), tonumber(s[2] or 0)
local ceiling, probe, hold = tonumber(s[3] or 0), tonumber(s[4] or initial), tonumber(s[5] or 0)
local held = hold > 0
if held then hold = hold - 1 end
if cap > max_cap then cap = max_cap end
if ARGV[2] == '1' then
  streak = 0
  if not held and cap > 1 then
    local load = redis.call('ZCARD', KEYS[2])
    local drew = cap
    if load > 0 and load < cap then drew = load end
    if ceiling > 0 and cap >= ceiling then
      ceiling = math.min(ceiling, drew)
      cap, probe = math.max(1, ceiling - 1), math.min(most, probe * 2)
    else
      ceiling, probe = drew, initial
      cap = math.max(1, math.min(math.floor(cap / 2), drew - 1))
    end
    hold = math.max(0, load - 1)
  end
else
  streak = streak + 1
  if ceiling > 0 and cap >= ceiling and streak >= cap * probe then
    streak, ceiling, probe = 0, 0, initial  -- the level that failed holds now
  else
    local need = cap
    if ceiling > 0 then
      if cap + 1 >= ceiling then need = cap * probe else need = 1 end
    end
    if streak >= need and cap < max_cap then cap, streak = cap + 1, 0 end
  end
end
redis.call('HSET', KEYS[1], 'cap', cap, 'streak', streak, 'ceiling', ceiling, 'probe', probe,
           'hold', hold)
redis.call('PEXPIRE', KEYS[1], ms(tonumber(ARGV[3])))
return cap
""",
)
