"""Makespan of each strategy over three backends of different speeds, against the ideal.

    python benchmarks/bench_scheduling.py [--jobs N] [--strategies a,b,...]   (default: 3000, all)

Three `rrcli sim` servers in their own processes answer in 50, 100 and 200 ms on average (jitter
±20 %), each with its own cap of 8 (it answers 429 above it); the profile gives each backend
max_concurrency 8 and the run uses the default concurrency (the sum of the caps). Each strategy
runs `rrcli run` end to end in a fresh process. The makespan is read from the traces (first
call's start to the last call's end), so process start-up does not count; wall time is shown
too. The ideal is N / Σ(cap_i / latency_i): every slot busy until the end; it is shown for the
servers' nominal latencies and for the mean latencies the calls had (HTTP and client overhead
included), which separates scheduling from the cost of a call.
Targets: `fastest` and `least_loaded` within 10 % of the ideal; round_robin for contrast.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import tomli_w
from _common import call_records, sim_server, start_run, write_jobs

STRATEGIES = ("round_robin", "random", "weighted", "least_loaded", "first_available", "fastest")
LATENCIES_MS = (50, 100, 200)
CAP = 8


def write_profile(path: Path, urls: list[str], strategy: str) -> Path:
    backends = [
        {
            "id": f"b{ms}ms",
            "provider": "openai",
            "model": "sim",
            "base_url": url,
            "auth": "none",
            "allow_private": True,
            "max_concurrency": CAP,
        }
        for ms, url in zip(LATENCIES_MS, urls, strict=True)
    ]
    path.write_text(tomli_w.dumps({"strategy": strategy, "seed": 1, "backends": backends}))
    return path


def makespan(traces: Path) -> tuple[float, int, dict[str, int], float]:
    """(seconds from the first start to the last end, 429s, calls per deployment, the ideal
    makespan for the latencies the calls actually had, HTTP and client overhead included)."""
    first, last, limited, served = float("inf"), 0.0, 0, {}
    latency: dict[str, float] = {}
    for rec in call_records(traces):
        first, last = min(first, rec["start"]), max(last, rec["end"])
        limited += rec["http_status"] == 429
        served[rec["deployment"]] = served.get(rec["deployment"], 0) + 1
        latency[rec["deployment"]] = latency.get(rec["deployment"], 0.0) + rec["latency_ms"]
    rate = sum(CAP / (latency[k] / served[k] / 1000.0) for k in served)  # calls/s, all slots busy
    return last - first, limited, served, sum(served.values()) / rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    args = parser.parse_args()
    n = args.jobs
    ideal = n / sum(CAP / (ms / 1000.0) for ms in LATENCIES_MS)
    print(f"{n} jobs, latencies {LATENCIES_MS} ms ±20 %, caps {CAP}: ideal makespan {ideal:.2f} s")
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        urls = [
            stack.enter_context(
                sim_server("--latency-ms", str(ms), "--jitter-ms", str(ms // 5), "--cap", str(CAP))
            )
            for ms in LATENCIES_MS
        ]
        tmp = Path(d)
        jobs = write_jobs(tmp / "jobs.jsonl", n)
        for strategy in args.strategies.split(","):
            profile = write_profile(tmp / f"{strategy}.toml", urls, strategy)
            traces = tmp / f"{strategy}.traces.jsonl"
            t0 = time.perf_counter()
            done = start_run(jobs, profile, tmp / f"{strategy}.results.jsonl", traces)
            done.wait()
            wall = time.perf_counter() - t0
            span, limited, served, measured = makespan(traces)
            shares = " ".join(f"{k}={v}" for k, v in sorted(served.items()))
            print(
                f"{strategy:>16}: makespan {span:6.2f} s = {span / ideal:5.2f} × ideal, "
                f"{span / measured:5.2f} × ideal at the measured latencies "
                f"(wall {wall:6.2f} s, exit {done.returncode}, 429s {limited}) | {shares}",
                flush=True,
            )


if __name__ == "__main__":
    main()
