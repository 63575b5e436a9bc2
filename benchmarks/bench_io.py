"""Throughput and peak memory of rrcli's three file formats.

    python benchmarks/bench_io.py [--lines 1000000]

Phases, each in a fresh process so its peak RSS is its own: ``parse`` reads N job lines (a mix
of prompt, messages, session and batch shapes, unique ids: the duplicate-id set at its largest),
``write`` writes N results and N trace call records, ``resume`` reads the N results back as
``--resume`` does. Prints lines/s and peak RSS (MB) per phase.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = [
    {"prompt": "What is 2+2? Answer briefly.", "system": "Be brief.", "params": {"max_tokens": 50}},
    {"messages": [{"role": "user", "content": "Name three colours."}], "metadata": {"set": "a"}},
    {"turns": ["Hi", "And then?"], "system": "You are terse."},
    {
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 9},
    },
]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_jobs(path: Path, n: int) -> None:
    with open(path, "wb") as f:
        for i in range(n):
            shape = SHAPES[i % len(SHAPES)]
            key = "custom_id" if "body" in shape else "id"
            f.write(orjson.dumps({key: f"job-{i}", **shape}, option=orjson.OPT_APPEND_NEWLINE))


def phase_parse(jobs: Path) -> tuple[int, float]:
    from rrcli.records.jobs import Job, iter_jobs

    start = time.perf_counter()
    with open(jobs, "rb") as f:
        count = sum(1 for item in iter_jobs(f, str(jobs)) if type(item) is Job)
    return count, time.perf_counter() - start


def phase_write(results: Path, traces: Path, n: int) -> tuple[int, float]:
    from rrcli.config.profile import Backend
    from rrcli.providers.base import Reply
    from rrcli.records.attempt import Attempt
    from rrcli.records.results import ResultWriter
    from rrcli.records.trace import TraceWriter

    backend = Backend(id="sim-1", provider="sim", base_url="sim://local")
    reply = Reply("four", "stop", 12, 32, http_status=200)
    start = time.perf_counter()
    t0 = time.time()
    with ResultWriter(results, append=False) as out, TraceWriter(traces, "bench") as trace:
        for i in range(n):
            job_id = f"job-{i}"
            attempt = Attempt(
                job_id=job_id,
                session=job_id,
                turn=0,
                number=1,
                backend=backend,
                binding=None,
                stream=False,
                endpoint="chat",
                ts_start=t0 + i * 1e-4,
                started=0.0,
                ended=0.08,
                queue_s=0.0004,
                estimate=44,
                reply=reply,
                error=None,
                decision="ok",
            )
            trace.call(attempt, None)
            out.write(
                {
                    "id": f"job-{i}",
                    "status": "ok",
                    "deployment": "sim-1",
                    "model": "gpt-4o-mini",
                    "output": "four",
                    "finish_reason": "stop",
                    "usage": {"input_tokens": 12, "output_tokens": 32},
                    "attempts": 1,
                    "latency_ms": 80.0,
                    "metadata": None,
                }
            )
            if i % 4096 == 0:
                out.flush()
                trace.flush()
    return 2 * n, time.perf_counter() - start


def phase_resume(results: Path) -> tuple[int, float]:
    from rrcli.records.results import prepare_output

    start = time.perf_counter()
    state = prepare_output(results, resume=True, overwrite=False)
    return len(state.ok), time.perf_counter() - start


def child(args: argparse.Namespace) -> None:
    folder = Path(args.dir)
    if args.phase == "parse":
        count, seconds = phase_parse(folder / "jobs.jsonl")
    elif args.phase == "write":
        count, seconds = phase_write(folder / "r.jsonl", folder / "t.jsonl", args.lines)
    else:
        count, seconds = phase_resume(folder / "r.jsonl")
    print(
        f"{args.phase:7} {count:>9,} lines  {seconds:6.2f} s  {count / seconds:>10,.0f} lines/s  "
        f"peak RSS {peak_rss_mb():6.1f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--phase", choices=["parse", "write", "resume"])
    parser.add_argument("--dir")
    args = parser.parse_args()
    if args.phase:
        child(args)
        return
    with tempfile.TemporaryDirectory() as folder:
        make_jobs(Path(folder) / "jobs.jsonl", args.lines)
        base = [sys.executable, __file__, "--lines", str(args.lines), "--dir", folder]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for phase in ("parse", "write", "resume"):
            subprocess.run([*base, "--phase", phase], check=True, env=env)
        print(f"baseline: python + imports only, peak RSS {baseline_mb(env):.1f} MB")


def baseline_mb(env: dict[str, str]) -> float:
    code = "import resource, rrcli.records.jobs, rrcli.records.results, rrcli.records.trace; " + (
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return float(out.stdout)


if __name__ == "__main__":
    main()
