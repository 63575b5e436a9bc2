"""`rrcli serve` against the backends alone: one load generator, the same requests, the same run.

Two `rrcli sim` processes are the backends; `rrcli serve` (its own process) pools them. The load
generator (this process, one httpx2 client) keeps ``--in-flight`` chat requests going, first
straight to the backends (alternating), then through serve, for each backend latency; it prints
the throughput ratio and the median and p99 each side took. Then a slow streaming backend: the
time to the first text straight and through serve, sequential requests, medians compared.

    python benchmarks/bench_serve.py [--requests 3000] [--in-flight 64] [--latencies 50,0]

LiteLLM's proxy is measured too when `litellm` is on PATH (`pip install 'litellm[proxy]'`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import orjson
import tomli_w
from _common import ROOT, free_port, serving, sim_server

BODY = {"model": "pool", "messages": [{"role": "user", "content": "Say a number."}]}


def profile(urls: list[str], path: Path) -> Path:
    backends = [
        {
            "id": f"b{i}", "provider": "openai", "base_url": url, "model": "sim", "auth": "none",
            "allow_private": True, "max_concurrency": 256,
        }
        for i, url in enumerate(urls)
    ]  # fmt: skip
    path.write_text(tomli_w.dumps({"name": "pool", "backends": backends}))
    return path


@contextlib.contextmanager
def served(path: Path) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "rrcli", "serve", "-p", str(path), "--port", str(port)]
    with serving([*argv, "--no-auth"], port) as url:
        yield url


async def load(urls: list[str], requests: int, in_flight: int) -> tuple[float, list[float]]:
    """(requests per second, each request's seconds) for ``requests`` POSTs spread over
    ``urls``, ``in_flight`` at a time."""
    limits = httpx2.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    latencies: list[float] = []
    left = iter(range(requests))
    async with httpx2.AsyncClient(timeout=60, limits=limits) as client:

        async def worker(k: int) -> None:
            for n in left:
                url = urls[(n + k) % len(urls)] + "/chat/completions"
                started = time.perf_counter()
                reply = await client.post(url, json=BODY)
                latencies.append(time.perf_counter() - started)
                assert reply.status_code == 200, reply.text

        started = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(in_flight)))
        elapsed = time.perf_counter() - started
    return requests / elapsed, latencies


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000 if q < 100 else max(values)


async def ttft(url: str, n: int) -> float:
    """Median seconds to the first text of a streamed answer, ``n`` requests one at a time."""
    times = []
    async with httpx2.AsyncClient(timeout=60) as client:
        for _ in range(n):
            started = time.perf_counter()
            body = {**BODY, "stream": True}
            first = None
            async with client.stream("POST", url + "/chat/completions", json=body) as reply:
                async for line in reply.aiter_lines():
                    if first is None and _has_text(line):
                        first = time.perf_counter() - started
            assert first is not None
            times.append(first)
    return statistics.median(times)


def _has_text(line: str) -> bool:
    """Whether an SSE line of a chat stream carries text (not the empty first delta)."""
    if not line.startswith("data: {"):
        return False
    choices = orjson.loads(line[6:]).get("choices") or [{}]
    return bool((choices[0].get("delta") or {}).get("content"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--latencies", default="50,0", help="backend latencies in ms")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = str(ROOT)
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for latency in (float(x) for x in args.latencies.split(",")):
            ms = str(latency)
            with sim_server("--latency-ms", ms) as a, sim_server("--latency-ms", ms) as b:
                path = profile([a, b], Path(tmp) / "pool.toml")
                with served(path) as gateway:
                    compare(latency, [a, b], [gateway], args)
        with sim_server(
            "--ttft-ms", "200", "--tokens-per-s", "16", "--output-tokens", "32"
        ) as slow:
            path = profile([slow], Path(tmp) / "slow.toml")
            with served(path) as gateway:
                asyncio.run(ttft(slow, 2))
                asyncio.run(ttft(gateway, 2))
                direct, through = asyncio.run(ttft(slow, 15)), asyncio.run(ttft(gateway, 15))
        print(
            f"TTFT (a 200 ms first token, ~2 s stream): direct {direct * 1000:.1f} ms, "
            f"through serve {through * 1000:.1f} ms, added {(through - direct) * 1000:+.1f} ms"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f} (1 min)")


def compare(
    latency: float, direct: list[str], gateway: list[str], args: argparse.Namespace
) -> None:
    warm = min(500, args.requests)
    asyncio.run(load(direct, warm, args.in_flight))
    asyncio.run(load(gateway, warm, args.in_flight))
    rows = []
    for name, urls in (
        ("direct", direct),
        ("serve", gateway),
        ("direct", direct),
        ("serve", gateway),
    ):
        rate, times = asyncio.run(load(urls, args.requests, args.in_flight))
        rows.append((name, rate, p(times, 50), p(times, 99)))
    best = {
        name: max((r for r in rows if r[0] == name), key=lambda r: r[1])
        for name in ("direct", "serve")
    }
    d, s = best["direct"], best["serve"]
    print(
        f"{latency:g} ms backends, {args.in_flight} in flight: direct {d[1]:,.0f} req/s "
        f"(p50 {d[2]:.1f} ms, p99 {d[3]:.1f} ms); serve {s[1]:,.0f} req/s (p50 {s[2]:.1f} ms, "
        f"p99 {s[3]:.1f} ms); ratio {s[1] / d[1]:.3f}, added p50 {s[2] - d[2]:+.1f} ms, "
        f"p99 {s[3] - d[3]:+.1f} ms",
        flush=True,
    )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
