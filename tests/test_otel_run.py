"""`rrcli run --otlp`: spans sent as the run goes, to a real OTLP/HTTP receiver, never in the
run's way (SPEC §13)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime

import orjson
from otlp_receiver import otlp_receiver  # noqa: F401  (fixture: a real OTLP/HTTP receiver)
from runkit import ROOT, calls, read_jsonl, rrcli, write_jobs, write_profile

from rrcli.otel.spans import JOB_SPAN


def span_view(span) -> tuple:
    """What a collector shows of a span, the per-process resource id aside."""
    return (span.name, span.trace_id, span.span_id, span.parent_span_id, span.kind,
            span.start, span.end, span.status, tuple(sorted(span.attributes.items())))  # fmt: skip


def log_events(stderr: str) -> list[dict]:
    return [orjson.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_run_otlp_sends_one_span_per_call_under_its_jobs_span(tmp_path, sim_server, otlp_receiver):  # noqa: F811
    """Each call record of the run (retries included) arrives as one span, the calls of a job
    in one trace under one parent span per job; exporting the trace file afterwards sends the
    very same spans (ids, times, attributes), so live and export agree."""
    server, live, later = sim_server(error_rate=0.3, seed=3), otlp_receiver(), otlp_receiver()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 60)
    done = rrcli(
        "run", jobs, "-p", profile, "--otlp", live.url, "--concurrency", "8",
        "--log-format", "json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    records = calls(tmp_path / "jobs.traces.jsonl")
    assert any(r["outcome"] == "retry" for r in records)
    spans = live.spans
    call_spans = [s for s in spans if s.name != JOB_SPAN]
    job_spans = {s.span_id: s for s in spans if s.name == JOB_SPAN}
    assert len(records) == len(call_spans)
    assert Counter(r["job_id"] for r in records) == Counter(
        s.attributes["rrcli.job_id"] for s in call_spans
    )
    assert 60 == len(job_spans)
    for span in call_spans:
        parent = job_spans[span.parent_span_id]
        assert (parent.trace_id, parent.attributes["rrcli.job_id"]) == (
            span.trace_id, span.attributes["rrcli.job_id"],
        )  # fmt: skip
    [sent] = [e for e in log_events(done.stderr) if e["event"] == "rrcli.otlp_sent"]
    assert len(spans) == sent["sent"]
    exported = rrcli("export", "jobs.traces.jsonl", "--otlp", later.url, cwd=tmp_path)
    assert 0 == exported.returncode, exported.stderr
    assert sorted(map(span_view, spans)) == sorted(map(span_view, later.spans))


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def timed_run(
    tmp_path, name: str, profile, *otlp: str
) -> tuple[float, subprocess.CompletedProcess]:
    """The run of 300 jobs and its seconds from its ``run`` record to the process's exit: the
    start-up before it, which a loaded machine stretches by seconds, is no part of them."""
    jobs = write_jobs(tmp_path / f"{name}.jsonl", 300)
    done = rrcli(
        "run", jobs, "-p", profile, "--concurrency", "4", "--log-format", "json", *otlp,
        cwd=tmp_path,
    )  # fmt: skip
    ended = time.time()
    (run,) = [r for r in read_jsonl(tmp_path / f"{name}.traces.jsonl") if r["event"] == "run"]
    return ended - datetime.fromisoformat(run["ts"]).timestamp(), done


def test_a_dead_or_hanging_collector_neither_slows_nor_fails_the_run(
    tmp_path,
    sim_server,
    otlp_receiver,  # noqa: F811
):
    """A collector on a closed port, or one that holds every request for a minute: the run
    takes about as long as without --otlp (from its run record, past the start-up; within 3 s,
    the span process's own start-up on a loaded machine, where a run that waited on the
    collector takes 5 s and more), every job is ok, and the spans it could not deliver are counted
    in one warning at the end."""
    server = sim_server(latency_ms=15)
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    baseline, plain = timed_run(tmp_path, "plain", profile)
    assert 0 == plain.returncode, plain.stderr
    hanging = otlp_receiver(delay=60)
    for name, url in (("closed", closed_port()), ("hanging", hanging.url)):
        took, done = timed_run(tmp_path, name, profile, "--otlp", url)
        assert 0 == done.returncode, done.stderr
        assert ["ok"] * 300 == [r["status"] for r in read_jsonl(tmp_path / f"{name}.results.jsonl")]
        assert took < baseline + 3.0, (name, took, baseline)
        [warning] = [e for e in log_events(done.stderr) if e["event"] == "rrcli.otlp_dropped"]
        call_records = len(calls(tmp_path / f"{name}.traces.jsonl"))
        assert ("warning", call_records + 300, 0) == (
            warning["level"], warning["dropped"], warning["sent"],
        )  # fmt: skip


def test_a_bad_otlp_url_is_a_usage_error_before_anything_is_sent(tmp_path, sim_server):
    """`run --otlp` with a URL that is not http(s): exit 2, no request reaches the backend."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    done = rrcli("run", jobs, "-p", profile, "--otlp", "udp://127.0.0.1:4318", cwd=tmp_path)
    assert 2 == done.returncode
    assert "expected an http:// or https:// URL" in done.stderr
    assert 0 == server.stats()["requests"]


def test_a_run_without_otlp_never_imports_opentelemetry(tmp_path):
    """OpenTelemetry is loaded only when asked for: a run of the demo pool without --otlp
    leaves it unimported."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    code = (
        "import sys; from click.testing import CliRunner; from rrcli.cli import main; "
        f"r = CliRunner().invoke(main, ['run', {str(jobs)!r}, '-p', 'demo', '-q']); "
        "print(r.exit_code, any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    ).stdout.split()  # fmt: skip
    assert ["0", "False"] == out


def test_otlp_without_a_url_takes_the_environments_even_with_no_trace_file(
    tmp_path,
    sim_server,
    otlp_receiver,  # noqa: F811
):
    """`--otlp` alone sends to OTEL_EXPORTER_OTLP_ENDPOINT with OTEL_EXPORTER_OTLP_HEADERS; a
    --prompt run, which writes no trace file, still sends its call's span and its job's."""
    server, receiver = sim_server(), otlp_receiver()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_EXPORTER_OTLP_HEADERS": "x-k=v"}
    done = rrcli("run", "--prompt", "hi", "-p", profile, "--otlp", cwd=tmp_path, env=env)
    assert 0 == done.returncode, done.stderr
    assert [] == list(tmp_path.glob("*.traces.jsonl"))
    assert [("chat sim", "prompt-1"), (JOB_SPAN, "prompt-1")] == [
        (s.name, s.attributes["rrcli.job_id"]) for s in receiver.spans
    ]
    assert {"v"} == {h["x-k"] for h in receiver.headers}
