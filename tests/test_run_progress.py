"""What `rrcli run` shows while it runs, as a user watches it: the live display's totals from
what this run will do (--limit, --shard, --resume), "ok calls" where calls are counted, a
progress line every few seconds off a terminal, and failures of one kind collapsed into a count."""

from __future__ import annotations

import re

import orjson
import pytest
from runkit import Terminal, popen, read_jsonl, rrcli, write_jobs
from test_queue import lines_in, queue_profile, wait_for
from test_redis_gate import _server

from rrcli.engine.summary import RunSummary

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def redis_queue():
    yield from _server()


def final_screen(terminal: Terminal) -> str:
    """The terminal's text, styles and cursor moves removed, once the process exited 0/1."""
    terminal.finish()
    return ANSI.sub("", terminal.text).replace("\r", "")


def totals(screen: str) -> list[tuple[int, str]]:
    """Every ``jobs DONE/TOTAL`` head line the display drew: (done, total as drawn)."""
    return [
        (int(d.replace(",", "")), t) for d, t in re.findall(r"jobs ([\d,]+)/(~?[\d,]+)", screen)
    ]


def sim_profile(tmp_path, *, error_rate: float = 0.0, latency_ms: int = 5, cap: int = 4):
    """One in-process simulated backend, no retries."""
    path = tmp_path / "p.toml"
    path.write_text(
        'strategy = "round_robin"\n[retry]\nmax_retries = 0\n'
        f'[[backends]]\nid = "one"\nprovider = "sim"\nmodel = "m"\nmax_concurrency = {cap}\n'
        f"sim = {{ latency_ms = {latency_ms}, error_rate = {error_rate} }}\n"
    )
    return path


def test_the_display_counts_to_the_limit_not_the_file(tmp_path):
    """--limit 12 of a 200-line file, one call at a time: the display's total is 12 from its
    first frame, and it ends at 12/12; its deployment rows count "ok calls"."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 200)
    profile = sim_profile(tmp_path, latency_ms=80, cap=1)
    args = ("run", jobs, "-p", profile, "--limit", "12", "--concurrency", "1")
    screen = final_screen(Terminal(*args, cwd=tmp_path))
    drawn = totals(screen)
    assert len(drawn) >= 3 and {"12"} == {total for _, total in drawn}
    assert (12, "12") == drawn[-1]
    assert "ok calls" in screen


def test_a_shard_is_an_estimate_until_the_file_ends_then_exact(tmp_path):
    """--shard 0/2 of 200 lines: the total shows as ~100 while the file is read, then the
    shard's exact count, which the last line reaches."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 200)
    screen = final_screen(Terminal("run", jobs, "-p", "demo", "--shard", "0/2", cwd=tmp_path))
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    drawn = totals(screen)
    assert (len(results), str(len(results))) == drawn[-1]
    assert {"~100", str(len(results))} >= {total for _, total in drawn}


def test_a_resumed_run_counts_its_skipped_jobs_in_done_and_total(tmp_path):
    """--resume after 30 of 60 jobs: the display ends at 60/60 with 30 skipped."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 60)
    assert 0 == rrcli("run", jobs, "-p", "demo", "--limit", "30", cwd=tmp_path).returncode
    screen = final_screen(Terminal("run", jobs, "-p", "demo", "--resume", cwd=tmp_path))
    assert (60, "60") == totals(screen)[-1]
    assert "skipped 30" in screen


def test_off_a_terminal_a_progress_line_comes_every_few_seconds(tmp_path):
    """Piped, --progress 0.2: rrcli.progress lines on stderr with done, total, rate, ETA and
    the errors, done rising to the total the run ends at."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 150)
    result = rrcli(
        "run", jobs, "-p", "demo", "--progress", "0.2", "--log-format", "json", cwd=tmp_path
    )
    assert 0 == result.returncode, result.stderr
    events = [orjson.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    progress = [e for e in events if e["event"] == "rrcli.progress"]
    assert len(progress) >= 2
    assert {150} == {e["total"] for e in progress}
    assert all({"done", "rate_per_s", "eta_s", "error", "retries"} <= set(e) for e in progress)
    done = [e["done"] for e in progress]
    assert sorted(done) == done and done[-1] <= 150


def test_progress_zero_logs_no_progress_line(tmp_path):
    """--progress 0: no rrcli.progress line at all."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 50)
    result = rrcli("run", jobs, "-p", "demo", "--progress", "0", cwd=tmp_path)
    assert 0 == result.returncode
    assert "rrcli.progress" not in result.stderr


def test_failures_of_one_kind_collapse_into_a_count(tmp_path):
    """30 jobs failing with http_500 on a terminal: one rrcli.job_failed warning (saying the
    rest are counted), the display's count of failed jobs by type, and one rrcli.jobs_failed
    line at the end with the count; every job has its result line."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 30)
    terminal = Terminal("run", jobs, "-p", sim_profile(tmp_path, error_rate=1.0), cwd=tmp_path)
    screen = final_screen(terminal)
    assert 1 == terminal.proc.returncode
    assert 1 == screen.count("rrcli.job_failed")
    assert "further failures of this type are counted, not logged" in screen
    assert "failed jobs: 30 http_500" in screen
    assert re.search(r"rrcli\.jobs_failed\s+error_type=http_500 jobs=30", screen)
    assert 30 == len(
        [r for r in read_jsonl(tmp_path / "jobs.results.jsonl") if r["status"] == "error"]
    )


def test_verbose_logs_every_failure(tmp_path):
    """-v: every failed job has its rrcli.job_failed line."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 10)
    result = rrcli("run", jobs, "-p", sim_profile(tmp_path, error_rate=1.0), "-v", cwd=tmp_path)
    assert 10 == result.stderr.count("rrcli.job_failed")


def test_a_queue_workers_progress_is_the_queues():
    """A worker of a shared queue: done is the queue's, by every worker, and the rate is the
    queue's between the first and last look (not this worker's own), so the ETA is the
    queue's."""
    summary = RunSummary("r", total=1000, started=0.0)
    summary.ok = 10  # this worker's own jobs
    summary.queue_done(100, now=10.0)
    summary.queue_done(400, now=20.0)
    progress = summary.progress(now=20.0)
    assert (400, 1000, 30.0, 20.0) == (
        progress.done,
        progress.total,
        progress.rate,
        progress.eta_s,
    )


def test_a_queue_worker_reports_the_queues_progress(tmp_path, sim_server, redis_queue):
    """Two workers on a shared queue of 300 jobs, off a terminal, the first one a job at a
    time: its progress lines count the jobs done in the whole queue (more than its own ok jobs
    once the second worker has done some), against the queue's 300."""
    server = sim_server(latency_ms=100)
    profile = queue_profile(tmp_path, [(server.openai_url, 8)], redis_queue.url, lease=0.6)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 300)
    common = ("-p", profile, "--queue", "q", "--progress", "0.2", "--log-format", "json")
    first = popen(
        "run", jobs, *common, "--concurrency", "1", "--out", "r-a.jsonl", "--traces", "t-a.jsonl",
        cwd=tmp_path,
    )  # fmt: skip
    wait_for(lambda: (tmp_path / "r-a.jsonl").exists() and lines_in(tmp_path / "r-a.jsonl") > 0)
    second = popen("run", *common, "--out", "r-b.jsonl", "--traces", "t-b.jsonl", cwd=tmp_path)
    _, err = first.communicate(timeout=120)
    second.communicate(timeout=120)
    assert 0 == first.returncode, err
    events = [orjson.loads(line) for line in err.splitlines() if line.startswith("{")]
    progress = [e for e in events if e["event"] == "rrcli.progress"]
    assert {300} == {e["total"] for e in progress}
    assert any(e["done"] > e["ok"] for e in progress)
