"""The Redis keys of a shared work queue and the Lua scripts that change several of
them in one atomic step.

Every key of queue NAME carries the hash tag ``{rrcli:q:NAME}``, so the queue lives in one hash
slot: each script touches one slot and also runs on Redis Cluster.

Keys of one queue (see ``queue_keys``)::

    meta      HASH    digest, source, state (loading | loaded), total, loaded_to, created
    loader    STR     the token of the process loading the jobs file (a lock with a TTL)
    jobs      STREAM  one entry a job not yet acknowledged: id 0-LINE, field j = the raw line;
                      consumer group "workers"; an entry is deleted when its job is acknowledged
    results   HASH    LINE -> the job's result line, as its worker wrote it: the first ok one,
                      else the first one stored
    failed    SET     the LINEs whose stored result is not ok (an ok that comes later replaces it)
    bindings  HASH    session -> deployment (binding = "session" across workers)
    workers   SET     the names of the workers that ever worked here
    done      HASH    worker -> the jobs it acknowledged
    w:NAME    STR     a worker's heartbeat (expires when it stops beating)

A job is known by its line number in the jobs file (LINE): its stream id is ``0-LINE``, so the
stream is in the file's order and ``rrcli results`` writes in that order.
"""

from __future__ import annotations

from rrcli.fleet._scripts import Script

__all__ = ["ACK", "CLAIM", "GROUP", "LOAD", "RENEW", "queue_keys", "worker_key"]

GROUP = "workers"
KEY_NAMES = ("meta", "loader", "jobs", "results", "failed", "bindings", "workers", "done")


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

# KEYS jobs results failed bindings done; ARGV group worker, then per job: stream id, line
# number, result line, ok ('1' for an ok result, else ''), session ('' for none), deployment. A
# job claimed from a worker thought dead may end twice (the first worker was only slow): its
# first ok result stays, and an ok replaces an error stored before it, so a job that succeeded
# anywhere has exactly one ok line. Keeps a session's first deployment, acknowledges the job
# and deletes its entry (the stream holds only jobs not yet done), and counts the jobs this
# worker acknowledged. Returns the number of results stored for jobs that had none.
ACK = Script(
    ("jobs", "results", "failed", "bindings", "done"),
    """
local stored = 0
for i = 3, #ARGV, 6 do
  local line, result, ok = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if redis.call('HSETNX', KEYS[2], line, result) == 1 then
    stored = stored + 1
    if ok == '' then redis.call('SADD', KEYS[3], line) end
  elseif ok ~= '' and redis.call('SREM', KEYS[3], line) == 1 then
    redis.call('HSET', KEYS[2], line, result)
  end
  if ARGV[i + 4] ~= '' and ARGV[i + 5] ~= '' then
    redis.call('HSETNX', KEYS[4], ARGV[i + 4], ARGV[i + 5])
  end
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  redis.call('XDEL', KEYS[1], ARGV[i])
end
redis.call('HINCRBY', KEYS[5], ARGV[2], (#ARGV - 2) / 6)
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
