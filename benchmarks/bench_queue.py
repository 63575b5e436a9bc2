"""The shared work queue: how it scales with workers, and what it costs per job.

    python benchmarks/bench_queue.py [--jobs 1600] [--concurrency 8] [--cost-jobs 20000]

Scaling: 1, 2 and 4 `rrcli run --queue` workers (each --concurrency C) on one queue, against two
`rrcli sim` servers of 200 ms whose caps (2 × 2C, shared through a Redis gate) allow four
workers' concurrency; jobs/s from the first call's start to the last call's end (the traces),
so process start-up is not counted. Cost: one worker with the in-process sim at 0 ms, the same
jobs as a plain `rrcli run` and through a queue (load included): the difference per job is
what the queue itself costs (Redis round trips, the stored result).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import tomli_w
from _common import call_records, redis_server, sim_server, start_run, write_jobs


def profile(path: Path, backends: list[dict], url: str, **top: object) -> Path:
    doc = {"strategy": "least_loaded", "queue": {"url": url}, **top, "backends": backends}
    path.write_text(tomli_w.dumps(doc))
    return path


def http_pool(urls: list[str], cap: int) -> list[dict]:
    return [
        {"id": f"b{i}", "base_url": u, "auth": "none", "allow_private": True, "model": "sim",
         "max_concurrency": cap}
        for i, u in enumerate(urls)
    ]  # fmt: skip


def workers(tmp: Path, jobs: Path, prof: Path, name: str, n: int, concurrency: int) -> float:
    """``n`` workers on queue ``name`` (each loads ``jobs``: it is loaded once); jobs/s while
    all ``n`` work."""
    procs = [
        start_run(jobs, prof, tmp / f"{name}-{i}.jsonl", tmp / f"{name}-{i}.traces.jsonl",
                  "--queue", name, "--concurrency", str(concurrency))
        for i in range(n)
    ]  # fmt: skip
    assert all(p.wait() == 0 for p in procs)
    return _while_all_work([tmp / f"{name}-{i}.traces.jsonl" for i in range(n)])


def shards(tmp: Path, jobs: Path, prof: Path, n: int, concurrency: int) -> float:
    """The same pool without a queue: ``n`` plain processes, ``--shard i/n``; jobs/s."""
    procs = [
        start_run(jobs, prof, tmp / f"shard-{i}.jsonl", tmp / f"shard-{i}.traces.jsonl",
                  "--shard", f"{i}/{n}", "--concurrency", str(concurrency))
        for i in range(n)
    ]  # fmt: skip
    assert all(p.wait() == 0 for p in procs)
    return _while_all_work([tmp / f"shard-{i}.traces.jsonl" for i in range(n)])


def _while_all_work(traces: list[Path]) -> float:
    """Jobs/s while every process works: calls ended between the last process's first call
    and the first process's last call (processes start one after another on a busy machine)."""
    each = [list(call_records(t)) for t in traces]
    start = max(min(c["start"] for c in calls) for calls in each)
    end = min(max(c["end"] for c in calls) for calls in each)
    ended = sum(start <= c["end"] <= end for calls in each for c in calls)
    return ended / (end - start)


def scaling(tmp: Path, url: str, args: argparse.Namespace) -> None:
    c = args.concurrency
    jobs = write_jobs(tmp / "jobs.jsonl", args.jobs)
    with (
        sim_server("--latency-ms", "200", "--cap", str(2 * c)) as u1,
        sim_server("--latency-ms", "200", "--cap", str(2 * c)) as u2,
    ):
        gate = {"kind": "redis", "url": url} if args.shared_gate else {"kind": "local"}
        cap = 2 * c if args.shared_gate else c // 2
        prof = profile(tmp / "pool.toml", http_pool([u1, u2], cap), url, gate=gate)
        rates = {n: workers(tmp, jobs, prof, f"scale{n}", n, c) for n in (1, 2, 4)}
        plain = shards(tmp, jobs, prof, 4, c)
    print(f"{args.jobs} jobs, 200 ms pool, caps 2 × {2 * c}, each worker --concurrency {c} "
          f"(one worker's ceiling {c / 0.2:.0f} jobs/s)")  # fmt: skip
    for n, rate in rates.items():
        print(f"  {n} worker(s): {rate:7.1f} jobs/s  ({rate / rates[1]:.2f} × one worker)")
    print(f"  control, 4 plain processes (--shard i/4, no queue): {plain:7.1f} jobs/s "
          f"({plain / rates[1]:.2f} ×): what this machine allows")  # fmt: skip


def cost(tmp: Path, url: str, args: argparse.Namespace) -> None:
    jobs = write_jobs(tmp / "cost.jsonl", args.cost_jobs)
    sim = [{"id": "s", "provider": "sim", "model": "m", "max_concurrency": 64,
            "sim": {"latency_ms": 0}}]  # fmt: skip
    prof = profile(tmp / "zero.toml", sim, url)
    timed = {}
    for label, extra in (("plain run", ()), ("queue", ("--queue", "cost"))):
        t0, cpu0 = time.perf_counter(), _children_cpu()
        proc = start_run(jobs, prof, tmp / f"c-{label}.jsonl", tmp / f"c-{label}.t.jsonl", *extra)
        assert proc.wait() == 0
        timed[label] = (time.perf_counter() - t0, _children_cpu() - cpu0)
    n = args.cost_jobs
    print(f"{n} jobs, one process, in-process sim at 0 ms (start-up included)")
    for label, (wall, cpu) in timed.items():
        print(f"  {label:9}: wall {wall:6.2f} s ({n / wall:6.0f} jobs/s, "
              f"{wall / n * 1e6:5.1f} µs/job), rrcli CPU {cpu / n * 1e6:5.1f} µs/job")  # fmt: skip
    wall = (timed["queue"][0] - timed["plain run"][0]) / n * 1e6
    cpu = (timed["queue"][1] - timed["plain run"][1]) / n * 1e6
    print(f"  the queue's own cost: {wall:.1f} µs/job of wall time, {cpu:.1f} µs/job of CPU")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def memory(tmp: Path, url: str, n: int) -> None:
    """Redis's used_memory (INFO memory) for a queue of ``n`` jobs: loaded (every job in the
    stream), then done (the stream empty, every result stored: a sim answer's line)."""
    import asyncio

    import redis

    from rrcli.config.profile import Profile, QueueSettings
    from rrcli.fleet.queue import RedisQueue

    client = redis.Redis.from_url(url)
    client.flushall()
    base = client.info("memory")["used_memory"]
    jobs = write_jobs(tmp / "mem.jsonl", n)
    settings = QueueSettings(url=url)
    queue = RedisQueue(Profile(queue=settings), "mem", jobs, 1)
    asyncio.run(_load(queue, settings))
    loaded = client.info("memory")["used_memory"] - base
    line = (tmp / "c-queue.jsonl").read_bytes().splitlines(keepends=True)[0]
    key = "{rrcli:q:mem}:results"
    for start in range(1, n + 1, 10_000):
        client.hset(key, mapping={i: line for i in range(start, min(n + 1, start + 10_000))})
    client.delete("{rrcli:q:mem}:jobs")
    done = client.info("memory")["used_memory"] - base
    size = jobs.stat().st_size / n
    print(f"Redis memory for {n:,} jobs (job lines of {size:.0f} B, result lines of {len(line)} B)")
    print(f"  loaded, none done: {loaded / 2**20:7.1f} MiB ({loaded / n:5.0f} B/job)")
    print(f"  all done, results not yet collected: {done / 2**20:7.1f} MiB ({done / n:5.0f} B/job)")


async def _load(queue: object, settings: object) -> None:
    from rrcli.fleet.queue_load import load_jobs

    await queue.store.connect()  # type: ignore[attr-defined]
    await load_jobs(queue.store, queue.jobs, settings)  # type: ignore[attr-defined, arg-type]
    await queue.store.close()  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1600)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--cost-jobs", type=int, default=20000)
    parser.add_argument("--shared-gate", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--memory-jobs", type=int, default=1_000_000)
    args = parser.parse_args()
    with redis_server() as url, tempfile.TemporaryDirectory() as d:
        scaling(Path(d), url, args)
        cost(Path(d), url, args)
        if args.memory_jobs:
            memory(Path(d), url, args.memory_jobs)


if __name__ == "__main__":
    main()
