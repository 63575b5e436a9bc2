"""Four processes sharing a Redis gate against one process with the local gate, same pool.

    python benchmarks/bench_redis_pool.py [--jobs 2000] [--latency-ms 50]

Two `rrcli sim` servers (each answering 429 above cap 8), a profile of two backends of cap 8:
first one `rrcli run` process with `[gate] kind = "local"`, then four processes (`--shard i/4`)
with `[gate] kind = "redis"` on a redis-server of our own. Both are bounded by the same 16 slots,
so the ratio shows what sharing the gate across processes costs; the servers' peak counters show
the caps held.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx2
import tomli_w
from _common import redis_server, sim_server, start_run, write_jobs


def profile(path: Path, urls: list[str], gate: dict) -> Path:
    backends = [
        {"id": f"b{i}", "base_url": u, "auth": "none", "allow_private": True, "model": "sim",
         "max_concurrency": 8}
        for i, u in enumerate(urls)
    ]  # fmt: skip
    path.write_text(tomli_w.dumps({"strategy": "least_loaded", "gate": gate, "backends": backends}))
    return path


def peaks(urls: list[str]) -> list[int]:
    return [httpx2.get(u.removesuffix("/v1") + "/stats").json()["peak_concurrency"] for u in urls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--latency-ms", type=int, default=50)
    args = parser.parse_args()
    lat = str(args.latency_ms)
    with (
        redis_server() as redis_url,
        tempfile.TemporaryDirectory() as d,
        sim_server("--latency-ms", lat, "--cap", "8") as u1,
        sim_server("--latency-ms", lat, "--cap", "8") as u2,
    ):
        tmp = Path(d)
        jobs = write_jobs(tmp / "jobs.jsonl", args.jobs)
        local = profile(tmp / "local.toml", [u1, u2], {"kind": "local"})
        t0 = time.perf_counter()
        proc = start_run(jobs, local, tmp / "l.jsonl", tmp / "lt.jsonl")
        assert proc.wait() == 0
        one = args.jobs / (time.perf_counter() - t0)
        local_peaks = peaks([u1, u2])
        for u in (u1, u2):
            httpx2.post(u.removesuffix("/v1") + "/stats/reset")
        shared = profile(
            tmp / "redis.toml",
            [u1, u2],
            {"kind": "redis", "url": redis_url},
        )
        t0 = time.perf_counter()
        procs = [
            start_run(jobs, shared, tmp / f"r{i}.jsonl", tmp / f"t{i}.jsonl", "--shard", f"{i}/4")
            for i in range(4)
        ]
        assert all(p.wait() == 0 for p in procs)
        four = args.jobs / (time.perf_counter() - t0)
        print(f"{args.jobs} jobs, 2 backends × cap 8, server latency {lat} ms "
              f"(ceiling {16 / (args.latency_ms / 1000):.0f} jobs/s)")  # fmt: skip
        print(f"one process, local gate : {one:7.1f} jobs/s, server peaks {local_peaks}")
        print(f"four processes, Redis   : {four:7.1f} jobs/s, server peaks {peaks([u1, u2])}"
              f" (ratio {four / one:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
