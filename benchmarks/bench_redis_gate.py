"""Per-call overhead of the Redis gate (issue 7) against the local gate, in the same run.

    python benchmarks/bench_redis_gate.py [--calls 2000] [--workers 1,16]

Starts its own redis-server on loopback (no persistence). For each worker count, it times
``acquire()`` + ``release()`` pairs on an uncontended gate (cap = workers) and reports
microseconds per pair and pairs/s; then the same with ``reserve(1)`` on an rpm budget too large to
wait (one more script per call). The local gate (``rrcli.routing.gate``) is measured the same way
when it is importable.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import subprocess
import time

import redis
from _common import free_port

from rrcli.config.profile import Backend, GateSettings, Profile
from rrcli.fleet.redis_gate import make_redis_gates


def profile(url: str, cap: int, rpm: int | None) -> Profile:
    backend = Backend(id="b", provider="sim", max_concurrency=cap, rpm=rpm)
    return Profile(backends=(backend,), gate=GateSettings("redis", url, 60.0, False))


async def pairs(gate, calls: int, workers: int, reserve: bool) -> float:
    """Seconds per acquire(+reserve)+release, over `workers` coroutines."""
    todo = iter(range(calls))

    async def worker() -> None:
        for _ in todo:
            await gate.acquire()
            if reserve:
                await gate.reserve(1)
            await gate.release()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return (time.perf_counter() - t0) / calls


async def measure(url: str, calls: int, workers: int, reserve: bool) -> dict[str, float]:
    rpm = 10**9 if reserve else None
    out = {}
    gates = make_redis_gates(profile(url, workers, rpm), rng=random.Random(0))
    await pairs(gates["b"], 50, workers, reserve)  # warm: connection, script cache
    out["redis"] = await pairs(gates["b"], calls, workers, reserve)
    await gates.close()
    try:
        from rrcli.routing.gate import make_gates
    except ImportError:
        return out
    local = make_gates(profile(url, workers, rpm), clock=time.monotonic)
    out["local"] = await pairs(local["b"], calls, workers, reserve)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--workers", default="1,16")
    args = parser.parse_args()
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(port=port)
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.02)
        url = f"redis://127.0.0.1:{port}/0"
        print(f"{'workers':>7} {'reserve':>7} {'gate':>6} {'us/call':>9} {'calls/s':>9}")
        for workers in (int(w) for w in args.workers.split(",")):
            for reserve in (False, True):
                results = asyncio.run(measure(url, args.calls, workers, reserve))
                for kind, seconds in results.items():
                    print(f"{workers:>7} {reserve!s:>7} {kind:>6} {seconds * 1e6:>9.1f} "
                          f"{1 / seconds:>9.0f}")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
