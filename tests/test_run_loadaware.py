"""Load-aware routing end to end through `rrcli run` against `rrcli sim` over loopback (issue 4):
session binding (and across --resume), same_model, reasoning feedback, rpm/tpm over a window,
adaptive caps, failover, cooldowns and the servers' own rate-limit headers.

Every test reads what a user can read: the trace file (who served which attempt, when, and how
long it waited), the results, the exit code, stderr, and the sim server's /stats."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

import orjson
import pytest
from runkit import calls, read_jsonl, rrcli, write_jobs, write_profile

EPS = 0.03  # seconds of slack for event-loop scheduling between a decision and its record


def ts(value: str) -> float:
    """Seconds since the epoch of a trace's RFC 3339 timestamp."""
    return datetime.fromisoformat(value).timestamp()


def decided_at(call: dict) -> float:
    """When the routing decision of a call began: its start minus the time it queued (queue_ms
    counts from the start of the routing decision)."""
    return ts(call["ts_start"]) - call["queue_ms"] / 1000.0


def write_sessions(path: Path, n: int, turns: int) -> Path:
    with open(path, "wb") as f:
        for i in range(n):
            line = {"id": f"s{i}", "turns": [f"turn {t} of session {i}" for t in range(turns)]}
            f.write(orjson.dumps(line) + b"\n")
    return path


def by_job(trail: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for c in trail:
        out[c["job_id"]].append(c)
    return out


def statuses(results: Path) -> Counter:
    return Counter(r["status"] for r in read_jsonl(results))


# --- session binding ------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["least_loaded", "first_available", "fastest"])
def test_new_sessions_bind_to_backends_with_room(tmp_path, sim_server, strategy):
    """A slow backend at its cap of 1 holds one long session; every session that starts while it
    is busy binds to the two others. Every turn of a session is served by one deployment, and
    every call of a fresh run says binding "new"."""
    slow, fast = sim_server(latency_ms=700), sim_server(latency_ms=10)
    backends = [
        {"id": "slow", "base_url": slow.openai_url, "max_concurrency": 1},
        {"id": "a", "base_url": fast.openai_url, "max_concurrency": 2},
        {"id": "b", "base_url": fast.openai_url, "max_concurrency": 2},
    ]
    profile = write_profile(
        tmp_path / "p.toml", backends, strategy=strategy, binding="session", seed=5
    )
    jobs = write_sessions(tmp_path / "jobs.jsonl", 20, 3)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "5", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    trail = calls(tmp_path / "jobs.traces.jsonl")
    sessions = by_job(trail)
    assert 20 == len(sessions)
    for session, mine in sessions.items():
        assert 1 == len({c["deployment"] for c in mine}), (session, mine)
        assert [0, 1, 2] == [c["turn"] for c in mine]
    assert {"new"} == {c["binding"] for c in trail}
    served = Counter(mine[0]["deployment"] for mine in sessions.values())
    assert 1 == served["slow"], served
    assert 19 == served["a"] + served["b"] and served["a"] and served["b"], served
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    for r in results:
        assert 1 == len({t["deployment"] for t in r["turns"]})


def test_session_binding_survives_resume_kept_or_rebound(tmp_path, sim_server):
    """Six sessions each have two jobs. The first run does the first job of each (--limit 6);
    a resumed run does the second: a session whose backend is still in the pool goes back there
    ("kept"); with backend c removed from the profile, c's sessions bind again ("rebound")."""
    url = sim_server().openai_url
    full = [{"id": i, "base_url": url} for i in ("a", "b", "c")]
    profile = write_profile(tmp_path / "p.toml", full, binding="session")
    smaller = write_profile(tmp_path / "small.toml", full[:2], binding="session")
    jobs = tmp_path / "jobs.jsonl"
    with open(jobs, "wb") as f:
        for part in ("x", "y"):
            for i in range(6):
                line = {"id": f"{part}{i}", "session": f"s{i}", "prompt": f"{part} {i}"}
                f.write(orjson.dumps(line) + b"\n")
    out, traces = tmp_path / "out.jsonl", tmp_path / "first.traces.jsonl"
    first = rrcli(
        "run", jobs, "-p", profile, "--limit", "6", "--concurrency", "1",
        "--out", out, "--traces", traces, cwd=tmp_path,
    )  # fmt: skip
    assert 0 == first.returncode, first.stderr
    bound = {c["session"]: c["deployment"] for c in calls(traces)}
    assert {"a", "b", "c"} == set(bound.values())
    shutil.copy(out, tmp_path / "out2.jsonl")

    kept_traces = tmp_path / "kept.traces.jsonl"
    again = rrcli(
        "run", jobs, "-p", profile, "--resume", "--out", out, "--traces", kept_traces,
        cwd=tmp_path,
    )  # fmt: skip
    assert 0 == again.returncode, again.stderr
    trail = calls(kept_traces)
    assert [f"y{i}" for i in range(6)] == sorted(c["job_id"] for c in trail)
    for c in trail:
        assert ("kept", bound[c["session"]]) == (c["binding"], c["deployment"])

    rebound_traces = tmp_path / "rebound.traces.jsonl"
    moved = rrcli(
        "run", jobs, "-p", smaller, "--resume", "--out", tmp_path / "out2.jsonl",
        "--traces", rebound_traces, cwd=tmp_path,
    )  # fmt: skip
    assert 0 == moved.returncode, moved.stderr
    trail = calls(rebound_traces)
    assert 6 == len(trail)
    for c in trail:
        if bound[c["session"]] == "c":
            assert "rebound" == c["binding"]
            assert c["deployment"] in ("a", "b")
        else:
            assert ("kept", bound[c["session"]]) == (c["binding"], c["deployment"])
    assert 2 == sum(c["binding"] == "rebound" for c in trail)


# --- same_model ---------------------------------------------------------------------------


def test_same_model_refuses_a_mixed_pool(tmp_path, sim_server):
    """same_model = true over backends serving two models: validate exits 1 and run exits 2,
    each naming the models and their backends; nothing is sent."""
    server = sim_server()
    backends = [
        {"id": "a", "base_url": server.openai_url, "model": "model-one"},
        {"id": "b", "base_url": server.openai_url, "model": "model-two"},
        {"id": "c", "base_url": server.openai_url, "model": "model-one"},
    ]
    profile = write_profile(tmp_path / "p.toml", backends, same_model=True)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    checked = rrcli("validate", profile, cwd=tmp_path)
    assert 1 == checked.returncode, checked.stdout + checked.stderr
    ran = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 2 == ran.returncode, ran.stderr
    for output in (checked.stdout + checked.stderr, ran.stderr):
        assert "same_model" in output
        assert "model-one (a, c)" in output and "model-two (b)" in output
        assert "Traceback" not in output
    assert 0 == server.stats()["requests"]


# --- reasoning feedback -------------------------------------------------------------------


@pytest.mark.parametrize("feedback", [True, False])
def test_reasoning_feedback_sends_reasoning_back_across_a_backend_switch(
    tmp_path, sim_server, feedback
):
    """Sessions alternate between two reasoning servers (round robin, binding = request). With
    reasoning_feedback every assistant turn in a history carries its reasoning_content, on the
    server that did not produce it too; without it, none ever does. Results keep it either way."""
    a, b = sim_server(), sim_server()
    backends = [
        {
            "id": name,
            "base_url": server.openai_url,
            "headers": {"x-sim-mode": "reasoning"},
            "reasoning_feedback": feedback,
        }
        for name, server in (("a", a), ("b", b))
    ]
    profile = write_profile(tmp_path / "p.toml", backends)
    jobs = write_sessions(tmp_path / "jobs.jsonl", 3, 3)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    for mine in by_job(calls(tmp_path / "jobs.traces.jsonl")).values():
        served = [c["deployment"] for c in mine]
        assert served[0] != served[1] and served[1] != served[2], served  # a switch every turn
    # turn t's history carries t assistant messages: 3 sessions x (0 + 1 + 2) over both servers
    sent = [s.stats() for s in (a, b)]
    assert 9 == sum(s["assistant_messages"] for s in sent)
    expected = [s["assistant_messages"] if feedback else 0 for s in sent]
    assert expected == [s["assistant_reasoning"] for s in sent]
    assert all(s["assistant_messages"] for s in sent)
    for r in read_jsonl(tmp_path / "jobs.results.jsonl"):
        assert all(t["reasoning_content"].startswith("sim reasoning") for t in r["turns"])


# --- rpm / tpm ----------------------------------------------------------------------------


def assert_within_budget(starts: list[tuple[float, int]], burst: float, rate: float, slack: float):
    """For every window [start_i, start_j]: the units started in it are at most the burst plus
    the rate times the window's length (plus ``slack`` units for scheduling)."""
    starts = sorted(starts)
    for i in range(len(starts)):
        used = 0
        for j in range(i, len(starts)):
            used += starts[j][1]
            window = starts[j][0] - starts[i][0]
            assert used <= burst + rate * window + slack, (i, j, used, window)


def test_rpm_paces_starts_over_any_window(tmp_path, sim_server):
    """rpm = 600: at most a burst of 10 starts at once, then one per 0.1 s — no window holds
    more than 10 + 10/s × its length; 30 jobs take about 2 s."""
    server = sim_server(latency_ms=5)
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url, "rpm": 600}]
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 30)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "8", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    starts = [(ts(c["ts_start"]), 1) for c in calls(tmp_path / "jobs.traces.jsonl")]
    assert 30 == len(starts)
    assert_within_budget(starts, burst=10, rate=10.0, slack=1)
    span = max(s for s, _ in starts) - min(s for s, _ in starts)
    assert 1.8 <= span, span  # 20 starts after the burst, 0.1 s apart


def test_tpm_paces_tokens_over_any_window(tmp_path, sim_server):
    """tpm = 12000 (200 tokens/s, a burst of 200): the tokens of the calls started in any window
    stay within 200 + 200/s × its length (one call's tokens of slack); 20 calls of 26 tokens
    (rrcli.tokens: "question N" is 2 tokens plus 4 for its message, and 20 out) take over a
    second."""
    server = sim_server(latency_ms=5, output_tokens=20)
    backend = {"id": "a", "base_url": server.openai_url, "tpm": 12000}
    backend["params"] = {"max_tokens": 20}
    profile = write_profile(tmp_path / "p.toml", [backend])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 20)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "8", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    trail = calls(tmp_path / "jobs.traces.jsonl")
    starts = [(ts(c["ts_start"]), c["input_tokens"] + c["output_tokens"]) for c in trail]
    assert_within_budget(starts, burst=200, rate=200.0, slack=30)
    span = max(s for s, _ in starts) - min(s for s, _ in starts)
    assert 1.0 <= span, span


# --- adaptive caps ------------------------------------------------------------------------


def test_adaptive_cap_finds_a_hidden_capacity(tmp_path, sim_server):
    """A server that answers 429 above 4 concurrent calls, behind a backend configured for 8
    with [gate] adaptive: the effective cap drops and regrows (logged), every job succeeds, and
    429s stay a small share of the attempts. Each 429 is one attempt in the trace (the server's
    own count), not one per job."""
    server = sim_server(latency_ms=30, cap=4)
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": server.openai_url, "max_concurrency": 8}],
        gate={"adaptive": True},
        retry={"max_retries": 6},
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 300)
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    assert {"ok": 300} == statuses(tmp_path / "jobs.results.jsonl")
    assert "rrcli.cap_decreased" in result.stderr
    assert "rrcli.cap_increased" in result.stderr
    trail = calls(tmp_path / "jobs.traces.jsonl")
    limited = sum(c["http_status"] == 429 for c in trail)
    assert server.stats()["rate_limited"] == limited
    assert 300 + limited == len(trail)
    assert limited / len(trail) < 0.05, (limited, len(trail))
    assert server.stats()["peak_concurrency"] <= 4


def test_an_adaptive_cap_a_little_too_high_keeps_its_share_of_a_pool(tmp_path, sim_server):
    """In a pool, a backend whose server takes 4 calls at once but whose cap says 8, with
    [gate] adaptive: its 429s lower the cap to just below the load that drew them and never
    cool it as a failing backend, so it serves about its right share (4 of 12 slots) with few
    429s, where without adaptive the cooldowns of its 429s cut its share. Few: the start's
    burst (8 sent where 4 fit) and the climb after it settle within the backend's first 32
    calls (timing decides how many 429s that takes); after that only the probes of the level
    that failed draw one, ever more rarely (its ~95 later calls hold at most three)."""
    hidden, other = sim_server(latency_ms=100, cap=4), sim_server(latency_ms=100)
    backends = [
        {"id": "hidden", "base_url": hidden.openai_url, "max_concurrency": 8},
        {"id": "other", "base_url": other.openai_url, "max_concurrency": 8},
    ]
    jobs = write_jobs(tmp_path / "jobs.jsonl", 360)
    shares = {}
    for adaptive in (True, False):
        profile = write_profile(tmp_path / "p.toml", backends, strategy="least_loaded",
                                gate={"adaptive": adaptive}, retry={"max_retries": 10})  # fmt: skip
        run = rrcli("run", jobs, "-p", profile, "--overwrite", cwd=tmp_path)
        assert 0 == run.returncode, run.stderr
        trail = calls(tmp_path / "jobs.traces.jsonl")
        served = [c["deployment"] for c in trail if c["outcome"] == "ok"]
        shares[adaptive] = served.count("hidden") / len(served)
        limited = sum(c["http_status"] == 429 for c in trail)
        if adaptive:
            assert "consecutive_failures" not in run.stderr
            assert limited / len(trail) < 0.05, (limited, len(trail))
            hidden_calls = sorted(
                (c for c in trail if c["deployment"] == "hidden"), key=lambda c: c["ts_start"]
            )
            probes = [i for i, c in enumerate(hidden_calls) if c["http_status"] == 429 and i >= 32]
            assert len(probes) <= 3, probes
    assert shares[True] > 0.28, shares
    assert shares[True] > shares[False], shares


# --- failover -----------------------------------------------------------------------------


@pytest.mark.parametrize("failover", [True, False])
def test_failover_routes_a_spent_job_to_a_backend_not_yet_tried(tmp_path, sim_server, failover):
    """A backend that always answers 503, with max_retries = 1: with failover every job's two
    attempts there are followed by a third on the healthy backend (attempts keep counting, each
    in the trace), and all succeed; without it (the default) the job fails and no other
    deployment appears in its trace."""
    bad, good = sim_server(), sim_server()
    top = {"retry": {"max_retries": 1, **({"failover": True} if failover else {})}}
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "bad", "base_url": bad.openai_url, "headers": {"x-sim-status": "503"}},
            {"id": "good", "base_url": good.openai_url},
        ],
        **top,
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    trail = by_job(calls(tmp_path / "jobs.traces.jsonl"))
    results = {r["id"]: r for r in read_jsonl(tmp_path / "jobs.results.jsonl")}
    tried_bad = [job for job, mine in trail.items() if mine[0]["deployment"] == "bad"]
    assert tried_bad
    if failover:
        assert 0 == result.returncode, result.stderr
        for job in tried_bad:
            steps = [(c["deployment"], c["attempt"], c["outcome"]) for c in trail[job]]
            assert [("bad", 1, "retry"), ("bad", 2, "retry"), ("good", 3, "ok")] == steps
            assert ("ok", "good", 3) == (
                results[job]["status"], results[job]["deployment"], results[job]["attempts"],
            )  # fmt: skip
    else:
        assert 1 == result.returncode, result.stderr
        for job in tried_bad:
            assert ["bad", "bad"] == [c["deployment"] for c in trail[job]]
            assert ("error", "http_503") == (results[job]["status"], results[job]["error"]["type"])


# --- cooldowns ----------------------------------------------------------------------------


def cooling_windows(trail: list[dict], backend: str) -> list[tuple[float, float]]:
    """[answer, answer + Retry-After] for each 429 the backend answered."""
    return [
        (ts(c["ts_end"]), ts(c["ts_end"]) + c["retry_after_ms"] / 1000.0)
        for c in trail
        if c["deployment"] == backend and c["http_status"] == 429
    ]


def decided_inside(trail: list[dict], backend: str, windows: list[tuple[float, float]]) -> list:
    """First attempts routed to ``backend`` while it was cooling."""
    return [
        c
        for c in trail
        if c["deployment"] == backend
        and c["attempt"] == 1
        and any(lo + EPS < decided_at(c) < hi - EPS for lo, hi in windows)
    ]


@pytest.mark.parametrize("strategy", ["least_loaded", "fastest", "first_available"])
def test_retry_after_cools_a_backend_for_load_aware_strategies(tmp_path, sim_server, strategy):
    """A backend answering some 429s with Retry-After 400 ms: the load-aware strategies route no
    new call to it until the 400 ms have passed (its retries still go there), and route to it
    again afterwards; every job ends ok."""
    hot = sim_server(latency_ms=20, rate_limit_rate=0.25, retry_after_ms=400, seed=11)
    cool = sim_server(latency_ms=20)
    backends = [
        {"id": "hot", "base_url": hot.openai_url},
        {"id": "cool", "base_url": cool.openai_url},
    ]
    profile = write_profile(
        tmp_path / "p.toml", backends, strategy=strategy, seed=2, retry={"max_retries": 8}
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 80)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "4", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    trail = calls(tmp_path / "jobs.traces.jsonl")
    windows = cooling_windows(trail, "hot")
    assert windows, "the simulator answered no 429"
    assert [] == decided_inside(trail, "hot", windows)
    after = [c for c in trail if c["deployment"] == "hot" and decided_at(c) > windows[0][1]]
    assert after, "hot never came back after its first cooldown"


def test_round_robin_stays_strict_through_a_cooldown(tmp_path, sim_server):
    """Round robin does not skip a cooling backend by default: the first attempts split exactly
    in half between the two backends, 429s with Retry-After notwithstanding."""
    hot = sim_server(latency_ms=10, rate_limit_rate=0.25, retry_after_ms=200, seed=11)
    cool = sim_server(latency_ms=10)
    backends = [
        {"id": "hot", "base_url": hot.openai_url},
        {"id": "cool", "base_url": cool.openai_url},
    ]
    profile = write_profile(tmp_path / "p.toml", backends, retry={"max_retries": 8})
    jobs = write_jobs(tmp_path / "jobs.jsonl", 40)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "4", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    trail = calls(tmp_path / "jobs.traces.jsonl")
    assert cooling_windows(trail, "hot"), "the simulator answered no 429"
    firsts = Counter(c["deployment"] for c in trail if c["attempt"] == 1)
    assert {"hot": 20, "cool": 20} == firsts
    assert decided_inside(trail, "hot", cooling_windows(trail, "hot"))


def test_consecutive_failures_cool_a_backend(tmp_path, sim_server):
    """A backend that fails every call (500, no retries) is cooled for cooldown.duration after
    each run of cooldown.consecutive_failures failures: no new call is routed to it meanwhile,
    and it is tried again after."""
    broken, healthy = sim_server(), sim_server(latency_ms=15)
    backends = [
        {"id": "broken", "base_url": broken.openai_url, "headers": {"x-sim-status": "500"}},
        {"id": "healthy", "base_url": healthy.openai_url},
    ]
    profile = write_profile(
        tmp_path / "p.toml",
        backends,
        strategy="least_loaded",
        retry={"max_retries": 0},
        cooldown={"consecutive_failures": 3, "duration": 0.5},
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 120)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "2", cwd=tmp_path)
    assert 1 == result.returncode, result.stderr
    trail = calls(tmp_path / "jobs.traces.jsonl")
    failed = sorted(
        (c for c in trail if c["deployment"] == "broken"), key=lambda c: ts(c["ts_end"])
    )
    ends = [ts(c["ts_end"]) for c in failed[2::3]]  # each third failure in a row starts one
    assert len(ends) >= 2, len(failed)
    assert [] == decided_inside(trail, "broken", [(t, t + 0.5) for t in ends])
    assert {"broken"} == {r["deployment"] for r in read_jsonl(tmp_path / "jobs.results.jsonl")
                          if r["status"] == "error"}  # fmt: skip


def test_every_backend_cooling_makes_jobs_wait_not_fail(tmp_path, sim_server):
    """Both servers answer their first request with a 429 and Retry-After (a: 300 ms, b: 500
    ms), so for a while every backend is cooling. A job routed then waits for the earliest
    recovery instead of failing: it starts on a, no earlier than a's cooldown ends; all end ok."""
    a = sim_server(latency_ms=40, retry_after_ms=300)
    b = sim_server(latency_ms=40, retry_after_ms=500)
    first_429 = {"x-sim-status": "429", "x-sim-times": "1"}
    backends = [
        {"id": "a", "base_url": a.openai_url, "headers": first_429},
        {"id": "b", "base_url": b.openai_url, "headers": first_429},
    ]
    profile = write_profile(tmp_path / "p.toml", backends, strategy="least_loaded")
    jobs = write_jobs(tmp_path / "jobs.jsonl", 8)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "3", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    assert {"ok": 8} == statuses(tmp_path / "jobs.results.jsonl")
    trail = calls(tmp_path / "jobs.traces.jsonl")
    [(a_from, a_until)] = cooling_windows(trail, "a")
    [(b_from, b_until)] = cooling_windows(trail, "b")
    all_cooling = (max(a_from, b_from), min(a_until, b_until))
    waited = [
        c
        for c in trail
        if c["attempt"] == 1 and all_cooling[0] + EPS < decided_at(c) < all_cooling[1] - EPS
    ]
    assert waited, "no job was routed while every backend was cooling"
    for c in waited:
        assert "a" == c["deployment"]
        assert a_until - EPS <= ts(c["ts_start"]) < b_until, c


# --- the servers' rate-limit headers -----------------------------------------------------


OPENAI_STATIC = json.dumps(
    {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "400ms"}
)


@pytest.mark.parametrize(
    ("provider", "headers"),
    [
        ("openai", {"x-sim-response-headers": OPENAI_STATIC}),
        ("openai", {"x-sim-ratelimit": "tokens=400"}),
        ("anthropic", {"x-sim-ratelimit": "requests=400"}),
        ("anthropic", {"x-sim-ratelimit": "tokens=400"}),
    ],
    ids=["openai-requests", "openai-tokens", "anthropic-requests", "anthropic-tokens"],
)
def test_rate_limit_headers_pause_the_backend_until_the_reset(
    tmp_path, sim_server, provider, headers
):
    """A server whose every success says a budget is spent (remaining 0) until 400 ms from now,
    in its API's own headers (OpenAI durations, Anthropic RFC 3339 times): each next call on that
    backend starts only after the reset, though the backend has free slots and jobs wait."""
    server = sim_server(latency_ms=5)
    url = server.openai_url if provider == "openai" else server.url
    backend = {"id": "a", "provider": provider, "base_url": url, "headers": headers}
    profile = write_profile(tmp_path / "p.toml", [backend])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    trail = calls(tmp_path / "jobs.traces.jsonl")
    starts = sorted(ts(c["ts_start"]) for c in trail)
    ends = sorted(ts(c["ts_end"]) for c in trail)
    gaps = [round(s - e, 3) for e, s in zip(ends, starts[1:], strict=False)]
    assert 3 == len(gaps)
    assert all(gap >= 0.4 - 0.06 for gap in gaps), gaps
    assert "rrcli.gate_paused" in result.stderr


def test_rate_limit_headers_send_load_aware_routing_elsewhere(tmp_path, sim_server):
    """While one backend's server says its requests are spent, least_loaded routes the new calls
    to the other backend instead of queuing behind the pause."""
    limited, free = sim_server(latency_ms=5), sim_server(latency_ms=5)
    backends = [
        {"id": "limited", "base_url": limited.openai_url,
         "headers": {"x-sim-ratelimit": "requests=2000"}},
        {"id": "free", "base_url": free.openai_url},
    ]  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", backends, strategy="least_loaded")
    jobs = write_jobs(tmp_path / "jobs.jsonl", 30)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    served = Counter(c["deployment"] for c in calls(tmp_path / "jobs.traces.jsonl"))
    assert {"limited": 1, "free": 29} == served
