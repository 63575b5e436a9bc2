"""Embeddings jobs: rrcli against a raw httpx2 loop on the same `rrcli sim` server, in the same run.

    python benchmarks/bench_embeddings.py [--jobs 5000] [--concurrency 64] [--inputs 4]
                                          [--dimensions 256] [--repeat 3]

For each server (zero latency: CPU-bound; 50 ms: latency-bound, ceiling = concurrency / 0.05 s),
it sends the same embeddings requests (``inputs`` texts each, vectors of ``dimensions``) two
ways and prints requests/s, the ratio to the raw loop and this process's CPU time per request
(which the server's share of the cores does not blur):
- raw: 64 coroutines posting to /embeddings with one httpx2.AsyncClient (no routing, no files),
  decoding each answer as the least client must (`r.json()`);
- rrcli: the whole engine (jobs file → router → gates → provider → results + traces), in process,
  two embedding backends of cap concurrency/2 on that server.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from statistics import median

import httpx2
import orjson
from _common import sim_server, two_backend_pool

from rrcli.running.runner import RunOptions, run


def texts(i: int, inputs: int) -> list[str]:
    return [f"passage {i}.{k}: the quick brown fox jumps over the lazy dog" for k in range(inputs)]


def write_jobs(path: Path, n: int, inputs: int, dimensions: int = 256) -> Path:
    with open(path, "wb") as f:
        for i in range(n):
            job = {"id": f"e{i}", "endpoint": "embeddings", "input": texts(i, inputs),
                   "params": {"dimensions": dimensions}}  # fmt: skip
            f.write(orjson.dumps(job) + b"\n")
    return path


async def raw_loop(
    base_url: str, n: int, concurrency: int, inputs: int, dimensions: int = 256
) -> float:
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(limits=limits, timeout=60) as client:
        counter = iter(range(n))

        async def worker() -> None:
            for i in counter:
                body = {"dimensions": dimensions, "model": "sim", "input": texts(i, inputs)}
                r = await client.post(f"{base_url}/embeddings", json=body)
                r.raise_for_status()
                r.json()

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n / (time.perf_counter() - t0)


async def rrcli_run(base_url: str, jobs: Path, tmp: Path, concurrency: int) -> float:
    profile = two_backend_pool(
        base_url, concurrency, "bench-embeddings", "emb", endpoints=("embeddings",)
    )
    options = RunOptions(jobs=jobs, out=tmp / "r.jsonl", traces=tmp / "t.jsonl", overwrite=True)
    t0 = time.perf_counter()
    summary = await run(profile, options, environ={})
    elapsed = time.perf_counter() - t0
    assert summary.ok == summary.total, summary.jobs
    return summary.ok / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--dimensions", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3, help="alternating rounds; medians kept")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        jobs = write_jobs(tmp / "jobs.jsonl", args.jobs, args.inputs, args.dimensions)
        print(
            f"{args.jobs} embeddings jobs of {args.inputs} inputs x {args.dimensions} dimensions, "
            f"concurrency {args.concurrency}"
        )
        for latency in (0, 50):
            raw, ours, cpu_raw, cpu_ours = [], [], [], []
            with sim_server("--latency-ms", str(latency)) as url:
                shape = (args.concurrency, args.inputs, args.dimensions)
                asyncio.run(raw_loop(url, 200, *shape))  # warm up
                for _ in range(args.repeat):  # alternating, so a busy spell hits both alike
                    cpu = time.process_time()
                    raw.append(asyncio.run(raw_loop(url, args.jobs, *shape)))
                    cpu_raw.append((time.process_time() - cpu) / args.jobs * 1e6)
                    cpu = time.process_time()
                    ours.append(asyncio.run(rrcli_run(url, jobs, tmp, args.concurrency)))
                    cpu_ours.append((time.process_time() - cpu) / args.jobs * 1e6)
            rounds = ", ".join(f"{o / r:.2f}" for o, r in zip(ours, raw, strict=True))
            print(
                f"server {latency:>2} ms: raw httpx2 {median(raw):6.0f} req/s "
                f"({median(cpu_raw):.0f} us CPU a request) | rrcli {median(ours):6.0f} req/s "
                f"({median(cpu_ours):.0f} us) | ratio of medians {median(ours) / median(raw):.2f} "
                f"(rounds {rounds})",
                flush=True,
            )


if __name__ == "__main__":
    main()
