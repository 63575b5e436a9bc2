"""Several `rrcli run` processes sharing caps and rate limits through a real redis-server."""

from __future__ import annotations

import signal
import time

import pytest
from runkit import calls, popen, read_jsonl, rrcli, write_jobs, write_profile
from test_redis_gate import RedisServer, _server, crowded  # the gate's tests' redis-server fixtures

pytestmark = pytest.mark.slow


@pytest.fixture
def redis_gate():
    yield from _server()


def shared_profile(tmp_path, servers, caps, url, **top):
    backends = [
        {"id": f"b{i}", "base_url": s.openai_url, "max_concurrency": cap}
        for i, (s, cap) in enumerate(zip(servers, caps, strict=True))
    ]
    gate = {"kind": "redis", "url": url, "lease": 2.0, **top.pop("gate", {})}
    return write_profile(tmp_path / "p.toml", backends, gate=gate, **top)


def start_shards(tmp_path, profile, jobs, n, *extra):
    return [
        popen(
            "run",
            jobs,
            "-p",
            profile,
            "-q",
            "--shard",
            f"{i}/{n}",
            "--out",
            tmp_path / f"r{i}.jsonl",
            "--traces",
            tmp_path / f"t{i}.jsonl",
            *extra,
            cwd=tmp_path,
        )
        for i in range(n)
    ]


def test_four_processes_hold_each_cap_and_use_it(tmp_path, sim_server, redis_gate):
    """Four processes on one pool with caps 2 and 3: no server ever sees more than its cap, and
    each cap is used to the full (the servers' own peak counters)."""
    servers = [sim_server(latency_ms=40, jitter_ms=10, cap=cap) for cap in (2, 3)]
    profile = shared_profile(
        tmp_path, servers, (2, 3), redis_gate.url, strategy="least_loaded", concurrency=5
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 160)
    procs = start_shards(tmp_path, profile, jobs, 4)
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert 0 == proc.returncode, err
    assert [2, 3] == [s.stats()["peak_concurrency"] for s in servers]
    assert 160 == sum(len(read_jsonl(tmp_path / f"r{i}.jsonl")) for i in range(4))


def test_a_killed_process_gives_its_slots_back_after_the_lease(tmp_path, sim_server, redis_gate):
    """A process killed with SIGKILL while holding slots: after the lease the others get the slots
    back and finish; the cap held throughout."""
    server = sim_server(latency_ms=60, cap=2)
    profile = shared_profile(tmp_path, [server], (2,), redis_gate.url, concurrency=2)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 60)
    procs = start_shards(tmp_path, profile, jobs, 3)
    time.sleep(1.5)
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait()
    for proc in procs[1:]:
        _, err = proc.communicate(timeout=120)
        assert 0 == proc.returncode, err
    assert server.stats()["peak_concurrency"] <= 2
    again = rrcli(
        "run", jobs, "-p", profile, "-q", "--shard", "0/3", "--resume",
        "--out", tmp_path / "r0.jsonl", "--traces", tmp_path / "t0.jsonl", cwd=tmp_path,
    )  # fmt: skip
    assert 0 == again.returncode, again.stderr
    done = [
        r for i in range(3) for r in read_jsonl(tmp_path / f"r{i}.jsonl") if r["status"] == "ok"
    ]
    assert 60 == len({r["id"] for r in done}) == len(done)


def test_rpm_is_shared_by_three_processes(tmp_path, sim_server, redis_gate):
    """rpm = 1200 (20 a second, burst 20) shared by three processes: over any window, the starts
    of all processes together stay within burst + rate × window."""
    server = sim_server()
    profile = shared_profile(tmp_path, [server], (8,), redis_gate.url)
    text = profile.read_text().replace("max_concurrency = 8", "max_concurrency = 8\nrpm = 1200")
    profile.write_text(text)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 90)
    for proc in start_shards(tmp_path, profile, jobs, 3):
        _, err = proc.communicate(timeout=120)
        assert 0 == proc.returncode, err
    spans = [call_span(c) for i in range(3) for c in calls(tmp_path / f"t{i}.jsonl")]
    assert 90 == len(spans)
    assert [] == crowded(spans, lambda seconds: 20 + 20 * seconds + 1)
    # paced, not all at once: the first was let go after the first asked, and each after the
    # burst 1/20 s after the one before it, the last by its start (0.01: the clocks' rounding)
    paced = max(got for _, got in spans) - min(asked for asked, _ in spans)
    assert paced >= (90 - 20) / 20 - 0.01


def call_span(call: dict) -> tuple[float, float]:
    """When a call record's call was let go by the gate, as a span (epoch seconds): after it
    began to wait (queue_ms before its start) and by its start (``ts_start``, to the ms)."""
    from datetime import datetime

    start = datetime.fromisoformat(call["ts_start"].replace("Z", "+00:00")).timestamp()
    return start - call["queue_ms"] / 1000, start + 0.001


def wait_until_calling(*traces, timeout=30.0):
    """Until every trace file has a call record: each process is past its start-up (which
    refuses an unreachable Redis) and working on the gate."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(t.exists() and b'"event":"call"' in t.read_bytes() for t in traces):
            return
        time.sleep(0.05)
    raise AssertionError("the processes never started calling")


def test_redis_restarted_mid_run_no_crash_no_cap_exceeded(tmp_path, sim_server):
    """Redis killed and started again (empty) while two processes run: no crash, the server never
    sees more than the cap, every job is accounted for."""
    redis = RedisServer().start()
    try:
        server = sim_server(latency_ms=50, cap=3)
        profile = shared_profile(tmp_path, [server], (3,), redis.url, concurrency=3)
        jobs = write_jobs(tmp_path / "jobs.jsonl", 80)
        procs = start_shards(tmp_path, profile, jobs, 2)
        wait_until_calling(tmp_path / "t0.jsonl", tmp_path / "t1.jsonl")
        redis.stop()
        time.sleep(1.0)
        redis.start()
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert 0 == proc.returncode, err
            assert "Traceback" not in err
        assert server.stats()["peak_concurrency"] <= 3
        results = [r for i in range(2) for r in read_jsonl(tmp_path / f"r{i}.jsonl")]
        assert 80 == len({r["id"] for r in results if r["status"] == "ok"})
    finally:
        redis.stop()


def test_unreachable_redis_at_start_is_exit_2_naming_the_url(tmp_path, sim_server):
    """No Redis at the gate's url: exit 2 before anything is sent, the message names the url."""
    server = sim_server()
    url = "redis://127.0.0.1:1/0"
    profile = shared_profile(tmp_path, [server], (2,), url)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 2 == result.returncode
    assert url in result.stderr and "Traceback" not in result.stderr
    assert 0 == server.stats()["requests"]


def test_a_tls_option_on_a_redis_url_is_exit_2_naming_it(tmp_path, sim_server, redis_gate):
    """A gate url whose query names a TLS option on redis:// (``?ssl_cert_reqs=required``) and
    whose password is percent-encoded: exit 2 naming the option and rediss://, no traceback,
    nothing sent, and the password in neither form."""
    server = sim_server()
    port = redis_gate.url.rsplit(":", 1)[1].split("/")[0]
    url = f"redis://user:p%40ss-word@127.0.0.1:{port}/0?ssl_cert_reqs=required"
    profile = shared_profile(tmp_path, [server], (2,), url)
    result = rrcli("run", write_jobs(tmp_path / "jobs.jsonl", 3), "-p", profile, cwd=tmp_path)
    assert 2 == result.returncode, result.stderr
    assert "ssl_cert_reqs" in result.stderr and "rediss://" in result.stderr
    assert "redis://user:***@127.0.0.1" in result.stderr and "Traceback" not in result.stderr
    assert [] == [form for form in ("p%40ss-word", "p@ss-word") if form in result.stderr]
    assert 0 == server.stats()["requests"]


def test_four_processes_share_one_budget_and_spend_no_more(tmp_path, sim_server, redis_gate):
    """Four processes on one Redis gate with one budget of $1: together they spend no more than
    it (the cost of every trace's call records), each one that was refused exits 3, and the
    budget's keys stay once the last process left (the spend is the results files')."""
    import redis
    from test_run_budget import PRICE, traces_cost, write_capped_jobs

    servers = [sim_server(latency_ms=20, output_tokens=30, seed=i) for i in range(2)]
    profile = shared_profile(tmp_path, servers, (4, 4), redis_gate.url)
    text = profile.read_text().replace(
        "max_concurrency = 4", "max_concurrency = 4\nprice = { input = 200.0, output = 1000.0 }"
    )
    profile.write_text(text)
    assert 2 == text.count(f"output = {PRICE['output']}")
    jobs = write_capped_jobs(tmp_path / "jobs.jsonl", 200)
    procs = start_shards(tmp_path, profile, jobs, 4, "--max-cost", "1")
    codes = []
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        codes.append(proc.returncode)
        assert proc.returncode in (0, 3), err
    assert 3 in codes
    spent = sum(traces_cost(tmp_path / f"t{i}.jsonl") for i in range(4))
    assert 0.5 < spent <= 1.0
    done = sum(len(read_jsonl(tmp_path / f"r{i}.jsonl")) for i in range(4))
    assert 0 < done < 200
    assert [] != redis.Redis.from_url(redis_gate.url).keys("rrcli:{budget:*")
