"""The shared queue across hosts, simulated: each worker in its own network namespace, reaching
Redis and the servers only over a veth pair to a bridge (skipped where namespaces are not
allowed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from conftest import RunningSim
from runkit import ROOT, read_jsonl, write_jobs
from test_queue import collect, finish, lines_in, queue_profile, wait_for
from test_redis_gate import RedisServer

from rrcli.sim.behaviour import config_from_options

pytestmark = pytest.mark.slow

BRIDGE = f"rrq{os.getpid() % 100000}"
HOST = "10.213.0.1"  # the bridge's address: Redis and the servers listen there


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def hosts():
    """A factory of "hosts": network namespaces on a bridge of their own; all removed after."""
    made: list[str] = []
    try:
        ip("link", "add", BRIDGE, "type", "bridge")
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"network namespaces are not allowed here ({exc}): needs root and iproute2")
    try:
        ip("addr", "add", f"{HOST}/24", "dev", BRIDGE)
        ip("link", "set", BRIDGE, "up")

        def host() -> str:
            n = len(made)
            name, outside, inside = f"{BRIDGE}n{n}", f"{BRIDGE}h{n}", f"{BRIDGE}v{n}"
            ip("netns", "add", name)
            made.append(name)
            ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            ip("link", "set", outside, "master", BRIDGE, "up")
            ip("link", "set", inside, "netns", name)
            ip("-n", name, "addr", "add", f"10.213.0.{10 + n}/24", "dev", inside)
            ip("-n", name, "link", "set", inside, "up")
            ip("-n", name, "link", "set", "lo", "up")
            return name

        yield host
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, timeout=10)


def worker_on(host, tmp_path, profile, tag, *jobs):
    """`rrcli run --queue hosts` inside network namespace ``host``."""
    out, traces = tmp_path / f"r-{tag}.jsonl", tmp_path / f"t-{tag}.jsonl"
    argv = ["ip", "netns", "exec", host, sys.executable, "-m", "rrcli", "run", *map(str, jobs),
            "-p", str(profile), "-q", "--queue", "hosts", "--out", str(out),
            "--traces", str(traces)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_workers_on_three_hosts_one_lost(tmp_path, hosts):
    """Three workers, each in its own network namespace, on 400 jobs; one is killed mid-run:
    the others finish its jobs, the caps hold, one ok line per job."""
    boxes = [hosts() for _ in range(3)]
    redis = RedisServer(persist=("--appendonly", "no", "--protected-mode", "no",
                                 "--bind", f"{HOST} 127.0.0.1")).start()  # fmt: skip
    servers = [RunningSim(config_from_options(latency_ms=20, cap=cap), HOST) for cap in (3, 5)]
    try:
        url = f"redis://{HOST}:{redis.port}/0"
        pool = [(s.openai_url, cap) for s, cap in zip(servers, (3, 5), strict=True)]
        profile = queue_profile(tmp_path, pool, url)
        jobs = write_jobs(tmp_path / "jobs.jsonl", 400)
        procs = [worker_on(box, tmp_path, profile, f"w{i}", jobs) for i, box in enumerate(boxes)]
        wait_for(lambda: lines_in(tmp_path / "r-w1.jsonl") >= 20)
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait()
        finish(procs[0], procs[2])
        assert [3, 5] == [s.stats()["peak_concurrency"] for s in servers]
        done, lines = collect(tmp_path, profile, "hosts")
        assert 0 == done.returncode, done.stderr
        assert [f"j{i}" for i in range(400)] == [r["id"] for r in lines]
        assert {"ok"} == {r["status"] for r in lines}
        hosts_seen = {r["queue"]["worker"] for i in range(3) for r in read_jsonl(
            tmp_path / f"t-w{i}.jsonl") if r["event"] == "run"}  # fmt: skip
        assert 3 == len(hosts_seen)
    finally:
        for server in servers:
            server.stop()
        redis.stop()
