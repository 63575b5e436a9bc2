"""Adaptive caps against a server whose true capacity is below the configured cap.

    python benchmarks/bench_adaptive.py [--jobs N] [--latency-ms MS] [--capacity C]
                                                        (default: 1000 jobs, 50 ms, C = 4)
    python benchmarks/bench_adaptive.py --pool [--jobs N] [--latency-ms MS]
                                                        (default: 1000 jobs, 1000 ms)

One `rrcli sim` server in its own process answers 429 (with its Retry-After, 100 ms) to any call
beyond C at once. Two profiles run the same jobs, end to end, in fresh processes:
`knew`, max_concurrency = C (the true capacity), and `adaptive`, max_concurrency = 2C with
`[gate] adaptive = true`. Targets: the adaptive run's throughput within 20 % of `knew`'s, and
429s under 5 % of its calls. Throughput is jobs / makespan, read from the traces.

``--pool``: a cap a little too high in a pool. Two backends, least_loaded: `hidden` answers 429
beyond 16 calls at once, `other` has no limit (cap 36), so `hidden`'s right share is 16/52 ≈ 31 %.
Three runs: `right` (hidden's cap 16), `high` (cap 20) and `high, adaptive` (cap 20, `[gate]
adaptive = true`). Target: `high, adaptive` within 5 % of `right`'s makespan; `high` alone shows
what a cap set too high costs (429s that cool the backend: its share falls).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import tomli_w
from _common import call_records, sim_server, start_run, write_jobs


def pool_profile(path: Path, urls: dict[str, str], caps: dict[str, int], adaptive: bool) -> Path:
    backends = [
        {"id": name, "provider": "openai", "model": "sim", "base_url": url, "auth": "none",
         "allow_private": True, "max_concurrency": caps[name]}
        for name, url in urls.items()
    ]  # fmt: skip
    profile = {
        "strategy": "least_loaded",
        "gate": {"adaptive": adaptive},
        "retry": {"max_retries": 10},
        "backends": backends,
    }
    path.write_text(tomli_w.dumps(profile))
    return path


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


def measure(traces: Path, served_by: str | None = None) -> tuple[float, int, int, int]:
    """(makespan in seconds, calls, 429s, ok calls) from a trace file; ``served_by``: the ok
    calls of that backend only."""
    first, last, n, limited, ok = float("inf"), 0.0, 0, 0, 0
    for rec in call_records(traces):
        first, last = min(first, rec["start"]), max(last, rec["end"])
        n += 1
        limited += rec["http_status"] == 429
        ok += rec["outcome"] == "ok" and served_by in (None, rec["deployment"])
    return last - first, n, limited, ok


def pool(jobs_n: int, latency_ms: int) -> None:
    """The --pool scenario (see the module docstring)."""
    timing = ("--latency-ms", str(latency_ms), "--jitter-ms", str(latency_ms // 5))
    print(f"{jobs_n} jobs, {latency_ms} ms ±20 %; hidden limit 16, other cap 36, least_loaded")
    spans = {}
    with (
        tempfile.TemporaryDirectory() as d,
        sim_server(*timing, "--cap", "16") as hidden,
        sim_server(*timing) as other,
    ):
        tmp = Path(d)
        jobs = write_jobs(tmp / "jobs.jsonl", jobs_n)
        urls = {"hidden": hidden, "other": other}
        for name, cap, adaptive in (("right", 16, False), ("high", 20, False),
                                    ("high, adaptive", 20, True)):  # fmt: skip
            stem = name.replace(", ", "-")
            profile = pool_profile(
                tmp / f"{stem}.toml", urls, {"hidden": cap, "other": 36}, adaptive
            )
            traces = tmp / f"{stem}.traces.jsonl"
            start_run(jobs, profile, tmp / f"{stem}.results.jsonl", traces).wait()
            span, calls, limited, by_hidden = measure(traces, "hidden")
            spans[name] = span
            print(
                f"{name:>15} (hidden cap {cap}): makespan {span:5.2f} s, {calls} calls, "
                f"429s {limited}, hidden served {by_hidden / jobs_n:.1%}",
                flush=True,
            )
    print(f"high, adaptive / right makespan: {spans['high, adaptive'] / spans['right']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--latency-ms", type=int, default=None, help="50; 1000 with --pool")
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--pool", action="store_true", help="the cap-a-little-high pool")
    args = parser.parse_args()
    if args.pool:
        pool(args.jobs, args.latency_ms or 1000)
        return
    args.latency_ms = args.latency_ms or 50
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
