"""One budget shared through Redis against a server that bills every token (tests/billing.py):
processes that do not overlap in time, a Redis restarted empty mid-run, and queue workers on a
local gate all keep what was billed within the one limit.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import orjson
import pytest
from billing import GPT_4O
from runkit import popen, rrcli, write_profile
from test_redis_gate import _server

from rrcli.fleet.ledger import RedisLedger, budget_hub


@pytest.fixture
def redis_server():
    yield from _server()


def shared_profile(tmp_path, server, url, gate="redis", **queue):
    entry = {"id": "b0", "base_url": server.openai_url, "model": "gpt-4o", "price": GPT_4O,
             "max_concurrency": 8}  # fmt: skip
    top = {"gate": {"kind": "redis", "url": url, "lease": 2.0}} if gate == "redis" else {}
    if gate != "redis":
        top["queue"] = {"url": url, **queue}
    return write_profile(tmp_path / "p.toml", [entry], **top)


def write_jobs(path, n):
    lines = [{"id": f"j{i}", "prompt": f"q{i}", "params": {"max_tokens": 500}} for i in range(n)]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def shard(tmp_path, profile, jobs, i, n, *extra):
    return ("run", jobs, "-p", profile, "-q", "--shard", f"{i}/{n}", "--out",
            tmp_path / f"r{i}.jsonl", "--traces", tmp_path / f"t{i}.jsonl", *extra)  # fmt: skip


def test_shards_that_do_not_overlap_share_one_budget(tmp_path, billing_server, redis_server):
    """Four shards run one after the other on one Redis budget of $0.5: each later one counts
    what the earlier ones spent (no process alive between them resets it), so together they
    were billed no more than the limit."""
    server = billing_server(writes=500)
    profile = shared_profile(tmp_path, server, redis_server.url)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 400)
    codes = [
        rrcli(*shard(tmp_path, profile, jobs, i, 4, "--max-cost", "0.5"), cwd=tmp_path).returncode
        for i in range(4)
    ]
    assert 3 in codes
    assert 0.4 < server.billed() <= 0.5


def test_a_redis_restarted_empty_never_resets_the_spend(tmp_path, billing_server, redis_server):
    """Four processes on one budget of $1, Redis killed and restarted empty mid-run: the live
    processes put their shares and reservations back, so what was billed stays within it."""
    server = billing_server(writes=500, latency_s=0.05)
    profile = shared_profile(tmp_path, server, redis_server.url)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 800)
    procs = [popen(*shard(tmp_path, profile, jobs, i, 4, "--max-cost", "1"), cwd=tmp_path)
             for i in range(4)]  # fmt: skip
    deadline = time.monotonic() + 30
    while server.billed() < 0.4 and time.monotonic() < deadline:
        time.sleep(0.02)
    redis_server.stop()
    time.sleep(0.3)
    redis_server.start()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 3), err
    assert 0.6 < server.billed() <= 1.0


def test_queue_workers_on_a_local_gate_share_the_queues_budget(
    tmp_path, billing_server, redis_server
):
    """Two queue workers on a local gate with `--max-cost 0.5` each: the budget is the
    queue's, one for both, so together they were billed no more than it."""
    server = billing_server(writes=500)
    profile = shared_profile(tmp_path, server, redis_server.url, gate="local")
    jobs = write_jobs(tmp_path / "jobs.jsonl", 400)
    args = ("run", "-p", profile, "-q", "--queue", "q1", "--max-cost", "0.5")
    procs = [popen(*args[:1], jobs, *args[1:], cwd=tmp_path)]
    deadline = time.monotonic() + 30
    while not server.requests and time.monotonic() < deadline:  # the queue is loaded
        time.sleep(0.01)
    procs.append(popen(*args, cwd=tmp_path))
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 3), err
    assert 0.4 < server.billed() <= 0.5


def test_a_queue_worker_halted_by_the_budget_says_how_the_jobs_left_run(
    tmp_path, billing_server, redis_server
):
    """A queue worker stopped by the queue's budget: its message says the jobs it took stay in
    the queue and that a worker started with a higher `--max-cost` runs them (never
    `--resume`, which a queue does not read); such a worker does, counting what the first
    one spent: together they were billed within its limit."""
    server = billing_server(writes=500)
    profile = shared_profile(tmp_path, server, redis_server.url, gate="local", lease=1.0)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 200)
    args = ("run", "-p", profile, "-q", "--queue", "q2")
    first = rrcli(*args[:1], jobs, *args[1:], "--max-cost", "0.1", cwd=tmp_path, timeout=60)
    assert 3 == first.returncode, first.stderr
    assert "--resume" not in first.stderr
    assert "jobs taken here not run (they stay in queue q2)" in first.stderr
    assert "start a worker on queue q2 with a higher --max-cost" in first.stderr
    second = rrcli(*args, "--max-cost", "2", cwd=tmp_path, timeout=60)
    assert 0 == second.returncode, second.stderr
    assert 200 == server.ledger.calls
    assert 1.0 < server.billed() <= 2.0


def test_a_dead_process_reservation_expires_and_its_room_comes_back(redis_server):
    """A process that set $0.8 of a $1 budget aside and died without settling it: once its
    reservation's time passed, its amount is held no more, so another process on the budget
    is granted $0.8 and sees only that held, not $1.6."""
    keys = "expiring"

    async def main() -> tuple[str | None, str | None, float]:
        dead = RedisLedger(budget_hub(redis_server.url), keys, 1.0, 0.3, "dead.jsonl")
        assert await dead.reserve(0.8) is not None
        await dead._hub.close()  # it dies: no settle, no renewal
        live = RedisLedger(budget_hub(redis_server.url), keys, 1.0, 0.3, "live.jsonl")
        before = await live.reserve(0.8)
        await asyncio.sleep(0.6)  # past the dead reservation's time
        after = await live.reserve(0.8)
        await live._hub.close()
        return before, after, live.reserved

    before, after, held = asyncio.run(main())
    assert (None, True, 0.8) == (before, after is not None, pytest.approx(held))


def test_room_granted_in_redis_to_an_attempt_cancelled_meanwhile_goes_back(redis_server):
    """An attempt asks the shared budget for $0.8 of $1 and is cancelled (its caller went away)
    while Redis, paused, has not answered yet: once Redis runs the request and grants the room,
    it is given back at once, so another process is granted $1 long before the reservation's
    own time (30 s) would have run out."""
    keys = "cancelled"

    async def main() -> str | None:
        gone = RedisLedger(budget_hub(redis_server.url), keys, 1.0, 30.0, "gone.jsonl")
        await gone.settle(await gone.reserve(0.0), 0.0, 0.0)  # connected, its scripts loaded
        os.kill(redis_server.proc.pid, signal.SIGSTOP)
        try:
            asking = asyncio.ensure_future(gone.reserve(0.8))
            await asyncio.sleep(0.2)  # the request is on its way
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)
        finally:
            os.kill(redis_server.proc.pid, signal.SIGCONT)
        live = RedisLedger(budget_hub(redis_server.url), keys, 1.0, 30.0, "live.jsonl")
        for _ in range(100):  # until the room came back (or 5 s: never)
            if (token := await live.reserve(1.0)) is not None:
                break
            await asyncio.sleep(0.05)
        await live._hub.close()
        await gone._hub.close()
        return token

    assert asyncio.run(main()) is not None


def test_a_daily_budget_in_redis_spends_again_the_next_day(redis_server):
    """Two processes on one daily budget of $1 in Redis, their clocks the test's: spent on
    2026-12-06 (a third reservation refused, Redis holding the spend under that day's keys),
    both are granted again once their clocks pass midnight, a call in flight across it counts
    in the day it ends in, and the old day's spend is never put back into the new one."""
    now = [1796601600.0 - 10]  # 2026-12-06 23:59:50 UTC
    hubs = [budget_hub(redis_server.url) for _ in range(2)]

    async def main() -> dict[str, object]:
        a, b = (
            RedisLedger(hub, "team", 1.0, 30.0, f"{i}.jsonl", "day", lambda: now[0])
            for i, hub in enumerate(hubs)
        )
        first = await a.reserve(0.5)
        await a.settle(first, 0.5, 0.5)
        crossing = await b.reserve(0.4)
        refused = await a.reserve(0.2)
        renews = a.renews_in()
        now[0] += 20  # 2026-12-07 00:00:10
        await b.settle(crossing, 0.4, 0.3)
        after = [await a.reserve(0.6), await b.reserve(0.1)]
        over = await a.reserve(0.2)
        found = await hubs[0].client().keys("rrcli:{budget:team@*}:shares")
        keys = sorted(found)
        for hub in hubs:
            await hub.close()
        return {"refused": refused, "renews": renews, "after": after, "over": over,
                "keys": keys, "spent": b.spent, "mine": (a.mine, b.mine)}  # fmt: skip

    seen = asyncio.run(main())
    assert None is seen["refused"]
    assert 10.0 == pytest.approx(seen["renews"])
    assert all(token is not None for token in seen["after"])
    assert None is seen["over"]  # 0.3 spent + 0.7 held: no room for 0.2 more
    assert pytest.approx(0.3) == seen["spent"]
    assert (0.0, 0.3) == pytest.approx(seen["mine"])
    expected = ["rrcli:{budget:team@2026-12-06}:shares", "rrcli:{budget:team@2026-12-07}:shares"]
    assert expected == seen["keys"]
