"""`rrcli serve` against the backends alone and against a bare forwarder: one load generator,
the same requests, the same run.

Two `rrcli sim` processes are the backends; `rrcli serve` (its own process) pools them; a bare
forwarder (benchmarks/_forwarder.py: starlette on uvicorn, one httpx2 client per backend, no
routing) is the floor of serve's stack. The load generator (this process) keeps
``--in-flight`` chat requests going straight to the backends (alternating), through the
forwarder and through serve, interleaved, for each backend latency: ``--client raw``
(benchmarks/_rawload.py: keep-alive connections on raw asyncio streams, requests made once) or
``--client httpx2`` (one httpx2 client, as a program would send). It prints each one's
throughput, median and p99, the ratios to direct, the CPU seconds the forwarder's and serve's
processes spent a request (all of it beyond the upstream call) and the generator's own: the 2
cores are shared by the generator, the backends and the process measured, so each CPU
microsecond of any of them is throughput. ``--baseline`` adds `rrcli serve` of another
checkout to the same run (before and after a change); ``--litellm PYTHON`` (or
``RRCLI_LITELLM_PYTHON``) adds LiteLLM's proxy run by that Python (one with ``litellm[proxy]``
installed, e.g. a venv's), its router in front of the same two backends. Then a slow
streaming backend: the time to the first text straight, through the forwarder and through
serve, sequential requests, medians compared.

    python benchmarks/bench_serve.py [--requests 3000] [--in-flight 64] [--latencies 50,0]
        [--client raw|httpx2] [--baseline CHECKOUT] [--litellm PYTHON]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx2
import orjson
import tomli_w
from _common import ROOT, cpu_seconds, free_port, server_process, sim_server
from _rawload import raw_load

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
def served(path: Path, root: Path = ROOT) -> Iterator[tuple[str, int]]:
    """`rrcli serve` of the checkout at ``root`` on the profile at ``path``: (its base URL,
    its pid)."""
    port = free_port()
    argv = [sys.executable, "-m", "rrcli", "serve", "-p", str(path), "--port", str(port)]
    with server_process([*argv, "--no-auth"], port, root) as running:
        yield running


@contextlib.contextmanager
def forwarded(urls: list[str]) -> Iterator[tuple[str, int]]:
    """The bare forwarder in front of ``urls``: (its base URL, its pid)."""
    port = free_port()
    script = str(Path(__file__).with_name("_forwarder.py"))
    with server_process([sys.executable, script, str(port), *urls], port) as running:
        yield running


#: LiteLLM's proxy kept off the network (its price map from the package, no telemetry) and,
#: as serve runs here with --no-auth, without a key
LITELLM_OFFLINE = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False", "NO_PROXY": "*",
    "no_proxy": "*", "LITELLM_LOG": "ERROR",
    "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",  # as serve runs --no-auth
}  # fmt: skip


@contextlib.contextmanager
def litellm_proxy(python: str, urls: list[str], folder: Path) -> Iterator[tuple[str, int]]:
    """LiteLLM's proxy (run by ``python``) routing model "pool" over ``urls``, one deployment
    each, as its docs set up a load-balanced model: (its base URL, its pid)."""
    deployments = "".join(
        f"  - model_name: pool\n    litellm_params:\n      model: openai/sim\n"
        f"      api_base: {url}\n      api_key: unused\n"
        for url in urls
    )
    config = folder / "litellm.yaml"
    config.write_text(f"model_list:\n{deployments}")
    port = free_port()
    argv = [python, "-m", "litellm.proxy.proxy_cli", "--config", str(config), "--host",
            "127.0.0.1", "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(
        argv, env={**os.environ, **LITELLM_OFFLINE}, cwd=folder,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                health = f"http://127.0.0.1:{port}/health/liveliness"
                with urllib.request.urlopen(health, timeout=2) as reply:
                    if reply.status == 200:
                        break
            time.sleep(0.25)
        else:
            raise RuntimeError("LiteLLM's proxy did not start")
        yield f"http://127.0.0.1:{port}/v1", proc.pid
    finally:
        proc.terminate()
        proc.wait(15)


async def httpx2_load(urls: list[str], requests: int, in_flight: int) -> tuple[float, list[float]]:
    """(requests per second, each request's seconds) for ``requests`` POSTs spread over
    ``urls``, ``in_flight`` at a time, through one httpx2 client."""
    limits = httpx2.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    latencies: list[float] = []
    left = iter(range(requests))
    async with httpx2.AsyncClient(timeout=60, limits=limits) as client:

        async def worker() -> None:
            for n in left:
                url = urls[n % len(urls)] + "/chat/completions"
                started = time.perf_counter()
                reply = await client.post(url, json=BODY)
                latencies.append(time.perf_counter() - started)
                assert reply.status_code == 200, reply.text

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed = time.perf_counter() - started
    return requests / elapsed, latencies


def load(client: str, urls: list[str], requests: int, in_flight: int) -> tuple[float, list[float]]:
    """One round of the load generator ``client`` ("raw" or "httpx2")."""
    if client == "raw":
        return asyncio.run(raw_load(urls, BODY, requests, in_flight))
    return asyncio.run(httpx2_load(urls, requests, in_flight))


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
    parser.add_argument(
        "--baseline", type=Path, help="also `rrcli serve` of this checkout (before a change)"
    )
    parser.add_argument(
        "--client", choices=("raw", "httpx2"), default="raw", help="the load generator"
    )
    parser.add_argument(
        "--litellm",
        default=os.environ.get("RRCLI_LITELLM_PYTHON"),
        help="also LiteLLM's proxy, run by this Python (one with litellm[proxy] installed)",
    )
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = str(ROOT)
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for latency in (float(x) for x in args.latencies.split(",")):
            ms = str(latency)
            with sim_server("--latency-ms", ms) as a, sim_server("--latency-ms", ms) as b:
                path = profile([a, b], Path(tmp) / "pool.toml")
                with contextlib.ExitStack() as stack:
                    targets: dict[str, Target] = {
                        "direct": ([a, b], None),
                        "forwarder": stack.enter_context(forwarded([a, b])),
                        "serve": stack.enter_context(served(path)),
                    }
                    if args.baseline is not None:
                        targets["baseline"] = stack.enter_context(served(path, args.baseline))
                    if args.litellm:
                        proxy = litellm_proxy(args.litellm, [a, b], Path(tmp))
                        targets["litellm"] = stack.enter_context(proxy)
                    compare(latency, targets, args)
        with sim_server(
            "--ttft-ms", "200", "--tokens-per-s", "16", "--output-tokens", "32"
        ) as slow:
            path = profile([slow], Path(tmp) / "slow.toml")
            with served(path) as gateway, forwarded([slow]) as forwarder:
                first_texts({"direct": slow, "forwarder": forwarder[0], "serve": gateway[0]})
    print(f"load average after: {os.getloadavg()[0]:.2f} (1 min)")


def first_texts(urls: dict[str, str]) -> None:
    """The median time to the first text of a slow stream through each of ``urls``."""
    for url in urls.values():
        asyncio.run(ttft(url, 2))
    medians = {name: asyncio.run(ttft(url, 15)) * 1000 for name, url in urls.items()}
    direct = medians["direct"]
    print(
        "TTFT (a 200 ms first token, ~2 s stream, median of 15): "
        + ", ".join(
            f"{name} {ms:.1f} ms" + ("" if name == "direct" else f" ({ms - direct:+.1f})")
            for name, ms in medians.items()
        ),
        flush=True,
    )


Target = tuple[list[str] | str, int | None]  # base URLs or one, and the process to watch


def compare(latency: float, targets: dict[str, Target], args: argparse.Namespace) -> None:
    """Each target twice, interleaved after a warm-up; the best of each printed against
    direct, with the CPU its process (and the load generator) spent a request."""
    urls = {name: [u] if isinstance(u, str) else u for name, (u, _) in targets.items()}
    for name in targets:
        load(args.client, urls[name], min(500, args.requests), args.in_flight)
    best: dict[str, tuple[float, float, float, float | None, float]] = {}
    for name in [*targets] * 2:
        pid = targets[name][1]
        before, mine = None if pid is None else cpu_seconds(pid), time.process_time()
        rate, times = load(args.client, urls[name], args.requests, args.in_flight)
        own = (time.process_time() - mine) / args.requests
        cpu = None if before is None else (cpu_seconds(pid) - before) / args.requests
        row = (rate, p(times, 50), p(times, 99), cpu, own)
        if name not in best or rate > best[name][0]:
            best[name] = row
    d = best["direct"]
    print(f"{latency:g} ms backends, {args.in_flight} in flight, {args.client} client:", flush=True)
    for name, (rate, p50, p99, cpu, own) in best.items():
        line = f"  {name:9} {rate:7,.0f} req/s  p50 {p50:6.1f} ms  p99 {p99:6.1f} ms"
        if name != "direct":
            line += (
                f"  ratio {rate / d[0]:.3f}  added p50 {p50 - d[1]:+.1f} ms, "
                f"p99 {p99 - d[2]:+.1f} ms  CPU {cpu * 1e6:,.0f} µs a request"
            )
        print(line + f"  (generator {own * 1e6:,.0f} µs a request)", flush=True)
    if "litellm" in best:
        print(f"  serve / LiteLLM's proxy: {best['serve'][0] / best['litellm'][0]:.2f} x")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
