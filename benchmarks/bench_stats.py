"""Benchmark `rrcli stats` against DuckDB's read_json on the same trace file (run on demand).

    python benchmarks/bench_stats.py [--lines 1000000] [--workers N] [--rounds 5]

Writes a SPEC §5 trace of LINES lines once (cached in the temp folder; several runs, retries,
errors, streamed calls), then summarises it in a fresh process per engine, the two interleaved
for ``--rounds`` rounds, and prints the wall time and peak RSS of each and the median ratio
(one round's ratio moves by a third with the machine's load). DuckDB computes the same
per-deployment call counts and latency p50/p95 (quantile_cont is the same linear method); it is
skipped with a message when it is not installed (`pip install duckdb`). Both use every CPU by
default (DuckDB's threads, rrcli's reader processes); ``--workers N`` gives each N. Targets: at
most 2 x DuckDB's time and
under 300 MB for 1,000,000 lines.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

RRCLI = """
import json, resource, sys, time
from rrcli.stats.parallel import cpus
from rrcli.stats.summary import summarize
t, cpu0 = time.perf_counter(), time.process_time()
workers = int(sys.argv[2]) or cpus()
s = summarize([sys.argv[1]], workers=workers)
wall = time.perf_counter() - t
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
self_mb, child_mb = me.ru_maxrss / 1024, kids.ru_maxrss / 1024
cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime - cpu0
groups = {g["key"]: [g["calls"], g["latency_ms"]["p50"], g["latency_ms"]["p95"]]
          for g in s["groups"]}
print(json.dumps({"wall": wall, "cpu": cpu, "rss": self_mb, "child_rss": child_mb,
                  "workers": workers, "groups": groups}))
"""

DUCKDB = """
import json, resource, sys, time
import duckdb
t, cpu0 = time.perf_counter(), time.process_time()
db = duckdb.connect()
db.execute("set enable_progress_bar = false")  # it draws on stdout, where the numbers go
if int(sys.argv[2]):
    db.execute(f"set threads = {int(sys.argv[2])}")
threads = db.execute("select current_setting('threads')").fetchone()[0]
rows = db.execute(
    "select deployment, count(*), quantile_cont(latency_ms, 0.5) filter (where outcome = 'ok'),"
    " quantile_cont(latency_ms, 0.95) filter (where outcome = 'ok')"
    " from read_json(?, format = 'newline_delimited', ignore_errors = true)"
    " where event = 'call' group by deployment", [sys.argv[1]]).fetchall()
wall, cpu = time.perf_counter() - t, time.process_time() - cpu0  # its threads' CPU included
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall": wall, "cpu": cpu, "rss": rss, "child_rss": 0.0, "threads": threads,
                  "groups": {r[0]: list(r[1:]) for r in rows}}))
"""


def trace_file(n: int) -> Path:
    """A cached trace of n lines: runs of 80,000 jobs, a day apart. Its name holds a digest of
    the call record's fields, so a trace written before the schema changed is written again."""
    from rrcli.records.traceschema import CALL_FIELDS

    schema = hashlib.sha256(",".join(CALL_FIELDS).encode()).hexdigest()[:8]
    path = Path(tempfile.gettempdir()) / f"rrcli-bench-stats-{n}-{schema}.jsonl"
    if path.exists():
        return path
    print(f"writing {n:,} trace lines to {path} (once) ...", flush=True)
    part = path.with_suffix(".part")
    # written by a child: Linux counts a process's peak RSS from before its exec, so a parent
    # grown by the writing would lend its size to every process measured after it
    writer = multiprocessing.get_context("fork").Process(target=write_trace, args=(part, n))
    writer.start()
    writer.join()
    if writer.exitcode:
        sys.exit(f"writing {part} failed (exit {writer.exitcode})")
    part.rename(path)
    return path


def write_trace(part: Path, n: int) -> None:
    """n lines of runs of 80,000 jobs, a day apart, into ``part``."""
    from stats_tracegen import lines, run_records

    written, k = 0, 0
    with part.open("wb") as out:
        while written < n:
            batch = []
            for record in run_records(
                f"run-{k}", jobs=80_000, start_ms=1_767_000_000_000 + k * 86_400_000, seed=k
            ):
                batch.append(record)
                if written + len(batch) == n:
                    break
            out.write(lines(batch))
            written += len(batch)
            k += 1


def measure(code: str, path: Path, workers: int) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", code, str(path), str(workers)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="rrcli's reader processes and DuckDB's threads (0: each its default, the CPUs)",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds of the two, interleaved (median ratio)"
    )
    args = parser.parse_args()
    path = trace_file(args.lines)
    size = path.stat().st_size / 2**20
    print(f"{args.lines:,} lines, {size:.0f} MiB, {os.cpu_count()} CPUs")
    try:
        import duckdb  # noqa: F401
    except ImportError:
        ours = measure(RRCLI, path, args.workers)
        show("rrcli stats", ours, args.lines)
        print("duckdb     : skipped (not installed: pip install duckdb)")
        return
    walls, cpus = [], []
    for _ in range(args.rounds):
        ours, theirs = measure(RRCLI, path, args.workers), measure(DUCKDB, path, args.workers)
        show("rrcli stats", ours, args.lines)
        show("duckdb     ", theirs, args.lines)
        walls.append(ours["wall"] / theirs["wall"])
        cpus.append(ours["cpu"] / theirs["cpu"])
    print(
        f"ratio       : rrcli/duckdb time, median of {args.rounds} interleaved rounds "
        f"{statistics.median(walls):.2f}x (rounds {min(walls):.2f}-{max(walls):.2f}), "
        f"CPU {statistics.median(cpus):.2f}x (CPU time varies less with the machine's load)"
    )
    # rrcli prints milliseconds rounded to 3 decimals: DuckDB's unrounded p50 is the same when
    # it is within half of the last printed decimal
    same = ours["groups"].keys() == theirs["groups"].keys() and all(
        ours["groups"][k][0] == v[0] and abs(ours["groups"][k][1] - v[1]) <= 0.0005 + 1e-9
        for k, v in theirs["groups"].items()
    )
    print(f"same counts and p50 as duckdb: {same}")


def show(name: str, figures: dict, lines: int) -> None:
    """One engine's round: wall and CPU time, memory, processes or threads."""
    line = f"{name}: {figures['wall']:.2f} s ({figures['cpu']:.2f} s CPU), "
    if "workers" in figures:
        line += (
            f"{figures['workers']} reading process(es), peak RSS {figures['rss']:.0f} MB "
            f"(each reader process {figures['child_rss']:.0f} MB), "
            f"{lines / figures['wall']:,.0f} lines/s"
        )
    else:
        line += f"peak RSS {figures['rss']:.0f} MB, {figures['threads']} threads"
    print(line, flush=True)


if __name__ == "__main__":
    main()
