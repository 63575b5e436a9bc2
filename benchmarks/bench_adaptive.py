"""Adaptive caps against a server whose true capacity is half the configured cap.

    python benchmarks/bench_adaptive.py [--jobs N] [--latency-ms MS] [--capacity C]
                                                        (default: 1000 jobs, 50 ms, C = 4)

One `rrcli sim` server in its own process answers 429 (with its Retry-After, 100 ms) to any call
beyond C at once. Two profiles run the same jobs, end to end, in fresh processes:
`knew`, max_concurrency = C (the true capacity), and `adaptive`, max_concurrency = 2C with
`[gate] adaptive = true`. Targets: the adaptive run's throughput within 20 % of `knew`'s, and
429s under 5 % of its calls. Throughput is jobs / makespan, read from the traces.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import tomli_w
from _common import call_records, sim_server, start_run, write_jobs


def write_profile(path: Path, url: str, cap: int, adaptive: bool) -> Path:
    backend = {
        "id": "hidden",
        "provider": "openai",
        "model": "sim",
        "base_url": url,
        "auth": "none",
        "allow_private": True,
        "max_concurrency": cap,
    }
    profile = {"gate": {"adaptive": adaptive}, "retry": {"max_retries": 10}, "backends": [backend]}
    path.write_text(tomli_w.dumps(profile))
    return path


def measure(traces: Path) -> tuple[float, int, int, int]:
    """(makespan in seconds, calls, 429s, ok calls) from a trace file."""
    first, last, n, limited, ok = float("inf"), 0.0, 0, 0, 0
    for rec in call_records(traces):
        first, last = min(first, rec["start"]), max(last, rec["end"])
        n += 1
        limited += rec["http_status"] == 429
        ok += rec["outcome"] == "ok"
    return last - first, n, limited, ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--latency-ms", type=int, default=50)
    parser.add_argument("--capacity", type=int, default=4)
    args = parser.parse_args()
    c = args.capacity
    server_args = ("--latency-ms", str(args.latency_ms), "--jitter-ms", str(args.latency_ms // 5))
    print(f"{args.jobs} jobs, {args.latency_ms} ms ±20 %, true capacity {c}")
    rates = {}
    with tempfile.TemporaryDirectory() as d, sim_server(*server_args, "--cap", str(c)) as url:
        tmp = Path(d)
        jobs = write_jobs(tmp / "jobs.jsonl", args.jobs)
        for name, cap, adaptive in (("knew", c, False), ("adaptive", 2 * c, True)):
            profile = write_profile(tmp / f"{name}.toml", url, cap, adaptive)
            traces = tmp / f"{name}.traces.jsonl"
            done = start_run(jobs, profile, tmp / f"{name}.results.jsonl", traces)
            done.wait()
            span, calls, limited, ok = measure(traces)
            rates[name] = ok / span
            print(
                f"{name:>9} (max_concurrency {cap}): {rates[name]:6.1f} jobs/s, makespan "
                f"{span:5.2f} s, {calls} calls, 429s {limited} ({limited / calls:.1%}), "
                f"exit {done.returncode}",
                flush=True,
            )
    print(f"adaptive / knew throughput: {rates['adaptive'] / rates['knew']:.2f}")


if __name__ == "__main__":
    main()
