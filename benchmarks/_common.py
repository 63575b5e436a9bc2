"""Shared pieces of the benchmarks: free ports, `rrcli sim` and Redis servers, the two-backend
pool, job files, peak memory."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from rrcli.config.profile import Backend, Credentials, Profile

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sim_server(*args: str) -> contextlib.AbstractContextManager[str]:
    """An `rrcli sim` server in its own process; yields its OpenAI-style base URL."""
    port = free_port()
    return serving([sys.executable, "-m", "rrcli", "sim", "--port", str(port), *args], port)


@contextlib.contextmanager
def serving(argv: list[str], port: int) -> Iterator[str]:
    """A server process started by ``argv`` that listens on ``port``; yields its OpenAI-style
    base URL once it accepts connections, and stops it after."""
    with server_process(argv, port) as (url, _):
        yield url


@contextlib.contextmanager
def server_process(argv: list[str], port: int, root: Path = ROOT) -> Iterator[tuple[str, int]]:
    """``serving``, yielding the process id too (for ``cpu_seconds``); the rrcli it runs is
    the checkout at ``root``, run in its folder when it is another (``python -m`` looks in
    the working folder first)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    cwd = None if root == ROOT else root
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"{' '.join(argv[1:3])} did not start")
        yield f"http://127.0.0.1:{port}/v1", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def cpu_seconds(pid: int) -> float:
    """The user and system CPU seconds process ``pid`` has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A throwaway ``redis-server`` on a free loopback port (nothing saved); yields its URL.
    Exits the benchmark when none is installed."""
    redis_bin = shutil.which("redis-server")
    if redis_bin is None:
        sys.exit("redis-server is not installed")
    port = free_port()
    redis = subprocess.Popen(
        [redis_bin, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        redis.kill()


def two_backend_pool(
    base_url: str, concurrency: int, name: str = "bench", prefix: str = "b", **fields: Any
) -> Profile:
    """The benchmarks' pool: two backends on the server at ``base_url``, each capped at half
    of ``concurrency``; ``fields`` go to both (a price, the endpoints they serve)."""
    half = max(1, concurrency // 2)
    backends = tuple(
        Backend(
            id=f"{prefix}{i}", base_url=base_url, model="sim", credentials=Credentials(auth="none"),
            max_concurrency=half, allow_private=True, **fields,
        )
        for i in range(2)
    )  # fmt: skip
    return Profile(name=name, backends=backends, concurrency=concurrency)


def write_jobs(path: Path, n: int) -> Path:
    with open(path, "wb") as f:
        for i in range(n):
            f.write(orjson.dumps({"id": f"j{i}", "prompt": f"Say the number {i}."}) + b"\n")
    return path


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def call_records(traces: Path) -> Iterator[dict]:
    """The call records of a trace file, with ``start``/``end`` as epoch seconds."""
    with open(traces, "rb") as f:
        for line in f:
            rec = orjson.loads(line)
            if rec["event"] == "call":
                rec["start"] = datetime.fromisoformat(rec["ts_start"]).timestamp()
                rec["end"] = datetime.fromisoformat(rec["ts_end"]).timestamp()
                yield rec


def start_run(jobs: Path, profile: Path, out: Path, traces: Path, *extra: str) -> subprocess.Popen:
    """`rrcli run` in its own process (quiet), writing to ``out`` and ``traces``."""
    return subprocess.Popen(
        [sys.executable, "-m", "rrcli", "run", str(jobs), "-p", str(profile), "-q",
         "--out", str(out), "--traces", str(traces), *extra],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
