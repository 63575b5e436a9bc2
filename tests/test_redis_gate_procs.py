"""The Redis gate shared by real processes: caps, a killed holder, rpm, a restarted Redis.

Each process runs this file as a script (``python tests/test_redis_gate_procs.py CONFIG``): it
takes the gate of scope "b" and counts its holders in a SEPARATE counter Redis (INCR after
acquire, DECR before release), so the counter outlives a restart of the gate's Redis. The peak
INCR value any process saw is the peak number of concurrent holders over all processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent

if __name__ != "__main__":
    from test_redis_gate import RedisServer, _server, crowded


# -- the worker process ----------------------------------------------------------------------


async def worker_main(cfg: dict) -> dict:
    import redis.asyncio as aredis

    from rrcli.config.profile import Backend, GateSettings, Profile
    from rrcli.fleet.redis_gate import make_redis_gates

    backend = Backend(id="b", provider="sim", max_concurrency=cfg["cap"], rpm=cfg.get("rpm"))
    profile = Profile(backends=(backend,), gate=GateSettings("redis", cfg["url"], cfg["lease"]))
    gates = make_redis_gates(profile, rng=random.Random())
    gate = gates["b"]
    counter = aredis.Redis.from_url(cfg["counter_url"])
    await counter.incr("ready")
    while int(await counter.get("ready")) < cfg["processes"]:  # start together
        await asyncio.sleep(0.01)
    out: dict = {"peak": 0, "done": 0, "starts": []}

    async def hammer() -> None:
        for _ in range(cfg["iterations"]):
            await gate.acquire()
            out["peak"] = max(out["peak"], await counter.incr("holders"))
            await asyncio.sleep(cfg["hold"])
            await counter.decr("holders")
            await gate.release()
            out["done"] += 1

    if cfg["mode"] == "hold":
        for _ in range(cfg["cap"]):
            await gate.acquire()
        print("held", flush=True)
        await asyncio.sleep(3600)
    elif cfg["mode"] == "rate":
        for _ in range(cfg["iterations"]):  # each start as the span it lies in
            asked = time.time()
            await gate.reserve(1)
            out["starts"].append((asked, time.time()))
    else:
        await asyncio.gather(*(hammer() for _ in range(cfg["workers"])))
    await gates.close()
    await counter.aclose()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(worker_main(json.loads(sys.argv[1])))), flush=True)
    sys.exit(0)


# -- the tests -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def counter_server() -> Iterator[RedisServer]:
    """The Redis the workers count holders in; never restarted."""
    yield from _server()


@pytest.fixture
def servers(counter_server) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A fresh gate Redis per test (one test restarts it) and the flushed counter Redis."""
    with redis.Redis(port=counter_server.port) as client:
        client.flushall()
    gate = RedisServer().start()
    try:
        yield gate, counter_server
    finally:
        gate.stop()


def spawn(cfg: dict) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, json.dumps(cfg)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(procs: list[subprocess.Popen[str]], timeout: float = 60) -> list[dict]:
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        assert 0 == proc.returncode, stderr[-2000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outs


def config(gate: RedisServer, counter: RedisServer, **kw) -> dict:
    base = {"url": gate.url, "counter_url": counter.url, "cap": 2, "lease": 1.0, "mode": "hammer",
            "processes": 4, "workers": 2, "iterations": 6, "hold": 0.02}  # fmt: skip
    return base | kw


@pytest.mark.slow
@pytest.mark.parametrize("cap", [2, 3])
def test_four_processes_never_exceed_the_cap_and_reach_it(servers, cap):
    """Four processes of two workers each hammering one scope: peak holders == cap, never more."""
    cfg = config(*servers, cap=cap)
    outs = finish([spawn(cfg) for _ in range(4)])
    assert 4 * 2 * 6 == sum(o["done"] for o in outs)
    assert cap == max(o["peak"] for o in outs)


@pytest.mark.slow
def test_slots_of_a_killed_process_come_back_after_the_lease(servers):
    """A process SIGKILLed while holding both slots: they return after the lease; others finish."""
    gate, counter = servers
    holder = spawn(config(gate, counter, mode="hold", processes=1))
    assert "held" == holder.stdout.readline().strip()
    with redis.Redis(port=gate.port) as client:
        assert 2 == client.zcard("rrcli:{b}:slots")
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        with redis.Redis(port=counter.port) as c:
            c.delete("ready")
        outs = finish([spawn(config(gate, counter, processes=2, iterations=3)) for _ in range(2)])
        assert 2 * 2 * 3 == sum(o["done"] for o in outs)
        assert 2 == max(o["peak"] for o in outs)
        assert 0 == client.zcard("rrcli:{b}:slots")


@pytest.mark.slow
def test_rpm_is_shared_by_three_processes(servers):
    """rpm = 120 over three processes: after a burst of 2, one start every 0.5 s, in any window."""
    cfg = config(*servers, mode="rate", rpm=120, cap=8, processes=3, iterations=3)
    spans = [tuple(s) for o in finish([spawn(cfg) for _ in range(3)]) for s in o["starts"]]
    assert 9 == len(spans)
    interval, burst, tick = 0.5, 2, 0.001  # tick: Redis's clock and its rounding of times
    assert [] == crowded(spans, lambda seconds: burst + (seconds + tick) // interval)
    paced = max(got for _, got in spans) - min(asked for asked, _ in spans)
    assert (9 - burst) * interval - tick <= paced


@pytest.mark.slow
def test_a_restarted_redis_neither_crashes_a_run_nor_lets_the_cap_be_exceeded(servers):
    """Redis killed and restarted empty while calls are in flight: every process finishes, and
    the calls still in flight count against the cap again (peak holders <= cap)."""
    gate, counter = servers
    cfg = config(gate, counter, lease=1.5, workers=1, iterations=3, hold=0.6)
    procs = [spawn(cfg) for _ in range(4)]
    with redis.Redis(port=counter.port) as c:
        deadline = time.monotonic() + 30
        while int(c.get("ready") or 0) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    time.sleep(0.9)  # the second wave of holders is mid-call
    gate.stop()
    time.sleep(0.2)
    gate.start()
    outs = finish(procs)
    assert 4 * 3 == sum(o["done"] for o in outs)
    assert 2 >= max(o["peak"] for o in outs)
