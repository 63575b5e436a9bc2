"""The span thread of `run --otlp` (otel/sender.py) against a real OTLP/HTTP receiver: what it
sends, what it drops, and that its report counts both."""

from __future__ import annotations

import time

from otlp_receiver import otlp_receiver  # noqa: F401  (fixture: a real OTLP/HTTP receiver)
from stats_tracegen import run_records

from rrcli.otel.sender import LiveSender, Shipper
from rrcli.otel.spans import JOB_SPAN

START_MS = 1_790_000_000_000


def records(jobs: int) -> list[dict]:
    return list(run_records("run-s", jobs=jobs, start_ms=START_MS, seed=5))


def test_every_record_reaches_a_healthy_collector_and_the_report_says_so(otlp_receiver):  # noqa: F811
    """Records put while the thread runs all arrive (calls and one parent per job); job ends
    told by job_done let a parent go before the run ends; the report counts them as sent."""
    receiver = otlp_receiver()
    run = records(300)
    calls = [r for r in run if r["event"] == "call"]
    sender = LiveSender(Shipper(receiver.url + "/v1/traces"), "run-s", interval=0.05)
    for record in run[:-1]:
        sender.put(record)
    sender.job_done("job-0")
    deadline = time.monotonic() + 10  # a round is 0.05 s; a loaded machine may take many
    while "job-0" not in {
        s.attributes["rrcli.job_id"] for s in receiver.spans if s.name == JOB_SPAN
    }:
        assert time.monotonic() < deadline, "job-0's parent was not sent before the run's end"
        time.sleep(0.02)
    sender.put(run[-1])  # run_end: the other jobs' parents
    report = sender.close()
    spans = receiver.spans
    assert (len(calls), 300) == (
        sum(s.name != JOB_SPAN for s in spans), sum(s.name == JOB_SPAN for s in spans),
    )  # fmt: skip
    assert (len(spans), 0, None) == (report.sent, report.dropped, report.error)


def test_a_full_queue_drops_calls_and_counts_them(otlp_receiver):  # noqa: F811
    """Records beyond the queue's room are dropped at once (put never waits) and counted in
    the report with the spans that were sent: the calls turned away, and the parent span of
    each job whose every call was turned away (it is never made)."""
    receiver = otlp_receiver()
    calls = [r for r in records(100) if r["event"] == "call"]
    sender = LiveSender(Shipper(receiver.url + "/v1/traces"), "run-s", queue_max=10, interval=5)
    began = time.monotonic()
    for record in calls:
        sender.put(record)
    put_s = time.monotonic() - began
    report = sender.close()
    kept = calls[:10]
    jobs = len({r["job_id"] for r in kept})
    assert (10 + jobs, len(calls) - 10 + 100 - jobs) == (report.sent, report.dropped)
    assert len(receiver.spans) == report.sent
    assert put_s < 1.0  # a put that waited for room would wait for the first round, 5 s away


def test_a_hanging_collector_is_given_up_on_quickly_and_everything_is_counted(otlp_receiver):  # noqa: F811
    """A collector that never answers: close returns within about a second (it has taken
    nothing, so a hanging batch is not waited for) and every span counts as dropped."""
    receiver = otlp_receiver(delay=30)
    run = records(50)
    calls = [r for r in run if r["event"] == "call"]
    sender = LiveSender(Shipper(receiver.url + "/v1/traces"), "run-s", interval=0.01)
    for record in run:
        sender.put(record)
    time.sleep(0.1)
    began = time.monotonic()
    report = sender.close()
    # given up on after dead_s (0.5 s: nothing was ever taken), not after the stall_s (3 s) of
    # a collector that took something, nor the drain's 10 s, nor the collector's 30
    assert time.monotonic() - began < 3.0
    assert (0, len(calls) + 50) == (report.sent, report.dropped)
