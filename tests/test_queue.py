"""The shared work queue (SPEC §14): `rrcli run --queue` worker processes on one real
redis-server, `rrcli results --queue` and `rrcli queue` through the CLI."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import orjson
import pytest
import redis
from hostile import chat
from runkit import popen, read_jsonl, rrcli, write_jobs, write_profile
from test_redis_gate import RedisServer, _server

pytestmark = pytest.mark.slow


@pytest.fixture
def redis_queue():
    yield from _server()


def queue_profile(tmp_path, urls_caps, url, *, gate=True, **queue):
    """A profile whose backends (base_url, cap) share their caps through Redis at ``url`` and
    whose queue lives there too (a 2 s lease unless given)."""
    backends = [
        {"id": f"b{i}", "base_url": base, "max_concurrency": cap}
        for i, (base, cap) in enumerate(urls_caps)
    ]
    top = {"queue": {"lease": 2.0, **queue}, "strategy": "least_loaded"}
    if gate:
        top["gate"] = {"kind": "redis", "url": url, "lease": 2.0}
    else:
        top["queue"]["url"] = url
    return write_profile(tmp_path / "p.toml", backends, **top)


def worker(tmp_path, profile, name, tag, *jobs):
    """One `rrcli run --queue` process (loading ``jobs`` first when given); its outputs are
    r-TAG.jsonl and t-TAG.jsonl."""
    return popen(
        "run", *jobs, "-p", profile, "-q", "--queue", name,
        "--out", tmp_path / f"r-{tag}.jsonl", "--traces", tmp_path / f"t-{tag}.jsonl",
        cwd=tmp_path,
    )  # fmt: skip


def wait_for(check, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def lines_in(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def finish(*procs, code=0):
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert code == proc.returncode, err
        assert "Traceback" not in err


def collect(tmp_path, profile, name):
    """`rrcli results --queue NAME`: its outcome and the lines it wrote."""
    out = tmp_path / "all.results.jsonl"
    done = rrcli("results", "--queue", name, "-p", profile, "--out", out, cwd=tmp_path)
    return done, read_jsonl(out) if out.exists() else []


def test_three_workers_one_killed_every_job_once(tmp_path, sim_server, redis_queue):
    """Three workers (all started with the jobs file: it is loaded once) on 3,000 jobs, one
    SIGKILLed mid-run and never restarted, one more joining late without the file: the late one
    takes work, the killed one's jobs are claimed after the lease, the caps hold across them all,
    and `rrcli results --queue` writes exactly one ok line per job in the file's order."""
    caps = (4, 6)
    servers = [sim_server(latency_ms=10, jitter_ms=3, cap=cap) for cap in caps]
    pool = [(s.openai_url, cap) for s, cap in zip(servers, caps, strict=True)]
    profile = queue_profile(tmp_path, pool, redis_queue.url)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3000)
    a, b, c = (worker(tmp_path, profile, "big", tag, jobs) for tag in "abc")
    wait_for(lambda: lines_in(tmp_path / "r-b.jsonl") >= 50)
    b.send_signal(signal.SIGKILL)
    b.wait()
    late = worker(tmp_path, profile, "big", "late")
    finish(a, c, late)
    assert lines_in(tmp_path / "r-late.jsonl") > 0
    assert list(caps) == [s.stats()["peak_concurrency"] for s in servers]
    progress = rrcli("queue", "big", "-p", profile, "--json", cwd=tmp_path)
    assert 0 == progress.returncode, progress.stderr
    shown = orjson.loads(progress.stdout)
    assert (3000, 3000, 0, 0) == (
        shown["jobs"],
        shown["done"],
        shown["pending"],
        shown["not_started"],
    )
    assert 4 == len(shown["workers"])
    done, lines = collect(tmp_path, profile, "big")
    assert 0 == done.returncode, done.stderr
    assert [f"j{i}" for i in range(3000)] == [r["id"] for r in lines]
    assert {"ok"} == {r["status"] for r in lines}
    assert "3,000 done, 0 pending, 0 not started" in done.stderr


def test_a_job_that_kills_its_workers_ends_as_an_error(tmp_path, hostile_server, redis_queue):
    """A job whose call never ends, its worker killed each time (twice: max_deliveries = 2),
    once the other jobs are done: the next worker to claim it ends it as an error naming
    max_deliveries; the others are ok."""
    hold = threading.Event()
    server = hostile_server(lambda r: chat(hold=hold if b"poison" in r.body else None))
    profile = queue_profile(tmp_path, [(server.openai_url, 4)], redis_queue.url, gate=False,
                            lease=1.0, max_deliveries=2)  # fmt: skip
    jobs = tmp_path / "jobs.jsonl"
    lines = [{"id": f"j{i}", "prompt": "poison" if i == 5 else f"q{i}"} for i in range(10)]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    stored = redis.Redis.from_url(redis_queue.url)
    try:
        for delivery in (1, 2):
            proc = worker(tmp_path, profile, "bad", f"w{delivery}", *([jobs] * (delivery == 1)))
            # killed once the others are done: a job held by a killed worker counts a delivery
            wait_for(lambda n=delivery: sum(b"poison" in r.body for r in server.requests) == n
                     and stored.hlen("{rrcli:q:bad}:results") == 9)  # fmt: skip
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        finish(worker(tmp_path, profile, "bad", "last"), code=1)
    finally:
        hold.set()
    done, results = collect(tmp_path, profile, "bad")
    assert 0 == done.returncode, done.stderr
    assert [f"j{i}" for i in range(10)] == [r["id"] for r in results]
    poison = results[5]
    assert ("error", "max_deliveries") == (poison["status"], poison["error"]["type"])
    assert "max_deliveries = 2" in poison["error"]["message"]
    assert 9 == sum(r["status"] == "ok" for r in results)
    assert 2 == sum(b"poison" in r.body for r in server.requests)


def test_redis_restarted_with_aof_mid_run_loses_nothing(tmp_path, sim_server):
    """Redis killed and started again from its append-only file while two workers run: they
    wait, reconnect and finish; every job has exactly one ok line."""
    aof = ("--appendonly", "yes", "--appendfsync", "always", "--dir", str(tmp_path))
    broker = RedisServer(persist=aof).start()
    try:
        server = sim_server(latency_ms=20)
        profile = queue_profile(tmp_path, [(server.openai_url, 8)], broker.url, gate=False)
        jobs = write_jobs(tmp_path / "jobs.jsonl", 400)
        procs = [worker(tmp_path, profile, "aof", tag, jobs) for tag in "ab"]
        wait_for(lambda: lines_in(tmp_path / "r-a.jsonl") >= 50)
        broker.stop()
        time.sleep(0.5)
        broker.start()
        finish(*procs)
        done, lines = collect(tmp_path, profile, "aof")
        assert 0 == done.returncode, done.stderr
        assert [f"j{i}" for i in range(400)] == [r["id"] for r in lines]
        assert {"ok"} == {r["status"] for r in lines}
    finally:
        broker.stop()


def test_bad_input_is_exit_2_with_what_to_do(tmp_path, sim_server, redis_queue):
    """An unreachable Redis (its url named, the password masked), a NAME that is not a queue,
    another jobs file under a used NAME, --queue with --shard or --resume: exit 2, nothing sent,
    the message says what to do instead."""
    server = sim_server()
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    gone = queue_profile(tmp_path, [(server.openai_url, 2)], "redis://:sekret@127.0.0.1:1/0",
                         gate=False)  # fmt: skip
    result = rrcli("run", jobs, "-p", gone, "--queue", "q", cwd=tmp_path)
    assert 2 == result.returncode
    assert "redis://:***@127.0.0.1:1/0" in result.stderr and "sekret" not in result.stderr
    profile = queue_profile(tmp_path, [(server.openai_url, 2)], redis_queue.url, gate=False)
    result = rrcli("run", "-p", profile, "--queue", "nosuch", cwd=tmp_path)
    assert 2 == result.returncode
    assert "'nosuch' is not a queue" in result.stderr and "--queue nosuch" in result.stderr
    assert 2 == rrcli("queue", "nosuch", "-p", profile, cwd=tmp_path).returncode
    assert 0 == rrcli("run", jobs, "-p", profile, "-q", "--queue", "used", cwd=tmp_path).returncode
    other = write_jobs(tmp_path / "other.jsonl", 4)
    result = rrcli("run", other, "-p", profile, "--queue", "used", cwd=tmp_path)
    assert 2 == result.returncode and "holds another jobs file" in result.stderr
    for flag in (["--shard", "0/2"], ["--resume"]):
        result = rrcli("run", jobs, "-p", profile, "--queue", "used", *flag, cwd=tmp_path)
        assert 2 == result.returncode
        assert f"--queue and {flag[0]} do not go together" in result.stderr
    assert 3 == server.stats()["requests"]


def test_a_sessions_backend_is_kept_across_workers(tmp_path, sim_server, redis_queue):
    """binding = "session": the later line of each session, taken by either of two workers long
    after its first line ended, goes to the backend its first line went to (kept in Redis)."""
    servers = [sim_server(latency_ms=40) for _ in range(3)]
    pool = [(s.openai_url, 1) for s in servers]
    profile = queue_profile(tmp_path, pool, redis_queue.url, gate=False)
    text = profile.read_text().replace('strategy = "least_loaded"', 'binding = "session"')
    profile.write_text('strategy = "round_robin"\n' + text)
    sessions = [f"s{i}" for i in range(8)]
    lines = [{"id": f"{s}-a", "session": s, "prompt": "hello"} for s in sessions]
    lines += [{"id": f"f{i}", "prompt": "filler"} for i in range(24)]
    lines += [{"id": f"{s}-b", "session": s, "prompt": "again"} for s in sessions]
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    procs = [worker(tmp_path, profile, "sessions", tag, jobs) for tag in "ab"]
    finish(*procs)
    where = {r["id"]: (tag, r["deployment"]) for tag in "ab"
             for r in read_jsonl(tmp_path / f"r-{tag}.jsonl")}  # fmt: skip
    assert [where[f"{s}-a"][1] for s in sessions] == [where[f"{s}-b"][1] for s in sessions]
    assert any(where[f"{s}-a"][0] != where[f"{s}-b"][0] for s in sessions)


def test_redis_restarted_empty_mid_run_stops_the_workers_saying_so(tmp_path, sim_server):
    """Redis without persistence restarted mid-run (the queue gone): the worker waits for it,
    then stops with exit 1 saying the queue vanished; its --out keeps every result it wrote."""
    broker = RedisServer().start()
    try:
        server = sim_server(latency_ms=20)
        profile = queue_profile(tmp_path, [(server.openai_url, 4)], broker.url, gate=False)
        jobs = write_jobs(tmp_path / "jobs.jsonl", 400)
        proc = worker(tmp_path, profile, "gone", "a", jobs)
        wait_for(lambda: lines_in(tmp_path / "r-a.jsonl") >= 20)
        broker.stop()
        broker.start()
        _, err = proc.communicate(timeout=60)
        assert 1 == proc.returncode
        assert "queue 'gone' vanished from Redis" in err and "Traceback" not in err
        written = read_jsonl(tmp_path / "r-a.jsonl")
        assert 20 <= len(written) < 400 and {"ok"} == {r["status"] for r in written}
    finally:
        broker.stop()
