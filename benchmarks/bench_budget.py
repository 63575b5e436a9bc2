"""What a budget costs a run: the same run with and without ``max_cost`` on one `rrcli sim`
server, in the same process, alternating.

    python benchmarks/bench_budget.py [--jobs 2000] [--concurrency 64] [--latency-ms 50]
                                      [--rounds 10]

Two priced backends of cap concurrency/2 on one server; with the budget, every attempt reserves
its worst case at the router's admit and settles at its usage (routing/budget.py), with a limit
no run reaches. The runs interleave, none, budget, none, budget, ... (one warm-up first): each
round is a pair of neighbours, taken in turn none-then-budget and budget-then-none, so a load
that drifts weighs on both alike. Prints jobs/s and this process's CPU µs a job of each; then
the median of the rounds' ratios (budget / none) of throughput (the bar: a budget that does not
bind costs at most 3 %, >= 0.97) and of CPU a job, with the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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


def pair(pool: Profile, jobs: Path, tmp: Path, budget_first: bool) -> tuple[float, ...]:
    """One round, two neighbouring runs in the order asked: (jobs/s, CPU µs a job) without a
    budget, then with one."""
    costs = (1e6, None) if budget_first else (None, 1e6)
    runs = {cost: asyncio.run(timed(pool, jobs, tmp, cost)) for cost in costs}
    return (*runs[None], *runs[1e6])


def load() -> str:
    """The load average over the last 1, 5 and 15 minutes."""
    return " ".join(f"{n:.2f}" for n in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
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
        print(
            f"{args.jobs} jobs, concurrency {args.concurrency}, server {args.latency_ms} ms; "
            f"load average {load()}"
        )
        asyncio.run(timed(pool, jobs, tmp, None))  # warm up
        ratios, cpu_ratios = [], []
        for i in range(args.rounds):
            plain, plain_cpu, budgeted, budget_cpu = pair(pool, jobs, tmp, i % 2 == 1)
            ratios.append(budgeted / plain)
            cpu_ratios.append(budget_cpu / plain_cpu)
            print(
                f"round {i + 1} ({'budget' if i % 2 else 'none'} first): "
                f"no budget {plain:6.0f} jobs/s, {plain_cpu:5.0f} µs CPU a job | "
                f"budget {budgeted:6.0f} jobs/s, {budget_cpu:5.0f} µs CPU a job "
                f"(ratio {budgeted / plain:.3f})",
                flush=True,
            )
        print(
            f"median throughput ratio {statistics.median(ratios):.3f} (bar: >= 0.97); "
            f"median CPU a job ratio {statistics.median(cpu_ratios):.3f}; "
            f"load average {load()}"
        )


if __name__ == "__main__":
    main()
