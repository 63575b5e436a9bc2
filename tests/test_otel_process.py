"""The span process of `run --otlp` (otel/live.py and otel/child.py) against a real OTLP/HTTP
receiver: what a run's lines become at the collector, what a full buffer or a dead process
loses, and that the count says so."""

from __future__ import annotations

import os
import resource
import signal
import time

import orjson
from otlp_receiver import otlp_receiver  # noqa: F401  (fixture: a real OTLP/HTTP receiver)
from runkit import calls, popen, read_jsonl, write_jobs, write_profile
from stats_tracegen import run_records

from rrcli.otel.live import SpanProcess
from rrcli.otel.spans import JOB_SPAN

START_MS = 1_790_000_000_000


def lines(jobs: int) -> list[bytes]:
    records = run_records("run-p", jobs=jobs, start_ms=START_MS, seed=7)
    return [orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in records]


def waits_so_far() -> int:
    """The times this thread gave up the processor by itself (slept, polled, blocked)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw


def settled(receiver, seconds: float = 30.0) -> list:
    """The receiver's spans once no more have come for two seconds (the span process sends
    what it has every half second)."""
    deadline, count, quiet_since = time.monotonic() + seconds, -1, time.monotonic()
    while time.monotonic() < deadline:
        if count != len(receiver.spans):
            count, quiet_since = len(receiver.spans), time.monotonic()
        elif time.monotonic() - quiet_since > 2.0:
            break
        time.sleep(0.1)
    return receiver.spans


def test_every_line_becomes_a_span_and_the_report_counts_them(otlp_receiver):  # noqa: F811
    """A run's lines handed to the process arrive as one span a call and one a job, and the
    report the process returns says so."""
    receiver = otlp_receiver()
    run = lines(200)
    process = SpanProcess(receiver.url + "/v1/traces", "run-p")
    for line in run:
        process.put(line)
    process.flush()
    report = process.close()
    spans = receiver.spans
    n_calls = sum(line.startswith(b'{"event":"call"') for line in run)
    assert (n_calls, 200) == (
        sum(s.name != JOB_SPAN for s in spans), sum(s.name == JOB_SPAN for s in spans),
    )  # fmt: skip
    assert (len(spans), 0, None) == (report.sent, report.dropped, report.error)


def test_a_full_buffer_drops_calls_at_once_and_counts_them(otlp_receiver):  # noqa: F811
    """Past ``buffer_max`` bytes not yet handed over, call lines are turned away without a
    wait and counted with what the process could not send: the calls, and the parent span of
    every job whose calls were all turned away. Without a wait: putting a thousand lines, the
    thread gives up the processor by itself hardly ever (the kernel counts each sleep, poll or
    blocked write; a wait a line would be a thousand), and well within a second however loaded
    the machine (it takes 3 ms on an idle one, up to 90 at a load of 8)."""
    receiver = otlp_receiver()
    jobs = 800
    run = [line for line in lines(jobs) if line.startswith(b'{"event":"call"')]
    process = SpanProcess(receiver.url + "/v1/traces", "run-p", buffer_max=len(run[0]) * 3)
    waits, began = waits_so_far(), time.monotonic()
    for line in run:
        process.put(line)
    put_s, waits = time.monotonic() - began, waits_so_far() - waits
    for job in range(jobs):
        process.job_done(f"job-{job}")
    report = process.close()
    kept = {orjson.loads(line)["job_id"] for line in run[:3]}
    assert (3 + len(kept), len(run) - 3 + jobs - len(kept)) == (report.sent, report.dropped)
    assert len(receiver.spans) == report.sent
    assert waits < 50 and put_s < 1.0, (len(run), waits, put_s)


def test_a_span_process_that_died_counts_all_it_was_given(otlp_receiver):  # noqa: F811
    """A span process killed before the end: the close returns at once, counts every span
    handed to it as dropped, and says the process ended without a report."""
    receiver = otlp_receiver(delay=30)
    run = [line for line in lines(20) if line.startswith(b'{"event":"call"')]
    process = SpanProcess(receiver.url + "/v1/traces", "run-p")
    for line in run:
        process.put(line)
    for job in range(20):
        process.job_done(f"job-{job}")
    process.flush()
    os.kill(process.pid, signal.SIGKILL)
    began = time.monotonic()
    report = process.close()
    assert time.monotonic() - began < 2.0
    assert (0, len(run) + 20) == (report.sent, report.dropped)
    assert "the span process ended without a report (exit -9)" in report.error


def test_a_killed_run_still_delivers_a_span_for_every_call_in_its_trace(
    tmp_path,
    sim_server,
    otlp_receiver,  # noqa: F811
):
    """`run --otlp` SIGKILLed mid-run: its span process reads to the end of what the run
    handed it and sends it, so every call record in the trace file arrives as a span."""
    server, receiver = sim_server(latency_ms=20), otlp_receiver()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3000)
    run = popen("run", jobs, "-p", profile, "--otlp", receiver.url, "--concurrency", "4",
                "-q", cwd=tmp_path)  # fmt: skip
    results = tmp_path / "jobs.results.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(read_jsonl(results) if results.exists() else []) < 50:
        time.sleep(0.1)
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=30)
    records = calls(tmp_path / "jobs.traces.jsonl")
    assert len(records) >= 50
    spans = settled(receiver)
    arrived = {
        (s.attributes["rrcli.job_id"], s.attributes["rrcli.attempt"])
        for s in spans
        if s.name != JOB_SPAN
    }
    assert {(str(r["job_id"]), r["attempt"]) for r in records} <= arrived


def test_a_run_that_fails_before_its_end_leaves_no_span_process(otlp_receiver):  # noqa: F811
    """``abandon`` (what a failed run's clean-up calls) ends the process at once; after a
    normal ``close`` it does nothing."""
    receiver = otlp_receiver()
    process = SpanProcess(receiver.url + "/v1/traces", "run-p")
    began = time.monotonic()
    process.abandon()
    assert time.monotonic() - began < 1.0
    assert not os.path.exists(f"/proc/{process.pid}")
    closed = SpanProcess(receiver.url + "/v1/traces", "run-p")
    assert 0 == closed.close().dropped
    closed.abandon()
