"""Interrupted runs: killed at any moment, resumed, nothing lost and nothing twice."""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter

from runkit import popen, read_jsonl, rrcli, write_jobs, write_profile


def ok_counts(path):
    return Counter(r["id"] for r in read_jsonl(path) if r["status"] == "ok")


def test_sigkill_at_random_moments_then_resume_gives_exactly_one_ok_per_job(tmp_path, sim_server):
    """Three runs, each killed with SIGKILL at a random moment (sometimes more than once), then
    resumed to the end: every job has exactly one ok line, none is lost."""
    server = sim_server(latency_ms=8, jitter_ms=8)
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": f"b{i}", "base_url": server.openai_url, "max_concurrency": 4} for i in range(3)],
    )
    rng = random.Random(20261129)
    n = 300
    for trial in range(3):
        jobs = write_jobs(tmp_path / f"jobs{trial}.jsonl", n)
        out = tmp_path / f"jobs{trial}.results.jsonl"
        first = True
        for _ in range(2):  # kill up to twice
            args = ["run", jobs, "-p", profile, "-q"] + ([] if first else ["--resume"])
            proc = popen(*args, cwd=tmp_path)
            time.sleep(rng.uniform(0.4, 1.6))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            first = False
        final = rrcli("run", jobs, "-p", profile, "-q", "--resume", cwd=tmp_path)
        assert 0 == final.returncode, final.stderr
        counts = ok_counts(out)
        assert {f"j{i}" for i in range(n)} == set(counts)
        assert {1} == set(counts.values())


def test_sigint_exits_130_with_consistent_files_and_resume_finishes(tmp_path, sim_server):
    """Ctrl-C: dispatch stops, calls in flight finish, exit 130; every line written is whole and
    the trace says the run was interrupted; --resume runs only what is left."""
    server = sim_server(latency_ms=30)
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url, "max_concurrency": 4}]
    )
    n = 400
    jobs = write_jobs(tmp_path / "jobs.jsonl", n)
    proc = popen("run", jobs, "-p", profile, cwd=tmp_path)
    results = tmp_path / "jobs.results.jsonl"
    # Ctrl-C once results are on disk: the run is past its start-up (its handler is in place)
    # and has seconds of jobs left (400 of 30 ms, 4 at a time), however loaded the machine is
    deadline = time.monotonic() + 60
    while not (results.exists() and results.read_bytes().count(b"\n") >= 4):
        assert proc.poll() is None and time.monotonic() < deadline, "no results came"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert 130 == proc.returncode, stderr
    first = read_jsonl(results)  # every line parses: none torn
    assert 0 < len(first) < n
    traces = read_jsonl(tmp_path / "jobs.traces.jsonl")
    assert {"event": "run_end", "interrupted": True} == {
        k: traces[-1][k] for k in ("event", "interrupted")
    }
    assert len(first) == traces[-1]["jobs"]["ok"]
    again = rrcli("run", jobs, "-p", profile, "-q", "--resume", cwd=tmp_path)
    assert 0 == again.returncode, again.stderr
    counts = ok_counts(tmp_path / "jobs.results.jsonl")
    assert n == len(counts) and {1} == set(counts.values())
    ends = [r for r in read_jsonl(tmp_path / "jobs.traces.jsonl") if r["event"] == "run_end"]
    assert len(first) == ends[-1]["jobs"]["skipped"]


def test_limit_counts_the_jobs_resume_skips(tmp_path, sim_server):
    """``--limit N`` selects the first N jobs of the file whether or not ``--resume`` skips
    them: after a run of the first 4, a resumed run with ``--limit 6`` sends jobs 5 and 6 only,
    and a resumed run with ``--limit 4`` sends nothing."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 10)
    assert 0 == rrcli("run", jobs, "-p", profile, "--limit", "4", "-q", cwd=tmp_path).returncode
    server.reset()
    again = rrcli("run", jobs, "-p", profile, "--resume", "--limit", "4", "-q", cwd=tmp_path)
    assert 0 == again.returncode, again.stderr
    assert 0 == server.stats()["requests"]
    more = rrcli("run", jobs, "-p", profile, "--resume", "--limit", "6", "-q", cwd=tmp_path)
    assert 0 == more.returncode, more.stderr
    assert 2 == server.stats()["requests"]
    assert {f"j{i}": 1 for i in range(6)} == dict(ok_counts(tmp_path / "jobs.results.jsonl"))


def _whole_lines(path):
    """The complete lines of a file another process is writing, decoded."""
    data = path.read_bytes() if path.exists() else b""
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines()]


def test_a_result_on_disk_always_has_its_calls_in_the_traces(tmp_path, sim_server):
    """Long answers fill the results' buffer long before the traces' (a result line of about
    12 KB, a call record under 1 KB): whenever the results file names a finished job, the traces
    file already holds its calls, so a kill at any moment keeps the record of every call whose
    result was kept."""
    server = sim_server(output_tokens=2000)
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 400)
    proc = popen("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    looks, finished = 0, set()
    while proc.poll() is None or looks == 0:
        finished = {r["id"] for r in _whole_lines(tmp_path / "jobs.results.jsonl")}
        traced = {r.get("job_id") for r in _whole_lines(tmp_path / "jobs.traces.jsonl")}
        assert finished <= traced, sorted(finished - traced)[:5]
        looks += 1
    assert 0 == proc.wait(), proc.stderr.read()
    assert 400 == len({r["id"] for r in _whole_lines(tmp_path / "jobs.results.jsonl")})
