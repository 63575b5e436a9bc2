"""What the response cache (--cache) costs when it misses and gives when it hits.

    python benchmarks/bench_cache.py [--jobs 5000] [--concurrency 64] [--cached-jobs 100000]
                                     [--warm-only]

1. Cold: the same jobs at 64 in flight against a 50 ms `rrcli sim` server (two priced backends)
   without a cache, with a fresh cache file (every job a miss: a lookup, then the answer queued
   for the writer thread), and with a fresh cache file and a budget no run reaches (every call
   reserved and settled too); runs alternate, best of --rounds each; each ratio to the run
   without them must be >= 0.9.
2. Warm: --cached-jobs jobs stored once (an in-process sim backend at zero latency fills the
   file), then run again with the cache: every job answered from the file, results and traces
   written; jobs/s must be >= 30,000 (``--warm-only``: this part alone).
3. The lookup itself: microseconds per primary-key SELECT on the in-process connection (the
   reason reads stay on the event loop while writes go to a thread).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from _common import sim_server, two_backend_pool, write_jobs

from rrcli.config.profile import Backend, Price, Profile, SimSettings
from rrcli.records.cache import CacheFile
from rrcli.running.runner import RunOptions, run


def sim_profile(concurrency: int) -> Profile:
    sim = SimSettings(latency_ms=0, jitter_ms=0, output_tokens=16)
    backends = (Backend(id="s", provider="sim", model="sim", max_concurrency=concurrency, sim=sim),)
    return Profile(name="bench-sim", backends=backends, concurrency=concurrency)


async def timed(
    profile: Profile, jobs: Path, tmp: Path, cache: Path | None, max_cost: float | None = None
) -> tuple[float, int, float]:
    """(jobs/s of one whole run, answers from the cache, jobs per CPU second of this process:
    what the wall rate is on a quiet machine, when the run is CPU-bound)."""
    options = RunOptions(
        jobs=jobs,
        out=tmp / "r.jsonl",
        traces=tmp / "t.jsonl",
        overwrite=True,
        cache=cache,
        max_cost=max_cost,
    )
    (tmp / "t.jsonl").unlink(missing_ok=True)
    t0, cpu0 = time.perf_counter(), time.process_time()
    summary = await run(profile, options, environ={})
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert summary.ok == summary.total, summary.jobs
    return summary.ok / elapsed, summary.cached, summary.ok / cpu


def cold(args: argparse.Namespace, tmp: Path) -> None:
    jobs = write_jobs(tmp / "cold.jsonl", args.jobs)
    variants = {"no cache": (False, None), "fresh cache": (True, None), "+ budget": (True, 1e6)}
    rates: dict[str, list[float]] = {name: [] for name in variants}
    cpus: dict[str, list[float]] = {name: [] for name in variants}
    with sim_server("--latency-ms", "50") as url:
        profile = two_backend_pool(
            url, args.concurrency, price=Price(0.15, 0.6), params={"max_tokens": 64}
        )
        asyncio.run(timed(profile, write_jobs(tmp / "warm.jsonl", 200), tmp, None))
        for round_ in range(args.rounds):
            for name, (cached, max_cost) in variants.items():
                fresh = tmp / f"cold-{round_}-{max_cost}.sqlite" if cached else None
                rate, hits, cpu_rate = asyncio.run(timed(profile, jobs, tmp, fresh, max_cost))
                assert hits == 0
                rates[name].append(rate)
                cpus[name].append(1e6 / cpu_rate)
    base = max(rates["no cache"])
    print(
        f"cold, 50 ms server, {args.concurrency} in flight, {args.jobs} jobs: "
        + " | ".join(
            f"{name} {max(r):5.0f} jobs/s (ratio {max(r) / base:.3f}; rounds "
            f"{[round(x) for x in r]}; {min(cpus[name]):.0f} µs CPU a job)"
            for name, r in rates.items()
        ),
        flush=True,
    )


def warm(args: argparse.Namespace, tmp: Path) -> None:
    jobs = write_jobs(tmp / "all.jsonl", args.cached_jobs)
    cache = tmp / "warm.sqlite"
    profile = sim_profile(args.concurrency)
    fill, _, _ = asyncio.run(timed(profile, jobs, tmp, cache))
    rates, cpu_rates = [], []
    for _ in range(args.rounds):
        rate, hits, cpu_rate = asyncio.run(timed(profile, jobs, tmp, cache))
        assert hits == args.cached_jobs, hits
        rates.append(rate)
        cpu_rates.append(cpu_rate)
    size = os.path.getsize(cache) >> 20
    print(
        f"warm, {args.cached_jobs} jobs all cached ({size} MB file): {max(rates):7.0f} jobs/s "
        f"(rounds {[round(x) for x in rates]}; per CPU second {max(cpu_rates):.0f}; the fill "
        f"ran at {fill:.0f} jobs/s); load {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    lookups(cache)


def lookups(path: Path) -> None:
    import sqlite3

    with sqlite3.connect(path) as db:
        keys = [row[0] for row in db.execute("SELECT key FROM rrcli_cache LIMIT 20000")]
    file = CacheFile(path, write=False)
    t0 = time.perf_counter()
    for key in keys:
        file.get(key)
    per = (time.perf_counter() - t0) / len(keys) * 1e6
    file.close()
    print(f"lookup: {per:.1f} µs per hit ({len(keys)} keys, in-process connection)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--cached-jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm-only", action="store_true", help="skip the cold runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if not args.warm_only:
            cold(args, tmp)
        warm(args, tmp)


if __name__ == "__main__":
    main()
