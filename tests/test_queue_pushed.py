"""The shared queue pushed where it can break: workers that disagree on the lease, a stale worker
that ends a job after another did, a Redis out of memory, `kill -9` between a result and its
acknowledgement, names that are no names, and what a worker says when it cannot go on. Each
through the CLI, against real redis-server processes and servers on 127.0.0.1."""

from __future__ import annotations

import os
import random
import signal
import socket
import threading
import time

import orjson
import pytest
import redis
from hostile import Canned
from runkit import popen, read_jsonl, rrcli, write_jobs, write_profile
from test_queue import collect, finish, lines_in, queue_profile, wait_for, worker
from test_redis_gate import RedisServer, _server

pytestmark = pytest.mark.slow


@pytest.fixture
def broker():
    yield from _server()


def talker(tmp_path, profile, name, tag, *jobs, env=None):
    """A worker like ``test_queue.worker`` that logs its warnings (no -q)."""
    return popen(
        "run", *jobs, "-p", profile, "--queue", name,
        "--out", tmp_path / f"r-{tag}.jsonl", "--traces", tmp_path / f"t-{tag}.jsonl",
        cwd=tmp_path, env=env,
    )  # fmt: skip


def said(text: str, status: int = 200, hold: threading.Event | None = None) -> Canned:
    """An OpenAI chat completion saying ``text`` (an error body for a status other than 200),
    answered once ``hold`` is set."""
    if status != 200:
        body = orjson.dumps({"error": {"message": text, "type": "server_error"}})
    else:
        body = orjson.dumps({
            "id": "chatcmpl-q", "model": "m",
            "choices": [{"index": 0, "message": {"content": text}, "finish_reason": "stop"}],
        })  # fmt: skip
    return Canned(status, {"content-type": "application/json"}, body, hold=hold)


def stored(url, name, key):
    return redis.Redis.from_url(url).hgetall(f"{{rrcli:q:{name}}}:{key}")


def test_the_lease_is_the_queues_whatever_a_workers_profile_says(tmp_path, sim_server, broker):
    """The queue's lease is fixed when it is loaded (20 s here): a second worker whose profile
    says 0.5 s warns that it differs and claims nothing from the first, whose calls take 2 s:
    8 jobs, 8 calls, every job ok."""
    server = sim_server(latency_ms=2000)
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    pool = [(server.openai_url, 2)]
    loader = queue_profile(tmp_path / "a", pool, broker.url, gate=False, lease=20.0)
    short = queue_profile(tmp_path / "b", pool, broker.url, gate=False, lease=0.5)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 8)
    first = worker(tmp_path, loader, "lease", "a", jobs)
    wait_for(lambda: stored(broker.url, "lease", "meta").get(b"state") == b"loaded")
    second = talker(tmp_path, short, "lease", "b")
    finish(first)
    _, err = second.communicate(timeout=120)
    assert 0 == second.returncode, err
    assert "rrcli.queue_setting_differs" in err and "queue_value=20.0" in err
    assert "profile_value=0.5" in err
    assert 8 == server.stats()["requests"]
    done, lines = collect(tmp_path, loader, "lease")
    assert (0, [f"j{i}" for i in range(8)]) == (done.returncode, [r["id"] for r in lines])
    assert {"ok"} == {r["status"] for r in lines}


@pytest.mark.parametrize(
    ("stale", "first"),
    [("error", "fresh"), ("error", "stale"), ("ok", "fresh")],
    ids=["stale-error-after-ok", "stale-error-before-ok", "stale-ok-after-ok"],
)
def test_an_ok_wins_over_an_error_and_the_first_ok_stays(
    tmp_path, hostile_server, broker, stale, first
):
    """Worker A stopped (SIGSTOP) past the lease while its call is out; worker B claims the job
    and its call answers ok; A resumes and its own call answers (an error, or another ok), before
    or after B's: `rrcli results --queue` writes B's ok line, whatever came first, counts it
    "1 ok, 0 error" and `rrcli queue` counts the job done once."""
    holds = [threading.Event(), threading.Event()]
    answers = [
        said("stale", 500 if stale == "error" else 200, holds[0]),
        said("fresh", 200, holds[1]),
    ]
    server = hostile_server(lambda r: answers[len(server.requests) - 1])
    profile = write_profile(tmp_path / "p.toml", [{"id": "b0", "base_url": server.openai_url}],
                            queue={"url": broker.url, "lease": 1.0},
                            retry={"max_retries": 0})  # fmt: skip
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    a = worker(tmp_path, profile, "twice", "a", jobs)
    try:
        wait_for(lambda: len(server.requests) == 1)
        a.send_signal(signal.SIGSTOP)
        b = worker(tmp_path, profile, "twice", "b")
        wait_for(lambda: len(server.requests) == 2)
        if first == "fresh":
            holds[1].set()
            finish(b)
        holds[0].set()
    finally:
        a.send_signal(signal.SIGCONT)
    finish(a, code=1 if stale == "error" else 0)
    holds[1].set()
    finish(b)
    done, lines = collect(tmp_path, profile, "twice")
    assert 0 == done.returncode, done.stderr
    assert [("j0", "ok", "fresh")] == [(r["id"], r["status"], r["output"]) for r in lines]
    assert "1 jobs (1 ok, 0 error" in done.stderr
    assert "1 done, 0 pending, 0 not started" in done.stderr


def test_a_stale_worker_renewing_its_jobs_never_takes_back_one_another_claimed(
    tmp_path, hostile_server, broker
):
    """Worker A stopped (SIGSTOP) past the lease while its call is out; worker B claims the job;
    A resumes and renews the jobs it held (B stopped meanwhile, for less than the lease): the job
    is still B's (a renewal keeps only what its worker still holds), and it ends once, ok."""
    hold = threading.Event()
    server = hostile_server(lambda r: said("late", 200, hold))
    profile = write_profile(tmp_path / "p.toml", [{"id": "b0", "base_url": server.openai_url}],
                            queue={"url": broker.url, "lease": 3.0},
                            retry={"max_retries": 0})  # fmt: skip
    a = worker(tmp_path, profile, "stale", "a", write_jobs(tmp_path / "jobs.jsonl", 1))
    b = None
    try:
        wait_for(lambda: len(server.requests) == 1)
        a.send_signal(signal.SIGSTOP)
        b = worker(tmp_path, profile, "stale", "b")
        wait_for(lambda: len(server.requests) == 2)
        b.send_signal(signal.SIGSTOP)  # only A renews from here on
        a.send_signal(signal.SIGCONT)
        names = {tag: f"{socket.gethostname()}-{proc.pid}" for tag, proc in (("a", a), ("b", b))}
        _beats(broker.url, f"{{rrcli:q:stale}}:w:{names['a']}", 2)  # A renewed after the first
        held = redis.Redis.from_url(broker.url).xpending_range(
            "{rrcli:q:stale}:jobs", "workers", "-", "+", 10
        )  # what `rrcli queue` counts as each worker's pending jobs
        assert [names["b"]] == [entry["consumer"].decode() for entry in held]
    finally:
        for proc in (a, b):
            if proc is not None:
                proc.send_signal(signal.SIGCONT)
        hold.set()
    finish(a, b)
    done, lines = collect(tmp_path, profile, "stale")
    assert (0, [("j0", "ok")]) == (done.returncode, [(r["id"], r["status"]) for r in lines])


def _beats(url: str, key: str, count: int) -> None:
    """Wait for ``count`` heartbeats of the worker whose heartbeat key is ``key`` (each one sets
    the key again, its time to live back to the whole lease)."""
    client = redis.Redis.from_url(url)
    last, seen, deadline = client.pttl(key), 0, time.monotonic() + 30
    while seen < count:
        assert time.monotonic() < deadline, "no heartbeat"
        time.sleep(0.01)
        now = client.pttl(key)
        if now > last + 50 or (last < 0 <= now):
            seen += 1
        last = now


def test_a_job_acknowledged_is_pending_nowhere_and_an_exited_worker_keeps_its_count(
    tmp_path, sim_server, broker
):
    """With a 10-minute lease, a worker's acknowledged jobs leave the pending list at once:
    mid-run `rrcli queue --json` counts at most the jobs in flight (and acknowledging) as
    pending, the worker exits as soon as its last job is stored, and once it is gone the
    progress shows it gone with every job it did."""
    server = sim_server(latency_ms=30)
    profile = queue_profile(tmp_path, [(server.openai_url, 2)], broker.url, gate=False,
                            lease=600.0)  # fmt: skip
    jobs = write_jobs(tmp_path / "jobs.jsonl", 60)
    proc = worker(tmp_path, profile, "acks", "a", jobs)
    wait_for(lambda: lines_in(tmp_path / "r-a.jsonl") >= 20)
    shown = orjson.loads(rrcli("queue", "acks", "-p", profile, "--json", cwd=tmp_path).stdout)
    assert shown["pending"] <= 4, shown
    _, err = proc.communicate(timeout=60)
    assert 0 == proc.returncode, err
    shown = orjson.loads(rrcli("queue", "acks", "-p", profile, "--json", cwd=tmp_path).stdout)
    assert (60, 0, 0) == (shown["done"], shown["pending"], shown["not_started"])
    assert [(False, 0, 60)] == [(w["alive"], w["pending"], w["done"]) for w in shown["workers"]]


def test_redis_out_of_memory_during_the_load_is_exit_2_and_the_load_goes_on(tmp_path, sim_server):
    """A Redis at its maxmemory (noeviction) while 1,500 jobs of 2 KB load: exit 2 naming Redis's
    memory and what to do, no traceback, nothing sent (again when run again as it is); with the
    memory raised, the same command goes on with the load and runs every job once."""
    server = sim_server()
    limited = RedisServer(persist=("--appendonly", "no", "--maxmemory", "2mb")).start()
    try:
        profile = queue_profile(tmp_path, [(server.openai_url, 8)], limited.url, gate=False)
        jobs = tmp_path / "jobs.jsonl"
        jobs.write_bytes(b"".join(
            orjson.dumps({"id": f"j{i}", "prompt": f"{i} " + "x" * 2000}) + b"\n"
            for i in range(1500)
        ))  # fmt: skip
        for _ in range(2):  # the second one meets the full Redis at its first step
            result = rrcli("run", jobs, "-p", profile, "-q", "--queue", "big", cwd=tmp_path)
            assert 2 == result.returncode, result.stderr
            assert "is out of memory" in result.stderr and "maxmemory" in result.stderr
            assert "run the same command again" in result.stderr
            assert "Traceback" not in result.stderr
        assert 0 == server.stats()["requests"]
        redis.Redis.from_url(limited.url).config_set("maxmemory", 0)
        result = rrcli("run", jobs, "-p", profile, "-q", "--queue", "big", cwd=tmp_path)
        assert 0 == result.returncode, result.stderr
        done, lines = collect(tmp_path, profile, "big")
        assert [f"j{i}" for i in range(1500)] == [r["id"] for r in lines]
        assert (0, {"ok"}) == (done.returncode, {r["status"] for r in lines})
        assert 1500 == server.stats()["requests"]
    finally:
        limited.stop()


def test_redis_out_of_memory_during_the_work_is_exit_1_and_the_out_is_whole(tmp_path, sim_server):
    """Redis reaching its maxmemory while a worker stores results: the worker stops with exit 1
    naming Redis's memory and what to do (no traceback, no hang); its --out holds every job
    stored in Redis, each line whole; with the memory raised, another worker finishes the
    queue with one ok line a job."""
    server = sim_server(latency_ms=2)
    broker = RedisServer().start()
    try:
        client = redis.Redis.from_url(broker.url)
        profile = queue_profile(tmp_path, [(server.openai_url, 8)], broker.url, gate=False)
        jobs = write_jobs(tmp_path / "jobs.jsonl", 3000)
        a = worker(tmp_path, profile, "full", "a", jobs)
        wait_for(lambda: lines_in(tmp_path / "r-a.jsonl") >= 100)
        client.config_set("maxmemory", client.info("memory")["used_memory"] + 100_000)
        _, err = a.communicate(timeout=60)
        assert 1 == a.returncode, err
        assert "is out of memory" in err and "maxmemory" in err and "Traceback" not in err
        assert "rrcli run -p PROFILE --queue full" in err
        kept = {orjson.loads(line)["id"] for line in stored(broker.url, "full", "results").values()}
        written = read_jsonl(tmp_path / "r-a.jsonl")  # every line whole, or this raises
        assert 100 <= len(kept) < 3000
        assert set() == kept - {r["id"] for r in written}
        client.config_set("maxmemory", 0)
        finish(worker(tmp_path, profile, "full", "b"))
        done, lines = collect(tmp_path, profile, "full")
        assert [f"j{i}" for i in range(3000)] == [r["id"] for r in lines]
        assert (0, {"ok"}) == (done.returncode, {r["status"] for r in lines})
    finally:
        broker.stop()


def test_a_job_acknowledged_is_in_its_workers_out_after_kill_9(tmp_path, sim_server, broker):
    """Workers SIGKILLed mid-run one after another (at a moment unrelated to their periodic
    flush), the last one finishing: every job whose result the queue stored is in some worker's
    --out (written to it before it was acknowledged), so the --out files are a whole fallback;
    the queue ends with one ok line a job."""
    server = sim_server(latency_ms=3)
    profile = queue_profile(tmp_path, [(server.openai_url, 8)], broker.url, gate=False, lease=1.0)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2000)
    rng = random.Random(23)
    for tag in "ab":
        proc = worker(tmp_path, profile, "kill", tag, jobs)
        wait_for(lambda t=tag: lines_in(tmp_path / f"r-{t}.jsonl") >= 300)
        time.sleep(rng.uniform(0.05, 0.15))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finish(worker(tmp_path, profile, "kill", "c"))
    written = {r["id"] for tag in "abc" for r in read_jsonl(tmp_path / f"r-{tag}.jsonl")}
    kept = {orjson.loads(line)["id"] for line in stored(broker.url, "kill", "results").values()}
    assert 2000 == len(kept)
    assert set() == kept - written
    done, lines = collect(tmp_path, profile, "kill")
    assert (0, {"ok"}) == (done.returncode, {r["status"] for r in lines})


def test_a_load_resumed_after_its_loader_was_killed_adds_no_line_twice(
    tmp_path, sim_server, broker
):
    """The loader SIGKILLed with some batches of 1,000 lines stored (its lock left to expire):
    the same command run again goes on after the last line stored, so the queue holds each line
    once and runs every job once."""
    server = sim_server()
    profile = queue_profile(tmp_path, [(server.openai_url, 32)], broker.url, gate=False)
    n = 20_000
    jobs = write_jobs(tmp_path / "jobs.jsonl", n)
    client = redis.Redis.from_url(broker.url)
    meta = "{rrcli:q:died}:meta"
    proc = worker(tmp_path, profile, "died", "a", jobs)
    deadline = time.monotonic() + 60
    while int(client.hget(meta, "loaded_to") or 0) < 1000 and time.monotonic() < deadline:
        time.sleep(0.001)
    client.client_pause(30_000, all=False)  # writes wait: the loader stops between batches
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    client.client_unpause()
    loaded = int(client.hget(meta, "loaded_to") or 0)
    assert 1000 <= loaded < n and b"loading" == client.hget(meta, "state")
    finish(worker(tmp_path, profile, "died", "b", jobs))
    added = client.xinfo_stream("{rrcli:q:died}:jobs")["entries-added"]  # every XADD ever
    assert (b"20000", n) == (client.hget(meta, "total"), added)
    done, lines = collect(tmp_path, profile, "died")
    assert [f"j{i}" for i in range(n)] == [r["id"] for r in lines]
    assert (0, {"ok"}) == (done.returncode, {r["status"] for r in lines})
    assert n == server.stats()["requests"]


def test_a_name_that_is_empty_or_holds_a_path_separator_is_a_usage_error(tmp_path, broker):
    """`--queue ""`, `--queue ../up` and `--queue a/b`, for run, queue and results: exit 2 naming
    the name and an example, nothing written in the folder or its parent."""
    profile = queue_profile(tmp_path, [("http://127.0.0.1:9/v1", 1)], broker.url, gate=False)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2)
    before = set(os.listdir(tmp_path)), set(os.listdir(tmp_path.parent))
    for name in ("", "../up", "a/b", "a\\b"):
        for args in (["run", jobs, "-p", profile, "--queue", name],
                     ["run", "-p", profile, "--queue", name],
                     ["queue", name, "-p", profile],
                     ["results", "--queue", name, "-p", profile]):  # fmt: skip
            result = rrcli(*args, cwd=tmp_path)
            assert 2 == result.returncode, (args, result.stderr)
            assert "--queue nightly" in result.stderr and "Traceback" not in result.stderr
    assert before == (set(os.listdir(tmp_path)), set(os.listdir(tmp_path.parent)))
    assert [] == redis.Redis.from_url(broker.url).keys("*")


def test_what_a_worker_says_when_it_stops_or_finds_the_queue_finished(tmp_path, sim_server, broker):
    """An interrupted worker names the command that goes on (not --resume, which a queue
    refuses); running a finished queue again sends nothing, exits 0 and says how to collect it
    and how to start another; `rrcli queue` and `rrcli results --queue` read Redis with the
    backends' key variable unset."""
    server = sim_server(latency_ms=100)
    backend = {"id": "b0", "base_url": server.openai_url, "max_concurrency": 2,
               "credentials": {"api_key_env": "RRCLI_QUEUE_TEST_KEY"}}  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", [backend], queue={"url": broker.url, "lease": 2.0})
    jobs = write_jobs(tmp_path / "jobs.jsonl", 40)
    key = {"RRCLI_QUEUE_TEST_KEY": "sk-test"}
    first = talker(tmp_path, profile, "said", "a", jobs, env=key)
    wait_for(lambda: lines_in(tmp_path / "r-a.jsonl") >= 4)
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=60)
    assert 130 == first.returncode, err
    assert "start a worker to finish: rrcli run -p PROFILE --queue said" in err
    assert "--resume" not in err
    finish(talker(tmp_path, profile, "said", "b", env=key))
    calls = server.stats()["requests"]
    again = talker(tmp_path, profile, "said", "c", jobs, env=key)
    _, err = again.communicate(timeout=60)
    assert 0 == again.returncode, err
    assert "queue 'said' was finished already" in err
    assert "rrcli results --queue said -p PROFILE" in err and "--queue OTHER" in err
    assert calls == server.stats()["requests"]
    assert "RRCLI_QUEUE_TEST_KEY" not in os.environ
    shown = rrcli("queue", "said", "-p", profile, "--json", cwd=tmp_path)
    assert 0 == shown.returncode, shown.stderr
    assert 40 == orjson.loads(shown.stdout)["done"]
    done, lines = collect(tmp_path, profile, "said")
    assert (0, 40) == (done.returncode, len(lines))
