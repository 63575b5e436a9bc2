"""`rrcli export`: trace files arrive at a real OTLP/HTTP receiver as spans (SPEC §13).

The receiver (tests/otlp_receiver.py) decodes each POST with the official protobuf message, so
these tests see what a collector sees.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections import Counter
from pathlib import Path

from otlp_receiver import otlp_receiver  # noqa: F401  (fixture: a real OTLP/HTTP receiver)
from runkit import rrcli
from stats_tracegen import lines, run_records

from rrcli.otel.spans import JOB_SPAN, span_ids
from rrcli.records.traceschema import parse_rfc3339

START_MS = 1_790_000_000_000


def trace_with_calls(path: Path, calls: int) -> list[dict]:
    """A synthetic trace (SPEC §5, every field) holding exactly ``calls`` call records, then
    its run_end; returns the call records."""
    records = run_records("run-x", jobs=calls, start_ms=START_MS, seed=7, ended=True)
    run, *rest = list(records)
    kept = [r for r in rest if r["event"] == "call"][:calls]
    path.write_bytes(lines([run, *kept, rest[-1]]))
    return kept


def ns(ts: str) -> int:
    return round(parse_rfc3339(ts) * 1000) * 1_000_000


def expected_attributes(record: dict) -> dict:
    """The attributes a call span carries, straight from the record (null fields absent)."""
    host, _, port = record["server_address"].rpartition(":")
    operation = {"embeddings": "embeddings"}.get(record["endpoint"], "chat")
    pairs = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": record["provider"],
        "gen_ai.request.model": record["model"],
        "gen_ai.response.model": record["response_model"],
        "gen_ai.usage.input_tokens": record["input_tokens"],
        "gen_ai.usage.output_tokens": record["output_tokens"],
        "server.address": host,
        "server.port": int(port),
        "error.type": record["error_type"],
        "http.response.status_code": record["http_status"],
        "rrcli.deployment": record["deployment"],
        "rrcli.job_id": record["job_id"],
        "rrcli.attempt": record["attempt"],
        "rrcli.outcome": record["outcome"],
        "rrcli.queue_ms": record["queue_ms"],
    }
    return {k: v for k, v in pairs.items() if v is not None}


def test_export_of_a_10000_call_trace_arrives_whole_with_the_attributes(tmp_path, otlp_receiver):  # noqa: F811
    """Every one of 10,000 call records arrives as one span named `{operation} {model}` with
    the GenAI attributes and rrcli's own, its times the record's; each job has one parent span
    and its calls are its children in one trace whose id derives from run and job."""
    receiver = otlp_receiver()
    records = trace_with_calls(tmp_path / "t.traces.jsonl", 10_000)
    done = rrcli("export", tmp_path / "t.traces.jsonl", "--otlp", receiver.url, cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    spans = receiver.spans
    calls = [s for s in spans if s.name != JOB_SPAN]
    jobs = {s.attributes["rrcli.job_id"]: s for s in spans if s.name == JOB_SPAN}
    assert 10_000 == len(calls)
    assert len({r["job_id"] for r in records}) == len(jobs)
    assert f"exported {len(spans)} spans to {receiver.url}/v1/traces" in done.stderr
    by_job = itertools.groupby(calls, key=lambda s: s.attributes["rrcli.job_id"])
    assert Counter(r["job_id"] for r in records) == Counter({k: len(list(g)) for k, g in by_job})
    for record, span in zip(records, calls, strict=True):
        operation = "embeddings" if record["endpoint"] == "embeddings" else "chat"
        assert f"{operation} {record['model']}" == span.name
        wanted = expected_attributes(record)
        assert wanted == {k: span.attributes.get(k) for k in wanted}
        assert (ns(record["ts_start"]), ns(record["ts_end"])) == (span.start, span.end)
        job = jobs[record["job_id"]]
        assert (job.trace_id, job.span_id) == (span.trace_id, span.parent_span_id)
    for job_id, job in jobs.items():
        trace_id, span_id = span_ids("run-x", job_id)
        assert (f"{trace_id:032x}", f"{span_id:016x}", "") == (
            job.trace_id, job.span_id, job.parent_span_id,
        )  # fmt: skip
        mine = [r for r in records if r["job_id"] == job_id]
        first, last = min(ns(r["ts_start"]) for r in mine), max(ns(r["ts_end"]) for r in mine)
        assert (first, last) == (job.start, job.end)
    assert {"rrcli"} == {s.resource["service.name"] for s in spans}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_export_to_an_unreachable_collector_exits_1_with_the_count_not_delivered(tmp_path):
    """A collector that is not there: exit 1 and how many spans were not delivered, quickly
    (the exporter's timeout comes from OTEL_EXPORTER_OTLP_TIMEOUT), never a traceback."""
    trace_with_calls(tmp_path / "t.traces.jsonl", 50)
    url = f"http://127.0.0.1:{free_port()}"
    began = time.monotonic()
    done = rrcli(
        "export", "t.traces.jsonl", "--otlp", url, cwd=tmp_path,
        env={"OTEL_EXPORTER_OTLP_TIMEOUT": "2"},
    )  # fmt: skip
    assert 1 == done.returncode
    spans = 50 + len({r["job_id"] for r in trace_with_calls(tmp_path / "again", 50)})
    assert f"rrcli: {spans} of {spans} spans not delivered to {url}/v1/traces" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - began < 10


def test_a_bad_otlp_url_or_none_at_all_is_a_usage_error(tmp_path, otlp_receiver):  # noqa: F811
    """A URL that is not http(s), or no endpoint from the flag or the environment: exit 2,
    with what to give instead, and nothing sent."""
    receiver = otlp_receiver()
    trace_with_calls(tmp_path / "t.traces.jsonl", 5)
    for args in (["--otlp", "ftp://127.0.0.1/x"], ["--otlp", "localhost:4318"], []):
        done = rrcli("export", "t.traces.jsonl", *args, cwd=tmp_path)
        assert 2 == done.returncode, args
        assert "http://localhost:4318" in done.stderr
    assert 0 == receiver.posts


def test_export_honours_the_otel_environment(tmp_path, otlp_receiver):  # noqa: F811
    """Without --otlp the collector is OTEL_EXPORTER_OTLP_ENDPOINT (plus /v1/traces), and the
    headers of OTEL_EXPORTER_OTLP_HEADERS go with every request."""
    receiver = otlp_receiver()
    trace_with_calls(tmp_path / "t.traces.jsonl", 20)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_EXPORTER_OTLP_HEADERS": "x-team=ml"}
    done = rrcli("export", "t.traces.jsonl", cwd=tmp_path, env=env)
    assert 0 == done.returncode, done.stderr
    assert 20 == sum(1 for s in receiver.spans if s.name != JOB_SPAN)
    assert ["ml"] * receiver.posts == [h.get("x-team") for h in receiver.headers]


def test_malformed_lines_are_skipped_and_counted(tmp_path, otlp_receiver):  # noqa: F811
    """Lines that are not trace records (not JSON, a call without its times, a call that ends
    before it starts) are counted and skipped; the good ones are all sent (exit 0)."""
    receiver = otlp_receiver()
    records = trace_with_calls(tmp_path / "t.traces.jsonl", 10)
    broken = {**records[0], "ts_end": "2020-01-01T00:00:00.000Z"}
    missing = {k: v for k, v in records[1].items() if k != "ts_start"}
    extra = b"not json\n" + lines([broken, missing]) + b'{"event": "newer", "run_id": "r"}\n'
    with open(tmp_path / "t.traces.jsonl", "ab") as f:
        f.write(extra)
    done = rrcli("export", "t.traces.jsonl", "--otlp", receiver.url, cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    assert "3 malformed trace line(s) skipped" in done.stderr
    assert 10 == sum(1 for s in receiver.spans if s.name != JOB_SPAN)
