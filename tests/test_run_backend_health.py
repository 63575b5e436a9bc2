"""A dead backend leaves the pool (SPEC §15), through the CLI against real servers.

A backend whose answer says it can serve no call (a key refused, an account out of quota, a
model the deployment does not have) is taken out of the pool at its first such answer: its jobs
go to the healthy backends, the trace says so, the warning names what to check. With no healthy
backend left the run stops in seconds and leaves the jobs it never finished to ``--resume``.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from runkit import Terminal, calls, read_jsonl, rrcli, write_jobs, write_profile
from test_run_interrupt import wait_until

GOOD_KEY = "sk-the-good-key-0123"
REVOKED_KEY = "sk-revoked-key-4567"
KEY_VAR = "RR_TEST_KEY_C"
CAP = 2

# the dead backend "c" of each fault: the sim server's options and the backend's own settings
FAULTS = {
    "revoked_key": (
        {"api_keys": (GOOD_KEY,)},
        {"credentials": {"api_key_env": KEY_VAR}},
        "http_401",
        KEY_VAR,
    ),
    "out_of_quota": (
        {},
        {"headers": {"x-sim-status": "429", "x-sim-error-code": "insufficient_quota"}},
        "insufficient_quota",
        "quota",
    ),
    "model_not_found": (
        {},
        {
            "model": "gpt-nowhere",
            "headers": {
                "x-sim-status": "404",
                "x-sim-error-code": "model_not_found",
                "x-sim-error-message": "The model `gpt-nowhere` does not exist",
            },
        },
        "http_404",
        "gpt-nowhere",
    ),
}


def records(traces: Path, event: str) -> list[dict]:
    return [r for r in read_jsonl(traces) if r["event"] == event]


@pytest.mark.parametrize(("strategy", "failover"), [("least_loaded", False), ("round_robin", True)])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_dead_backend_leaves_the_pool_and_every_job_ends_ok(
    tmp_path, sim_server, fault, strategy, failover
):
    """A pool of three where one backend is dead (its key revoked, its account out of quota,
    its model missing), with or without ``failover``: every job ends ok, exit 0, and the dead
    backend is sent at most twice its cap of calls (counted at its server) although it answers
    at once and looks the least loaded. The trace has one ``backend`` record for it, the jobs
    that met it were routed again (their failed attempt traced ``retry``, their attempts
    counting on), and even with ``-q`` the warning names it and what to check, never the key
    itself."""
    options, settings, reason, hint = FAULTS[fault]
    healthy = [sim_server(latency_ms=20) for _ in range(2)]
    dead = sim_server(**options)
    backends = [
        {"id": f"ok{i}", "base_url": s.openai_url, "max_concurrency": CAP}
        for i, s in enumerate(healthy)
    ]
    backends.append({"id": "c", "base_url": dead.openai_url, "max_concurrency": CAP, **settings})
    retry = {"failover": failover}
    profile = write_profile(tmp_path / "p.toml", backends, strategy=strategy, retry=retry)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 60)
    env = {KEY_VAR: REVOKED_KEY}
    result = rrcli("run", jobs, "-p", profile, "-q", "--concurrency", "8", cwd=tmp_path, env=env)

    assert 0 == result.returncode, result.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert {f"j{i}": 1 for i in range(60)} == Counter(r["id"] for r in results)
    assert {"ok"} == {r["status"] for r in results}
    assert {"ok0", "ok1"} >= {r["deployment"] for r in results}
    sent = dead.stats()["requests"]
    assert 1 <= sent <= 2 * CAP
    (down,) = records(tmp_path / "jobs.traces.jsonl", "backend")
    assert ("c", "down", reason) == (down["deployment"], down["state"], down["reason"])
    assert hint in down["message"]
    trail = calls(tmp_path / "jobs.traces.jsonl")
    met = [c for c in trail if c["deployment"] == "c"]
    assert sent == len(met)
    assert {"retry"} == {c["outcome"] for c in met}
    moved = {c["job_id"] for c in met}
    assert {2} <= {r["attempts"] for r in results if r["id"] in moved}
    warning = [line for line in result.stderr.splitlines() if "backend_down" in line]
    assert 1 == len(warning), result.stderr
    assert "c" in warning[0] and hint in warning[0]
    assert REVOKED_KEY not in result.stderr


def test_sessions_bound_to_a_dead_backend_move_with_their_turns(tmp_path, sim_server):
    """With ``binding = "session"``, sessions bound to a backend whose key is revoked, and the
    turns waiting for it, move to a healthy backend: every session ends ok with all its turns,
    and the dead backend is sent at most twice its cap."""
    healthy, dead = sim_server(latency_ms=10), sim_server(api_keys=(GOOD_KEY,))
    backends = [
        {"id": "ok", "base_url": healthy.openai_url, "max_concurrency": CAP},
        {"id": "c", "base_url": dead.openai_url, "max_concurrency": CAP,
         "credentials": {"api_key_env": KEY_VAR}},
    ]  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", backends, binding="session")
    lines = [f'{{"id": "s{i}", "turns": ["one", "two", "three"]}}\n' for i in range(12)]
    (tmp_path / "jobs.jsonl").write_text("".join(lines))
    env = {KEY_VAR: REVOKED_KEY}
    result = rrcli("run", "jobs.jsonl", "-p", profile, "-q", cwd=tmp_path, env=env)

    assert 0 == result.returncode, result.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert {f"s{i}": ("ok", "ok") for i in range(12)} == {
        r["id"]: (r["status"], r["deployment"]) for r in results
    }
    assert dead.stats()["requests"] <= 2 * CAP


def test_every_backend_dead_halts_in_seconds_and_resume_finishes(tmp_path, sim_server):
    """Every key revoked: the run stops dispatching at once and exits 1 within seconds, having
    sent at most each backend's cap of calls; no job has a result line (none finished), and
    the message names each backend with its reason and says to --resume (even with -q). With
    the key fixed, ``--resume`` ends with exactly one ok line per job."""
    servers = [sim_server(api_keys=(GOOD_KEY,), latency_ms=20) for _ in range(3)]
    backends = [
        {"id": f"b{i}", "base_url": s.openai_url, "max_concurrency": CAP,
         "credentials": {"api_key_env": KEY_VAR}}
        for i, s in enumerate(servers)
    ]  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", backends)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 300)
    started = time.monotonic()
    result = rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path, env={KEY_VAR: REVOKED_KEY})
    took = time.monotonic() - started

    assert 1 == result.returncode, result.stderr
    assert took < 10.0
    sent = [s.stats()["requests"] for s in servers]
    assert sum(sent) <= 3 * CAP, sent
    assert [] == read_jsonl(tmp_path / "jobs.results.jsonl")
    down = records(tmp_path / "jobs.traces.jsonl", "backend")
    assert {("b0", "http_401"), ("b1", "http_401"), ("b2", "http_401")} == {
        (r["deployment"], r["reason"]) for r in down
    }
    message = [line for line in result.stderr.splitlines() if "no healthy backend" in line]
    assert 1 == len(message), result.stderr
    for name in ("b0: http_401", "b1: http_401", "b2: http_401", KEY_VAR, "--resume"):
        assert name in message[0]
    assert REVOKED_KEY not in result.stderr

    again = rrcli("run", jobs, "-p", profile, "-q", "--resume", cwd=tmp_path,
                  env={KEY_VAR: GOOD_KEY})  # fmt: skip
    assert 0 == again.returncode, again.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert {f"j{i}": 1 for i in range(300)} == Counter(r["id"] for r in results)
    assert {"ok"} == {r["status"] for r in results}


def test_a_404_for_a_missing_previous_response_keeps_the_backend(tmp_path, sim_server):
    """A 404 that names the job's own resource (``previous_response_id`` not found) is that
    job's error: the backend stays in the pool and takes the next jobs; no ``backend`` record,
    no warning, exit 1 for the one failed job."""
    server = sim_server()
    missing = {
        "x-sim-status": "404",
        "x-sim-times": "1",
        "x-sim-error-code": "previous_response_not_found",
        "x-sim-error-message": "Previous response with id 'resp_gone' not found.",
    }
    backends = [{"id": "r", "base_url": server.openai_url, "endpoints": ["responses"],
                 "headers": missing}]  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", backends)
    follow = '{"id": "f", "endpoint": "responses", "input": "and then?", '
    follow += '"params": {"previous_response_id": "resp_gone"}}\n'
    plain = "".join(f'{{"id": "p{i}", "endpoint": "responses", "input": "hi {i}"}}\n'
                    for i in range(3))  # fmt: skip
    (tmp_path / "jobs.jsonl").write_text(follow + plain)
    result = rrcli("run", "jobs.jsonl", "-p", profile, "--concurrency", "1", cwd=tmp_path)

    assert 1 == result.returncode, result.stderr
    statuses = {r["id"]: r["status"] for r in read_jsonl(tmp_path / "jobs.results.jsonl")}
    assert {"f": "error", "p0": "ok", "p1": "ok", "p2": "ok"} == statuses
    assert [] == records(tmp_path / "jobs.traces.jsonl", "backend")
    assert "backend_down" not in result.stderr


def test_the_live_display_marks_a_dead_backend_down(tmp_path, sim_server):
    """On a terminal, the row of a backend that left the pool says ``down`` while the run goes
    on with the others."""
    slow, dead = sim_server(latency_ms=60_000), sim_server(api_keys=(GOOD_KEY,))
    backends = [
        {"id": "slow", "base_url": slow.openai_url, "max_concurrency": CAP},
        {"id": "dead", "base_url": dead.openai_url, "max_concurrency": CAP,
         "credentials": {"api_key_env": KEY_VAR}},
    ]  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", backends)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 10)
    terminal = Terminal("run", jobs, "-p", profile, cwd=tmp_path, env={KEY_VAR: REVOKED_KEY})
    row = re.compile(r"dead\s+0 / 2\s+0\s+\d+\s+\d+\s+down")
    wait_until(lambda: row.search(terminal.text) is not None or terminal.proc.poll() is not None)
    assert row.search(terminal.text), terminal.text
    terminal.proc.send_signal(signal.SIGINT)
    assert terminal.wait_for("stopping: letting"), terminal.text
    terminal.proc.send_signal(signal.SIGINT)
    assert 130 == terminal.finish()
