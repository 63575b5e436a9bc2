"""Ctrl-C, once and twice, on a real `rrcli run` process: exit 130, files whole, --resume ends
the work; on a terminal the live display says what stopping is waiting for."""

from __future__ import annotations

import signal
import time
from collections import Counter

import orjson
from runkit import Terminal, popen, read_jsonl, rrcli, write_jobs, write_profile


def wait_until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def whole_lines(path):
    """Every line of a JSONL file, asserting each is whole JSON ending in a newline."""
    raw = path.read_bytes()
    assert raw.endswith(b"\n") or not raw
    return [orjson.loads(line) for line in raw.splitlines()]


def test_second_sigint_cancels_calls_in_flight_and_exits_130_without_a_traceback(
    tmp_path, sim_server
):
    """Two SIGINTs while calls hang on a slow backend: the calls are cancelled at once, exit
    130 with the summary and the resume hint, no traceback; every result and trace line is
    whole; --resume (the backend fast again) ends with exactly one ok line per job."""
    fast, slow = sim_server(latency_ms=5), sim_server(latency_ms=60_000)
    backends = [
        {"id": "fast", "base_url": fast.openai_url, "max_concurrency": 2},
        {"id": "slow", "base_url": slow.openai_url, "max_concurrency": 2},
    ]
    profile = write_profile(tmp_path / "p.toml", backends)
    n = 100
    jobs = write_jobs(tmp_path / "jobs.jsonl", n)
    proc = popen("run", jobs, "-p", profile, cwd=tmp_path)
    wait_until(lambda: slow.stats()["requests"] >= 2)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert (130, False) == (proc.returncode, "Traceback" in stderr), stderr
    assert time.monotonic() - started < 10  # the hanging calls were cancelled, not awaited
    assert "rrcli.stopping" in stderr and "calls_in_flight=" in stderr
    assert "interrupted: run again with --resume to finish" in stderr
    first = whole_lines(tmp_path / "jobs.results.jsonl")
    traces = whole_lines(tmp_path / "jobs.traces.jsonl")
    assert ("run_end", True) == (traces[-1]["event"], traces[-1]["interrupted"])
    assert len(first) == traces[-1]["jobs"]["ok"] < n

    backends[1]["base_url"] = fast.openai_url
    write_profile(profile, backends)
    again = rrcli("run", jobs, "-p", profile, "-q", "--resume", cwd=tmp_path)
    assert 0 == again.returncode, again.stderr
    counts = Counter(r["id"] for r in read_jsonl(tmp_path / "jobs.results.jsonl"))
    assert {f"j{i}" for i in range(n)} == set(counts) and {1} == set(counts.values())


def test_the_display_says_what_stopping_waits_for_and_counts_skipped_jobs_as_done(
    tmp_path, sim_server
):
    """On a terminal: a resumed run's bar counts the jobs it skips as done; after Ctrl-C the
    display says how many calls it lets finish and how to cancel them; a second Ctrl-C exits
    130 with no traceback."""
    fast, slow = sim_server(), sim_server(latency_ms=60_000)
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": fast.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 10)
    assert 0 == rrcli("run", jobs, "-p", profile, "--limit", "4", "-q", cwd=tmp_path).returncode
    write_profile(profile, [{"id": "a", "base_url": slow.openai_url, "max_concurrency": 3}])

    terminal = Terminal("run", jobs, "-p", profile, "--resume", cwd=tmp_path)
    assert terminal.wait_for("jobs 4/10"), terminal.text
    wait_until(lambda: slow.stats()["requests"] >= 3)
    terminal.proc.send_signal(signal.SIGINT)
    stopping = "stopping: letting 3 calls finish (Ctrl-C again to cancel them)"
    assert terminal.wait_for(stopping), terminal.text
    terminal.proc.send_signal(signal.SIGINT)
    assert 130 == terminal.finish()
    assert "Traceback" not in terminal.text
    assert "run again with --resume" in terminal.text
