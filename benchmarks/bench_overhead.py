"""Overhead of rrcli against a raw httpx2 loop on the same `rrcli sim` server, in the same run.

    python benchmarks/bench_overhead.py [--jobs 5000] [--concurrency 64] [--stream] [--rounds 3]

For each server (zero latency: CPU-bound; 50 ms: latency-bound, ceiling = concurrency / 0.05 s),
it sends the same requests three ways and prints requests/s and the ratio to the raw loop, the
raw loop and rrcli interleaved for --rounds rounds (the order swapped each round; the median
ratio, and the CPU this process spent a request on each side, which the load moves less):
- raw: 64 coroutines sending with one httpx2.AsyncClient (no routing, no files), decoding each
  answer as the least client must (`r.json()`; with --stream, each SSE data line's JSON);
- rrcli: the whole engine (jobs file → router → gates → provider → results + traces), in process,
  two backends of cap concurrency/2 on that server;
- LiteLLM's Router with the same two deployments, when `import litellm` works.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path

import httpx2
from _common import sim_server, two_backend_pool, write_jobs

from rrcli.running.runner import RunOptions, run


async def raw_loop(base_url: str, n: int, concurrency: int, stream: bool) -> float:
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(limits=limits, timeout=60) as client:
        counter = iter(range(n))

        async def worker() -> None:
            for i in counter:
                body = {
                    "model": "sim",
                    "messages": [{"role": "user", "content": f"Say the number {i}."}],
                }
                if stream:
                    body |= {"stream": True, "stream_options": {"include_usage": True}}
                    async with client.stream(
                        "POST", f"{base_url}/chat/completions", json=body
                    ) as r:
                        r.raise_for_status()
                        async for line in r.aiter_lines():  # what r.json() is to a plain call
                            if line.startswith("data: ") and line != "data: [DONE]":
                                json.loads(line[6:])
                else:
                    r = await client.post(f"{base_url}/chat/completions", json=body)
                    r.raise_for_status()
                    r.json()

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n / (time.perf_counter() - t0)


async def rrcli_run(base_url: str, jobs: Path, tmp: Path, concurrency: int, stream: bool) -> float:
    profile = two_backend_pool(base_url, concurrency)
    out, traces = tmp / "r.jsonl", tmp / "t.jsonl"
    options = RunOptions(jobs=jobs, out=out, traces=traces, overwrite=True, stream=stream)
    t0 = time.perf_counter()
    summary = await run(profile, options, environ={})
    elapsed = time.perf_counter() - t0
    assert summary.ok == summary.total, summary.jobs
    return summary.ok / elapsed


async def litellm_router(base_url: str, n: int, concurrency: int) -> float | None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import: offline
    try:
        import litellm
    except ImportError:
        return None
    litellm.suppress_debug_info = True
    model_list = [
        {
            "model_name": "pool",
            "litellm_params": {"model": "openai/sim", "api_base": base_url, "api_key": "x"},
        }
        for _ in range(2)
    ]
    router = litellm.Router(model_list=model_list, routing_strategy="simple-shuffle")
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            await router.acompletion(
                model="pool", messages=[{"role": "user", "content": f"Say the number {i}."}]
            )

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return n / (time.perf_counter() - t0)


def timed(run: Awaitable[float]) -> tuple[float, float]:
    """(requests/s of ``run``, CPU seconds this process spent on it: both sides run in it)."""
    cpu = time.process_time()
    rate = asyncio.run(run)
    return rate, time.process_time() - cpu


def rounds(url: str, jobs: Path, tmp: Path, args: argparse.Namespace) -> tuple[float, float]:
    """The raw loop and rrcli interleaved, each round printed; (median raw, median ratio)."""
    raws, ratios = [], []
    for r in range(args.rounds):
        sides = {
            "raw": lambda: raw_loop(url, args.jobs, args.concurrency, args.stream),
            "rrcli": lambda: rrcli_run(url, jobs, tmp, args.concurrency, args.stream),
        }
        got = {name: timed(sides[name]()) for name in (sides if r % 2 == 0 else reversed(sides))}
        (raw, raw_cpu), (ours, ours_cpu) = got["raw"], got["rrcli"]
        raws.append(raw)
        ratios.append(ours / raw)
        print(
            f"  round {r + 1}: raw {raw:6.0f} req/s ({raw_cpu * 1e6 / args.jobs:5.0f} µs CPU a "
            f"request) | rrcli {ours:6.0f} req/s ({ours_cpu * 1e6 / args.jobs:5.0f} µs) | ratio "
            f"{ours / raw:.3f} | load {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
            flush=True,
        )
    return statistics.median(raws), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        jobs = write_jobs(tmp / "jobs.jsonl", args.jobs)
        print(f"{args.jobs} jobs, concurrency {args.concurrency}, stream={args.stream}")
        for latency in (0, 50):
            print(f"server {latency} ms:", flush=True)
            with sim_server("--latency-ms", str(latency)) as url:
                asyncio.run(raw_loop(url, 200, args.concurrency, args.stream))  # warm up
                raw, ratio = rounds(url, jobs, tmp, args)
                lite = None
                if not args.stream:
                    lite = asyncio.run(litellm_router(url, args.jobs, args.concurrency))
            line = f"server {latency:>2} ms: median ratio rrcli / raw httpx2 {ratio:.3f}"
            if lite is not None:
                line += f" | LiteLLM Router {lite:8.0f} req/s (ratio {lite / raw:.2f})"
            else:
                line += " | LiteLLM: not installed"
            print(line, flush=True)


if __name__ == "__main__":
    main()
