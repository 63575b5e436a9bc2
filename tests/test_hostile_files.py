"""Hostile local files through the CLI: two runs on one results file, outputs that are inputs,
jobs that come from a pipe or never end (docs/reliability.md).

Every run talks to a real loopback server (tests/hostile.py) that counts what it was sent, so a
refusal is seen to happen before anything is sent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from hostile import chat
from runkit import ROOT, popen, read_jsonl, rrcli, write_jobs, write_profile

from rrcli.records.jobs import MAX_LINE_BYTES
from rrcli.running.runner import DRAIN_TIMEOUT

# A stop with no call in flight ends the run at the loop's next look, a quarter of a second on; a
# loaded machine stretches that to a few seconds. A run that waited for its input would never end,
# one that waited out its drain would take DRAIN_TIMEOUT.
STOPS_WITHIN = DRAIN_TIMEOUT / 3


def profile_for(tmp_path: Path, server, **backend) -> Path:
    backends = [{"id": "h", "base_url": server.openai_url, **backend}]
    return write_profile(tmp_path / "p.toml", backends)


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not come true in time")
        time.sleep(0.02)


def bytes_read(pid: int) -> int:
    """What process ``pid`` has read so far, files and pipes (Linux's ``/proc/PID/io``)."""
    (line,) = [ln for ln in Path(f"/proc/{pid}/io").read_text().splitlines() if "rchar" in ln]
    return int(line.split()[1])


def stopped_after(traces: Path, signalled: float) -> tuple[dict, float]:
    """The run's ``run_end`` record and the seconds from ``signalled`` (epoch) to it, by the
    run's own clock: the process's exit, which a loaded machine stretches, is no part of it."""
    (end,) = [r for r in read_jsonl(traces) if r["event"] == "run_end"]
    return end, datetime.fromisoformat(end["ts"]).timestamp() - signalled


def ended_within(proc: subprocess.Popen, seconds: float) -> bool:
    """Whether ``proc`` ended within ``seconds`` by itself (it is killed if not)."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        return False
    return True


# --- two runs on one results file ----------------------------------------------------------


@pytest.mark.parametrize(
    ("second", "what"),
    [
        (("--resume",), "results"),
        (("--overwrite",), "results"),
        (("--out", "other.jsonl"), "traces"),
    ],
)
def test_a_second_run_on_a_held_file_exits_2_naming_its_pid(tmp_path, hostile_server, second, what):
    """While one run writes jobs.results.jsonl and jobs.traces.jsonl, a second run on either
    file (a resume, an overwrite, or another results file with the same traces) exits 2 naming
    the first run's pid, and sends nothing; the first run ends with every job exactly once."""
    held = threading.Event()  # the first run's first call is answered once the second ended
    server = hostile_server(lambda _: chat(hold=held))
    profile = profile_for(tmp_path, server, max_concurrency=1)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 6)
    first = popen("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    wait_for(lambda: len(server.requests) >= 1)
    late = rrcli("run", jobs, "-p", profile, *second, cwd=tmp_path)
    sent_meanwhile = len(server.requests)
    held.set()
    _, stderr = first.communicate(timeout=60)
    assert 0 == first.returncode, stderr
    assert 2 == late.returncode, late.stderr
    assert f"pid {first.pid}" in late.stderr and what in late.stderr
    assert (1, 6) == (sent_meanwhile, len(server.requests))
    ids = Counter(r["id"] for r in read_jsonl(tmp_path / "jobs.results.jsonl"))
    assert {f"j{i}": 1 for i in range(6)} == dict(ids)


def test_a_killed_run_leaves_no_lock(tmp_path, hostile_server):
    """The lock dies with its process: after SIGKILL, --resume runs the rest at once."""
    server = hostile_server(lambda _: chat(delay=0.2))
    profile = profile_for(tmp_path, server, max_concurrency=1)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 20)
    first = popen("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    wait_for(lambda: len(server.requests) >= 2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    again = rrcli("run", jobs, "-p", profile, "--resume", "--concurrency", "8", cwd=tmp_path)
    assert 0 == again.returncode, again.stderr
    ids = [r["id"] for r in read_jsonl(tmp_path / "jobs.results.jsonl") if r["status"] == "ok"]
    assert sorted(f"j{i}" for i in range(20)) == sorted(ids)


# --- outputs never overwrite inputs --------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("--out", "jobs.jsonl", "--overwrite"),
        ("--traces", "jobs.jsonl"),
        ("--out", "link.jsonl", "--overwrite"),
        ("--out", "same.jsonl", "--traces", "./same.jsonl"),
        ("--out", "jobs.jsonl", "--resume"),
    ],
)
def test_an_output_that_is_an_input_or_the_other_output_exits_2(tmp_path, hostile_server, args):
    """An output that is the jobs file (by name, or a hard link to it) or the other output is
    refused with exit 2 before anything is opened for writing: the jobs file keeps every byte
    and the server is sent nothing."""
    server = hostile_server(lambda _: chat())
    profile = profile_for(tmp_path, server)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    os.link(jobs, tmp_path / "link.jsonl")
    before = jobs.read_bytes()
    result = rrcli("run", "jobs.jsonl", "-p", profile, *args, cwd=tmp_path)
    assert 2 == result.returncode, result.stderr
    assert "give each its own" in result.stderr or "the jobs file itself" in result.stderr
    assert before == jobs.read_bytes()
    assert [] == server.requests
    assert not (tmp_path / "same.jsonl").exists()


def test_jobs_on_standard_input_redirected_from_the_results_file_exit_2(tmp_path, hostile_server):
    """``rrcli run - --out jobs.jsonl --overwrite < jobs.jsonl``: standard input is that file."""
    server = hostile_server(lambda _: chat())
    profile = profile_for(tmp_path, server)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    before = jobs.read_bytes()
    with open(jobs, "rb") as stdin:
        result = subprocess.run(
            [sys.executable, "-m", "rrcli", "run", "-", "-p", str(profile), "--out", "jobs.jsonl",
             "--overwrite"],
            cwd=tmp_path, stdin=stdin, capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
    assert 2 == result.returncode, result.stderr
    assert before == jobs.read_bytes()
    assert [] == server.requests


# --- jobs from a pipe ----------------------------------------------------------------------


def run_piped(tmp_path: Path, argv: list[str]) -> subprocess.Popen:
    """``rrcli`` with its standard input a pipe the test writes."""
    return subprocess.Popen(
        [sys.executable, "-m", "rrcli", *argv],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.parametrize("name", ["/dev/stdin", "-"])
def test_jobs_from_a_pipe_all_run(tmp_path, hostile_server, name):
    """``cat jobs.jsonl | rrcli run /dev/stdin`` (or ``-``) runs every job: nothing is spent
    counting lines of a pipe."""
    server = hostile_server(lambda _: chat())
    profile = profile_for(tmp_path, server)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 100)

    proc = run_piped(tmp_path, ["run", name, "-p", str(profile), "--out", "r.jsonl"])
    _, stderr = proc.communicate(jobs.read_bytes(), timeout=60)
    assert 0 == proc.returncode, stderr.decode()
    assert 100 == len(read_jsonl(tmp_path / "r.jsonl"))
    assert 100 == len(server.requests)


def test_a_slow_pipe_never_holds_calls_in_flight(tmp_path, hostile_server):
    """Jobs trickling in from a pipe: a call in flight ends while the next line is still
    awaited, and a job written later still runs; Ctrl-C while the pipe is silent (and still
    open) ends the run at once: exit 130, with every started job's result written and its
    trace's run_end, interrupted, within seconds of the signal."""
    server = hostile_server(lambda _: chat(delay=0.2))
    profile = profile_for(tmp_path, server)
    proc = run_piped(tmp_path, ["run", "-", "-p", str(profile), "--out", "r.jsonl"])
    proc.stdin.write(b'{"id": "a", "prompt": "first"}\n')
    proc.stdin.flush()
    wait_for(lambda: (tmp_path / "r.jsonl").exists() and (tmp_path / "r.jsonl").stat().st_size)
    proc.stdin.write(b'{"id": "b", "prompt": "second"}\n')
    proc.stdin.flush()
    wait_for(lambda: len(read_jsonl(tmp_path / "r.jsonl")) == 2)
    signalled = time.time()
    proc.send_signal(signal.SIGINT)
    by_itself = ended_within(proc, 30)  # standard input stays open while it ends
    _, stderr = proc.communicate(timeout=30)
    assert by_itself and 130 == proc.returncode, stderr.decode()
    end, stopped_s = stopped_after(tmp_path / "stdin.traces.jsonl", signalled)
    assert (True, 2) == (end["interrupted"], end["jobs"]["ok"])
    assert stopped_s < STOPS_WITHIN
    assert ["a", "b"] == [r["id"] for r in read_jsonl(tmp_path / "r.jsonl")]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_endless_input_obeys_signals(tmp_path, hostile_server, sig):
    """``rrcli run /dev/zero`` (one line that never ends), signalled once it has read past the
    longest line a job may have: exit 130, its trace's run_end, interrupted with no job, within
    seconds of SIGINT or SIGTERM, and nothing sent."""
    server = hostile_server(lambda _: chat())
    profile = profile_for(tmp_path, server)
    proc = popen("run", "/dev/zero", "-p", profile, "--out", "r.jsonl", cwd=tmp_path)
    wait_for(lambda: bytes_read(proc.pid) > MAX_LINE_BYTES)  # in the line: signals are the run's
    signalled = time.time()
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    assert 130 == proc.returncode, stderr
    end, stopped_s = stopped_after(tmp_path / "zero.traces.jsonl", signalled)
    assert (True, 0) == (end["interrupted"], sum(end["jobs"].values()))
    assert stopped_s < STOPS_WITHIN
    assert [] == server.requests
