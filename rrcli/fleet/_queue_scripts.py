"""The Redis keys of a shared work queue (SPEC §14) and the Lua scripts that change several of
them in one atomic step.

Every key of queue NAME carries the hash tag ``{rrcli:q:NAME}``, so the queue lives in one hash
slot: each script touches one slot and also runs on Redis Cluster.

Keys of one queue (see ``queue_keys``)::

    meta      HASH    digest, source, state (loading | loaded), total, loaded_to, created
    loader    STR     the token of the process loading the jobs file (a lock with a TTL)
    jobs      STREAM  one entry a job not yet acknowledged: id 0-LINE, field j = the raw line;
                      consumer group "workers"; an entry is deleted when its job is acknowledged
    results   HASH    LINE -> the job's result line, as its worker wrote it (first one wins)
    bindings  HASH    session -> deployment (binding = "session" across workers)
    workers   SET     the names of the workers that ever worked here
    w:NAME    STR     a worker's heartbeat (expires when it stops beating)

A job is known by its line number in the jobs file (LINE): its stream id is ``0-LINE``, so the
stream is in the file's order and ``rrcli results`` writes in that order.
"""

from __future__ import annotations

from rrcli.fleet._scripts import Script

__all__ = ["ACK", "CLAIM", "GROUP", "LOAD", "RENEW", "queue_keys", "worker_key"]

GROUP = "workers"
KEY_NAMES = ("meta", "loader", "jobs", "results", "bindings", "workers")


def queue_keys(name: str) -> dict[str, str]:
    """The Redis keys of queue ``name``, all with the hash tag ``{rrcli:q:NAME}``."""
    return {key: f"{{rrcli:q:{name}}}:{key}" for key in KEY_NAMES}


def worker_key(name: str, worker: str) -> str:
    """The heartbeat key of one worker of queue ``name``."""
    return f"{{rrcli:q:{name}}}:w:{worker}"


# KEYS meta jobs; ARGV loaded_to, then per job: line number, field name (j or i), value. Adds
# the jobs (ids 0-LINE: the file's order) and records how far the load got, in one step.
LOAD = Script(
    ("meta", "jobs"),
    """
for i = 2, #ARGV, 3 do
  redis.call('XADD', KEYS[2], '0-' .. ARGV[i], ARGV[i + 1], ARGV[i + 2])
end
redis.call('HSET', KEYS[1], 'loaded_to', ARGV[1])
return 1
""",
)

# KEYS jobs results bindings; ARGV group, then per job: stream id, line number, result line,
# session ('' for none), deployment. Stores each job's result unless it has one already (a job
# claimed from a worker thought dead may end twice: the first result stays, so a job has exactly
# one), keeps a session's first deployment, acknowledges the job and deletes its entry (the
# stream holds only jobs not yet done). Returns the number of results stored.
ACK = Script(
    ("jobs", "results", "bindings"),
    """
local stored = 0
for i = 2, #ARGV, 5 do
  if redis.call('HSETNX', KEYS[2], ARGV[i + 1], ARGV[i + 2]) == 1 then
    stored = stored + 1
  end
  if ARGV[i + 3] ~= '' and ARGV[i + 4] ~= '' then
    redis.call('HSETNX', KEYS[3], ARGV[i + 3], ARGV[i + 4])
  end
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  redis.call('XDEL', KEYS[1], ARGV[i])
end
return stored
""",
)

# KEYS jobs; ARGV group consumer min_idle_ms cursor count. Claims jobs pending longer than
# min_idle_ms (their worker died) for this consumer. Returns {next cursor, {{id, {field, value,
# ...}, deliveries}...}}: the deliveries count this one.
CLAIM = Script(
    ("jobs",),
    """
local reply = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4],
  'COUNT', ARGV[5])
local out = {}
for _, entry in ipairs(reply[2]) do
  if entry[2] then
    local info = redis.call('XPENDING', KEYS[1], ARGV[1], entry[1], entry[1], 1)
    local deliveries = 1
    if info[1] then deliveries = info[1][4] end
    table.insert(out, {entry[1], entry[2], deliveries})
  end
end
return {reply[1], out}
""",
)

# KEYS jobs; ARGV group consumer, then stream ids. Resets the idle time of the jobs this consumer
# still holds (JUSTID: the delivery count stays), so a live worker's long call is never claimed.
# Returns how many it still held.
RENEW = Script(
    ("jobs",),
    """
local call = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0}
for i = 3, #ARGV do
  local info = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if info[1] and info[1][2] == ARGV[2] then table.insert(call, ARGV[i]) end
end
local held = #call - 5
if held > 0 then
  table.insert(call, 'JUSTID')
  redis.call(unpack(call))
end
return held
""",
)
