"""Engine throughput and memory: N jobs on the in-process `sim` provider at zero latency.

    python benchmarks/bench_engine.py [N ...]        (default: 100000 1000000)

Each N runs in a fresh process, end to end: reading the jobs file, routing over three sim
backends, writing results and traces. It prints jobs/s and the peak RSS of that process, so a
memory that grows with N shows side by side. The baseline in the same run is the cost of only
reading the jobs file and writing one JSON line per job (orjson), the floor of any engine.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from _common import peak_rss_mb, write_jobs

from rrcli.config.profile import Backend, Profile, SimSettings
from rrcli.run.runner import RunOptions, run


def one(n: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        jobs = write_jobs(tmp / "jobs.jsonl", n)
        t0 = time.perf_counter()
        with open(jobs, "rb") as f, open(tmp / "floor.jsonl", "wb") as out:
            for line in f:
                job = orjson.loads(line)
                out.write(orjson.dumps({"id": job["id"], "status": "ok", "output": "x"}) + b"\n")
        floor = n / (time.perf_counter() - t0)
        profile = Profile(
            name="engine",
            backends=tuple(
                Backend(id=f"sim-{i}", provider="sim", base_url="sim://local", sim=SimSettings())
                for i in range(3)
            ),
        )
        options = RunOptions(jobs=jobs, out=tmp / "r.jsonl", traces=tmp / "t.jsonl")
        t0 = time.perf_counter()
        summary = asyncio.run(run(profile, options, environ={}))
        elapsed = time.perf_counter() - t0
        assert summary.ok == n, summary.jobs
        print(
            f"{n:>9,} jobs: rrcli {n / elapsed:9,.0f} jobs/s | read+write floor {floor:9,.0f} "
            f"lines/s (ratio {n / elapsed / floor:.2f}) | peak RSS {peak_rss_mb():6.1f} MB",
            flush=True,
        )


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        one(int(sys.argv[2]))
        return
    sizes = [int(a) for a in sys.argv[1:]] or [100_000, 1_000_000]
    for n in sizes:
        subprocess.run([sys.executable, __file__, "--one", str(n)], check=True)


if __name__ == "__main__":
    main()
