"""`rrcli results`: the final line of each job, from results files of any format; and the
results file itself: one format per file, standard output on request."""

from __future__ import annotations

import socket

import orjson
import pytest
from runkit import read_jsonl, rrcli, write_jobs, write_profile


def dead_url() -> str:
    """An openai base_url where nothing listens (connection refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def job_id(line: dict) -> str:
    return line.get("custom_id", line.get("id"))


def ok(line: dict) -> bool:
    if "status" in line:
        return line["status"] == "ok"
    if "response" in line:
        return (line["response"] or {}).get("status_code") == 200
    return line["result"]["type"] == "succeeded"


def error_then_ok(tmp_path, live_url, fmt="rrcli", n=6):
    """A results file where every job has an error line (a dead backend), then an ok line (the
    --resume on a live one)."""
    profile = tmp_path / "p.toml"
    write_profile(profile, [{"id": "a", "base_url": dead_url()}], retry={"max_retries": 0})
    jobs = write_jobs(tmp_path / "jobs.jsonl", n)
    first = rrcli("run", jobs, "-p", profile, "--format", fmt, "-q", cwd=tmp_path)
    assert 1 == first.returncode, first.stderr
    write_profile(profile, [{"id": "a", "base_url": live_url}])
    again = rrcli("run", jobs, "-p", profile, "--format", fmt, "--resume", "-q", cwd=tmp_path)
    assert 0 == again.returncode, again.stderr
    return jobs, tmp_path / "jobs.results.jsonl"


@pytest.mark.parametrize("fmt", ["rrcli", "openai-batch", "anthropic-batch"])
def test_results_keeps_the_last_line_of_each_job(tmp_path, sim_server, fmt):
    """A file with an error line then an ok line for every job: `rrcli results --jobs` writes
    one line a job, its ok one, as written and in the jobs file's order; exit 0."""
    jobs, results = error_then_ok(tmp_path, sim_server().openai_url, fmt)
    assert 12 == len(read_jsonl(results))
    out = tmp_path / "final.jsonl"
    done = rrcli("results", results, "--jobs", jobs, "--out", out, cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    final = read_jsonl(out)
    assert [f"j{i}" for i in range(6)] == [job_id(line) for line in final]
    assert all(ok(line) for line in final)
    kept = {line for line in results.read_bytes().splitlines(keepends=True)}
    assert set(out.read_bytes().splitlines(keepends=True)) <= kept  # lines kept as written
    assert "6 jobs (6 ok, 0 error, 0 invalid)" in done.stderr


def test_status_filters_and_stdout_is_the_default(tmp_path, sim_server):
    """--status keeps the jobs whose final line has that status; without --out the lines go to
    standard output and the counts to standard error."""
    _, results = error_then_ok(tmp_path, sim_server().openai_url)
    errors = rrcli("results", results, "--status", "error", cwd=tmp_path)
    assert (0, "") == (errors.returncode, errors.stdout)
    oks = rrcli("results", results, "--status", "ok", cwd=tmp_path)
    assert 6 == len(oks.stdout.splitlines())
    assert "→ standard output" in oks.stderr


def test_jobs_without_a_line_are_named_and_exit_1(tmp_path):
    """Jobs of --jobs that have no result line are named on stderr, with the way to run them,
    and the exit status is 1; the others are written in the jobs file's order."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 5)
    assert 0 == rrcli("run", jobs, "-p", "demo", "--limit", "3", "-q", cwd=tmp_path).returncode
    done = rrcli("results", "jobs.results.jsonl", "--jobs", jobs, cwd=tmp_path)
    assert 1 == done.returncode
    assert "2 job(s) of" in done.stderr and "j3, j4" in done.stderr
    assert "--resume" in done.stderr
    assert ["j0", "j1", "j2"] == [orjson.loads(x)["id"] for x in done.stdout.splitlines()]


def test_first_seen_order_across_files_and_out_may_be_an_input(tmp_path):
    """Without --jobs, jobs come in the order first seen across the files; --out may name one
    of the inputs: it is replaced whole once the lines are written."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"id": "x", "status": "error", "error": {}}\n{"id": "y", "status": "ok"}\n')
    b.write_text('{"id": "z", "status": "invalid"}\n{"id": "x", "status": "ok"}\n')
    done = rrcli("results", a, b, "--out", a, cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    assert [("x", "ok"), ("y", "ok"), ("z", "invalid")] == [
        (r["id"], r["status"]) for r in read_jsonl(a)
    ]


def test_not_results_or_mixed_formats_are_refused(tmp_path, sim_server):
    """A trace file, or files of two formats, exit 2 with the reason; nothing is written."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2)
    assert 0 == rrcli("run", jobs, "-p", "demo", "-q", cwd=tmp_path).returncode
    trace = rrcli("results", "jobs.traces.jsonl", "--out", "x.jsonl", cwd=tmp_path)
    assert 2 == trace.returncode and "not a results file" in trace.stderr
    other = tmp_path / "batch.jsonl"
    other.write_text('{"custom_id": "j0", "result": {"type": "succeeded"}}\n')
    mixed = rrcli("results", "jobs.results.jsonl", other, "--out", "x.jsonl", cwd=tmp_path)
    assert 2 == mixed.returncode and "anthropic-batch" in mixed.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_resume_in_another_format_is_refused_and_the_file_untouched(tmp_path):
    """--resume --format openai-batch on a file of rrcli lines: exit 2 naming both formats,
    the file byte for byte as it was."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    assert 0 == rrcli("run", jobs, "-p", "demo", "--limit", "2", "-q", cwd=tmp_path).returncode
    results = tmp_path / "jobs.results.jsonl"
    before = results.read_bytes()
    again = rrcli("run", jobs, "-p", "demo", "--resume", "--format", "openai-batch", cwd=tmp_path)
    assert 2 == again.returncode
    assert "holds rrcli results, not openai-batch" in again.stderr
    assert before == results.read_bytes()


def test_out_dash_writes_results_to_stdout_and_logs_to_stderr(tmp_path):
    """--out - writes the result lines to standard output, nothing else; the log lines and the
    summary stay on standard error; no results file is made."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    done = rrcli("run", jobs, "-p", "demo", "--out", "-", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert ["ok"] * 3 == [line["status"] for line in lines]
    assert "rrcli.run_finished" in done.stderr and "3 ok" in done.stderr
    assert not (tmp_path / "jobs.results.jsonl").exists()
    assert (tmp_path / "jobs.traces.jsonl").exists()


def test_an_invalid_openai_batch_line_keeps_its_custom_id(tmp_path):
    """An OpenAI Batch line that cannot run keeps its custom_id in the output, so the output
    joins back to the input; a second line with the same id is line-N with duplicate_of."""
    good = {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": "hi"}]}}  # fmt: skip
    bad = {"custom_id": "r2", "method": "POST", "url": "/v1/chat/completions", "body": {}}
    again = {**bad, "custom_id": "r1"}
    jobs = tmp_path / "batch.jsonl"
    jobs.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in (good, bad, again)))
    done = rrcli("run", jobs, "-p", "demo", "--format", "openai-batch", cwd=tmp_path)
    assert 1 == done.returncode
    out = {line["custom_id"]: line for line in read_jsonl(tmp_path / "batch.results.jsonl")}
    assert {"r1", "r2", "line-3"} == set(out)
    assert "invalid_job" == out["r2"]["error"]["code"]
    plain = rrcli("run", jobs, "-p", "demo", "--out", "plain.jsonl", cwd=tmp_path)
    assert 1 == plain.returncode
    [duplicate] = [r for r in read_jsonl(tmp_path / "plain.jsonl") if r["id"] == "line-3"]
    assert "r1" == duplicate["duplicate_of"]
