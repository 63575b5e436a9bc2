"""Hostile servers through the CLI: delays and usage no server may be trusted with, and the
regressions the suite must notice (docs/reliability.md).

Each test starts a real loopback server that misbehaves on purpose (tests/hostile.py) and runs
``rrcli run`` against it as a user would; every run must end, and end in bounded time.
"""

from __future__ import annotations

import itertools
import threading
from datetime import datetime
from pathlib import Path

import orjson
import pytest
import redis
from hostile import Canned, chat, error
from runkit import calls, read_jsonl, rrcli, write_jobs, write_profile
from test_redis_gate import _server


def profile_for(tmp_path: Path, servers, retry=None, **top) -> Path:
    backends = [
        {"id": f"h{i}", "base_url": s.openai_url, **top.pop(f"b{i}", {})}
        for i, s in enumerate(servers)
    ]
    return write_profile(tmp_path / "p.toml", backends, retry=retry or {}, **top)


def first_then_ok(first):
    """An answer: ``first`` to the first request, a plain success to every later one."""
    count = itertools.count()
    lock = threading.Lock()

    def answer(_):
        with lock:
            n = next(count)
        return first if n == 0 else chat()

    return answer


def timed(*args, cwd: Path, timeout: float = 60):
    """``rrcli run JOBS ...`` and the seconds its run took by its own trace, from the ``run``
    record to ``run_end``: the process's start-up, which a loaded machine stretches, is no part
    of what a server's delay could hold."""
    result = rrcli(*args, cwd=cwd, timeout=timeout)
    jobs = cwd / args[1]
    traces = read_jsonl(jobs.with_name(jobs.name.removesuffix(".jsonl") + ".traces.jsonl"))
    begun, ended = (
        datetime.fromisoformat([r for r in traces if r["event"] == event][-1]["ts"]).timestamp()
        for event in ("run", "run_end")
    )
    return result, ended - begun


# --- 2. a server's delay is never trusted unbounded ----------------------------------------

ENDLESS_DELAYS = [
    {"retry-after": "1000000000"},
    {"retry-after": "inf"},
    {"retry-after": "1e400"},
    {"retry-after-ms": "1e12"},
    {"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"},
]


@pytest.mark.parametrize("headers", ENDLESS_DELAYS, ids=lambda h: "=".join(*h.items()))
def test_an_endless_retry_after_holds_a_backend_max_server_pause_at_most(
    tmp_path, hostile_server, headers
):
    """A 429 asking to wait a billion seconds, forever or until the year 9999: the backend's
    pause and the job's retry delay are cut to ``max_server_pause`` (1 s here), so every job
    ends ok and the run in seconds."""
    server = hostile_server(first_then_ok(error(429, headers)))
    profile = profile_for(
        tmp_path, [server], retry={"max_server_pause": 1.0}, b0={"max_concurrency": 2}
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    result, took = timed("run", jobs, "-p", profile, cwd=tmp_path, timeout=30)
    assert 0 == result.returncode, result.stderr
    assert took < 8.0
    retried = [c for c in calls(tmp_path / "jobs.traces.jsonl") if c["outcome"] == "retry"]
    assert [1000.0] == [c["backoff_ms"] for c in retried]
    assert {"ok"} == {r["status"] for r in read_jsonl(tmp_path / "jobs.results.jsonl")}


def test_max_server_pause_is_validated_against_its_bound(tmp_path, hostile_server):
    """``max_server_pause`` may lower the bound of 3600 s, not raise it: more is a profile
    error naming the limit, and nothing is sent."""
    server = hostile_server(lambda _: chat())
    profile = profile_for(tmp_path, [server], retry={"max_server_pause": 1e9})
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 2 == result.returncode
    assert "retry.max_server_pause" in result.stderr and "3600" in result.stderr
    assert [] == server.requests


@pytest.mark.parametrize("claimed", [10**12, 10**8, 2**64 - 1])
def test_claimed_usage_never_stalls_a_tpm_budget(tmp_path, hostile_server, claimed):
    """Every reply claims ``claimed`` prompt tokens for a one-line prompt, with tpm set: the
    booking is corrected by at most what such a call could cost, so ten jobs take no longer
    than the budget allows for real calls (the claim of 10^8 tokens would stall the gate for
    17 minutes per reply)."""
    server = hostile_server(lambda _: chat({"prompt_tokens": claimed, "completion_tokens": 1}))
    profile = profile_for(tmp_path, [server], b0={"tpm": 6_000_000, "max_concurrency": 1})
    jobs = write_jobs(tmp_path / "jobs.jsonl", 10)
    result, took = timed("run", jobs, "-p", profile, cwd=tmp_path, timeout=60)
    assert 0 == result.returncode, result.stderr
    assert took < 15.0
    assert 10 == len(server.requests)


@pytest.fixture
def redis_url():
    for server in _server():
        yield server.url


def pause_ttl_ms(url: str, scope: str) -> int:
    with redis.Redis.from_url(url) as client:
        return client.pttl(f"rrcli:{{{scope}}}:pause")


def test_the_pause_written_to_redis_is_bounded_and_a_stale_one_is_cut(
    tmp_path, hostile_server, redis_url
):
    """With the Redis gate, a Retry-After of a billion seconds writes a pause of at most
    ``max_server_pause`` (2 s) to Redis; and a pause of 10^12 ms left in Redis by another run
    holds a later run against a healthy server no longer than its own bound."""
    hostile = hostile_server(first_then_ok(error(429, {"retry-after": "1000000000"})))
    gate = {"kind": "redis", "url": redis_url}
    retry = {"max_server_pause": 2.0, "max_retries": 0}
    profile = profile_for(tmp_path, [hostile], retry=retry, gate=gate)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    result = rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    assert 1 == result.returncode, result.stderr  # its one attempt drew the 429
    assert 0 < pause_ttl_ms(redis_url, "h0") <= 3000
    with redis.Redis.from_url(redis_url) as client:
        now = client.time()[0]
        client.set("rrcli:{h0}:pause", f"{now + 10**9:.6f}", px=10**12)
    healthy = hostile_server(lambda _: chat())
    profile = profile_for(tmp_path, [healthy], retry=retry, gate=gate)
    result, took = timed("run", jobs, "-p", profile, "--overwrite", cwd=tmp_path, timeout=30)
    assert 0 == result.returncode, result.stderr
    assert took < 8.0
    assert pause_ttl_ms(redis_url, "h0") <= 3000


# --- 10. sums that overflow ----------------------------------------------------------------


def test_usage_beyond_any_call_is_unknown_and_resume_still_works(tmp_path, hostile_server):
    """Replies claiming 2^64 − 1 and 2^63 tokens, or negative ones, over sessions of three
    turns: every job ends ok with those counts never taken (estimated, and marked so, where
    nothing believable came; never a traceback, in any results format), the
    traces feed ``rrcli stats --json``, and ``--resume`` reads the results back."""
    usage = itertools.cycle(
        [
            {"prompt_tokens": 2**64 - 1, "completion_tokens": 2**63},
            {"prompt_tokens": -(10**12), "completion_tokens": 7},
        ]
    )
    lock = threading.Lock()

    def answer(_):
        with lock:
            return chat(next(usage))

    server = hostile_server(answer)
    profile = profile_for(tmp_path, [server])
    jobs = tmp_path / "jobs.jsonl"
    lines = [{"id": f"s{i}", "turns": ["a", "b", "c"]} for i in range(4)]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert {"ok"} == {r["status"] for r in results}
    # the absurd counts are never taken: a turn whose server gave no believable count at all
    # is estimated (and says so), a turn with a believable output count keeps it alone
    assert [] == [r for r in results if not 0 <= r["usage"]["input_tokens"] < 10_000]
    assert [] == [
        r for r in results if r["usage"]["input_tokens"] and not r["usage"]["usage_estimated"]
    ]
    assert 6 * 7 <= sum(r["usage"]["output_tokens"] for r in results) < 10_000
    traced = calls(tmp_path / "jobs.traces.jsonl")
    assert [] == [c for c in traced if c["input_tokens"] is not None and not c["usage_estimated"]]
    stats = rrcli("stats", "jobs.traces.jsonl", "--json", cwd=tmp_path)
    assert 0 == stats.returncode, stats.stderr
    again = rrcli("run", jobs, "-p", profile, "--resume", cwd=tmp_path)
    assert 0 == again.returncode, again.stderr
    assert 12 == len(server.requests)
    batch = rrcli("run", jobs, "-p", profile, "--format", "openai-batch", "--out", "b.jsonl",
                  "--traces", "b.traces.jsonl", cwd=tmp_path)  # fmt: skip
    assert 0 == batch.returncode, batch.stderr
    assert 4 == len(read_jsonl(tmp_path / "b.jsonl"))


# --- 18. regressions the suite must notice -------------------------------------------------


def peak_overlap(spans: list[tuple[float, float]]) -> int:
    """The most [start, end) spans overlapping at one instant (an end before a start)."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_a_reopened_gate_admits_every_waiting_call_up_to_its_cap(tmp_path, hostile_server):
    """A 429 with Retry-After pauses a backend of cap 4 while calls queue behind the pause; when
    it reopens, four calls are in flight again at once (not one after another), and stay so."""
    first = first_then_ok(error(429, {"retry-after": "1"}))
    server = hostile_server(lambda r: a if (a := first(r)).status != 200 else chat(delay=0.3))
    profile = profile_for(tmp_path, [server], b0={"max_concurrency": 4})
    jobs = write_jobs(tmp_path / "jobs.jsonl", 16)
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    reopened = min(start for start, _ in server.spans) + 0.9
    after = [span for span in server.spans if span[0] >= reopened]
    assert 4 == peak_overlap(after)


def test_max_retry_time_counts_from_the_first_attempt(tmp_path, hostile_server):
    """A server that answers 500 after 0.4 s, every time, with max_retries 50 and
    max_retry_time 1 s: no attempt starts more than 1 s after the first began, so the job ends
    after at most four attempts, in under two seconds."""
    server = hostile_server(lambda _: error(500, delay=0.4))
    retry = {"max_retries": 50, "max_retry_time": 1.0}
    profile = profile_for(tmp_path, [server], retry=retry)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    result, took = timed("run", jobs, "-p", profile, cwd=tmp_path)
    assert 1 == result.returncode, result.stderr
    assert len(server.requests) <= 4
    trail = calls(tmp_path / "jobs.traces.jsonl")
    assert len(server.requests) == len(trail)
    assert took < 5.0


def job_404() -> Canned:
    """A 404 for the job's own resource (a previous response this account does not have)."""
    message = "Previous response with id 'resp_x' not found."
    error = {"message": message, "type": "invalid_request_error", "param": "previous_response_id"}
    body = {"error": error}
    return Canned(404, {"content-type": "application/json"}, orjson.dumps(body))


@pytest.mark.parametrize("status", [400, 422, 404])
def test_failover_never_moves_an_error_that_is_not_transient(tmp_path, hostile_server, status):
    """With failover on, a 400, a 422 or a 404 naming the job's own resource is the job's
    answer: no other backend is sent it. (A 401, or a 404 for the model, speaks of the backend:
    tests/test_run_backend_health.py.)"""
    answer = job_404() if status == 404 else error(status)
    servers = [hostile_server(lambda _: answer) for _ in range(3)]
    profile = profile_for(tmp_path, servers, retry={"failover": True})
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 1 == result.returncode, result.stderr
    assert [1] == [len(s.requests) for s in servers if s.requests]
    (line,) = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert (f"http_{status}", 1) == (line["error"]["type"], line["attempts"])
