"""Engine throughput and memory: N jobs on the in-process `sim` provider at zero latency.

    python benchmarks/bench_engine.py [N ...]             (default: 100000 1000000)
    python benchmarks/bench_engine.py --bindings [N ...]  binding = "request" then "session"
    python benchmarks/bench_engine.py --against REV [--jobs N] [--rounds R]

Each N runs in a fresh process, end to end: reading the jobs file, routing over three sim
backends, writing results and traces. It prints jobs/s and the peak RSS of that process, so a
memory that grows with N shows side by side. The baseline in the same run is the cost of only
reading the jobs file and writing one JSON line per job (orjson), the floor of any engine.

``--bindings`` runs each N twice, with ``binding = "request"`` and ``binding = "session"``, and
prints the session run's peak memory as a ratio of the request run's: a session binding must be
forgotten when its job ends, so the two stay within a few percent however large N is.

``--against REV`` installs the git revision REV into a temporary venv and times whole `rrcli run`
processes of this tree and of REV on the same jobs (default 100,000; three zero-latency sim
backends, 64 in flight), interleaved for R rounds (default 5, the order swapped each round), and
prints each round, the median ratio this tree / REV (below 1: this tree is faster) and each
side's peak RSS. Any revision works, whatever its package layout: only its command line is used.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from _against import against
from _common import peak_rss_mb, write_jobs

from rrcli.config.profile import Backend, Profile, SimSettings
from rrcli.running.runner import RunOptions, run


def one(n: int, binding: str = "request") -> float:
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
            binding=binding,
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
        peak = peak_rss_mb()
        print(
            f"{n:>9,} jobs, binding {binding:>7}: rrcli {n / elapsed:9,.0f} jobs/s | "
            f"read+write floor {floor:9,.0f} lines/s (ratio {n / elapsed / floor:.2f}) | "
            f"peak RSS {peak:6.1f} MB",
            flush=True,
        )
        return peak


def in_child(n: int, binding: str) -> float:
    """``one(n, binding)`` in a fresh process (peak RSS is per process); its peak in MB."""
    done = subprocess.run(
        [sys.executable, __file__, "--one", str(n), binding],
        check=True,
        capture_output=True,
        text=True,
    )
    print(done.stdout, end="", flush=True)
    return float(done.stdout.rsplit("peak RSS", 1)[1].split()[0])


def main() -> None:
    if len(sys.argv) > 3 and sys.argv[1] == "--one":
        one(int(sys.argv[2]), sys.argv[3])
        return
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
        return
    if sys.argv[1:2] == ["--against"]:
        against(sys.argv[2:])
        return
    bindings = sys.argv[1:2] == ["--bindings"]
    try:
        sizes = [int(a) for a in sys.argv[1 + bindings :]] or [100_000, 1_000_000]
    except ValueError:
        sys.exit(f"bench_engine.py: job counts must be whole numbers\n\n{__doc__}")
    for n in sizes:
        request = in_child(n, "request")
        if bindings:
            session = in_child(n, "session")
            print(f"{n:>9,} jobs: peak RSS session / request = {session / request:.2f}")


if __name__ == "__main__":
    main()
