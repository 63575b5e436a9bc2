"""What a budget costs a run: the same run with and without ``max_cost`` on one `rrcli sim`
server, in the same process, alternating.

    python benchmarks/bench_budget.py [--jobs 5000] [--concurrency 64] [--latency-ms 50]
                                      [--rounds 3]

Two priced backends of cap concurrency/2 on one server; with the budget, every attempt reserves
its worst case at the router's admit and settles at its usage (routing/budget.py), with a limit
no run reaches. Each round runs none, budget, budget, none (so a load that drifts during a round
weighs on both alike) and prints jobs/s and this process's CPU µs a job of each; then the median
ratio of throughput (budget / none; the bar is >= 0.9) and of CPU a job.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from _common import sim_server, two_backend_pool, write_jobs

from rrcli.config.profile import Price, Profile
from rrcli.running.runner import RunOptions, run


async def timed(
    pool: Profile, jobs: Path, tmp: Path, max_cost: float | None
) -> tuple[float, float]:
    """(jobs/s, CPU µs a job of this process) of one run."""
    options = RunOptions(
        jobs=jobs, out=tmp / "r.jsonl", traces=tmp / "t.jsonl", overwrite=True, max_cost=max_cost
    )
    t0, cpu0 = time.perf_counter(), time.process_time()
    summary = await run(pool, options, environ={})
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert summary.ok == summary.total, summary.jobs
    return summary.ok / elapsed, cpu / summary.ok * 1e6


def pair(pool: Profile, jobs: Path, tmp: Path) -> tuple[float, float, float, float]:
    """One round, none-budget-budget-none: (jobs/s, CPU µs a job) without, then with."""
    a1, b1, b2, a2 = (asyncio.run(timed(pool, jobs, tmp, cost)) for cost in (None, 1e6, 1e6, None))
    return (
        (a1[0] + a2[0]) / 2, (a1[1] + a2[1]) / 2, (b1[0] + b2[0]) / 2, (b1[1] + b2[1]) / 2
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as d,
        sim_server("--latency-ms", str(args.latency_ms)) as url,
    ):
        tmp = Path(d)
        jobs = write_jobs(tmp / "jobs.jsonl", args.jobs)
        pool = two_backend_pool(
            url, args.concurrency, price=Price(0.15, 0.6), params={"max_tokens": 64}
        )
        print(f"{args.jobs} jobs, concurrency {args.concurrency}, server {args.latency_ms} ms")
        asyncio.run(timed(pool, jobs, tmp, None))  # warm up
        ratios, cpu_ratios = [], []
        for i in range(args.rounds):
            plain, plain_cpu, budgeted, budget_cpu = pair(pool, jobs, tmp)
            ratios.append(budgeted / plain)
            cpu_ratios.append(budget_cpu / plain_cpu)
            print(
                f"round {i + 1}: no budget {plain:6.0f} jobs/s, {plain_cpu:5.0f} µs CPU a job | "
                f"budget {budgeted:6.0f} jobs/s, {budget_cpu:5.0f} µs CPU a job "
                f"(ratio {budgeted / plain:.3f})",
                flush=True,
            )
        print(
            f"median throughput ratio {statistics.median(ratios):.3f} (bar: >= 0.9); "
            f"median CPU a job ratio {statistics.median(cpu_ratios):.3f}"
        )


if __name__ == "__main__":
    main()
