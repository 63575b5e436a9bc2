"""What each attempt and each job's end are seen as: one rrcli.call event per attempt with -v, a
warning per failed job in every mode but -q, the server's request id in the results, and
session bindings forgotten when no later job can use them."""

from __future__ import annotations

import asyncio
import json

import orjson
from runkit import calls, read_jsonl, rrcli, write_jobs, write_profile

import rrcli as library

FIELDS = ("job_id", "deployment", "attempt", "outcome", "http_status", "error_type", "latency_ms")


def events(stderr: str) -> list[dict]:
    """The JSON log events of a run's standard error."""
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_verbose_logs_one_call_event_per_attempt(tmp_path, sim_server):
    """-v logs one rrcli.call debug event per HTTP attempt, with the same job, deployment,
    attempt number, outcome, status, error type and latency as its trace record: 3 jobs whose
    first 2 attempts get a 503 make 5 events."""
    server = sim_server()
    flaky = {"x-sim-status": "503", "x-sim-times": "2"}
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url, "headers": flaky}]
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", "-v", "--log-format", "json",
                   cwd=tmp_path)  # fmt: skip
    assert 0 == result.returncode, result.stderr
    logged = [e for e in events(result.stderr) if e["event"] == "rrcli.call"]
    trace = calls(tmp_path / "jobs.traces.jsonl")
    assert 5 == len(trace)
    assert [tuple(c[k] for k in FIELDS) for c in trace] == [
        tuple(e[k] for k in FIELDS) for e in logged
    ]
    assert ["retry", "retry", "ok", "ok", "ok"] == [e["outcome"] for e in logged]
    assert {"debug"} == {e["level"] for e in logged}


def test_a_failed_job_is_logged_without_verbose(tmp_path, sim_server):
    """Without -v the first failed job of an error type is one rrcli.job_failed warning naming
    the job, deployment, attempts, error type and message; the next of that type is counted,
    and the run's end gives the count (rrcli.jobs_failed); no rrcli.call event is logged."""
    server = sim_server()
    refusing = {"x-sim-status": "400", "x-sim-error-message": "no such model"}
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url, "headers": refusing}]
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", "--log-format", "json",
                   cwd=tmp_path)  # fmt: skip
    assert 1 == result.returncode, result.stderr
    logged = events(result.stderr)
    failed = [e for e in logged if e["event"] == "rrcli.job_failed"]
    assert [("j0", "a", 1, "http_400", "warning")] == [
        (e["job_id"], e["deployment"], e["attempts"], e["error_type"], e["level"]) for e in failed
    ]
    assert all("no such model" in e["message"] for e in failed)
    counted = [e for e in logged if e["event"] == "rrcli.jobs_failed"]
    assert [("http_400", 2)] == [(e["error_type"], e["jobs"]) for e in counted]
    assert [] == [e for e in logged if e["event"] == "rrcli.call"]


def test_the_servers_request_id_reaches_results_and_openai_batch_output(tmp_path, sim_server):
    """The id a real server gives each response (its x-request-id / request-id header and body
    id) is the rrcli result's request_id, after latency_ms, and openai-batch output's
    response.request_id, for OpenAI and Anthropic backends alike."""
    server = sim_server()  # its n-th answer has id chatcmpl-sim0000000n / msg_sim0000000n
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "oa", "base_url": server.openai_url},
            {"id": "an", "provider": "anthropic", "base_url": server.url},
        ],
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    for fmt, out in (("rrcli", "r.jsonl"), ("openai-batch", "b.jsonl")):
        result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", "--format", fmt,
                       "--out", out, cwd=tmp_path)  # fmt: skip
        assert 0 == result.returncode, result.stderr
    results = read_jsonl(tmp_path / "r.jsonl")
    expected = [
        "chatcmpl-sim00000001",
        "msg_sim00000002",
        "chatcmpl-sim00000003",
        "msg_sim00000004",
    ]
    assert expected == [r["request_id"] for r in results]
    keys = list(results[0])
    assert "request_id" == keys[keys.index("latency_ms") + 1]
    batch = {line["custom_id"]: line["response"] for line in read_jsonl(tmp_path / "b.jsonl")}
    assert {
        "j0": "chatcmpl-sim00000005",
        "j1": "msg_sim00000006",
        "j2": "chatcmpl-sim00000007",
        "j3": "msg_sim00000008",
    } == {key: response["request_id"] for key, response in batch.items()}
    assert (
        "chatcmpl-sim00000005" == batch["j0"]["body"]["id"]
    )  # the OpenAI-served one: its own body


def test_session_bindings_are_forgotten_when_no_later_job_can_use_them(tmp_path, sim_server):
    """With binding = "session", a job whose line names no session (its session is its own id)
    leaves no binding behind when it ends, so memory stays flat; a session named by several
    lines stays bound, and all its jobs run on one backend."""
    server = sim_server()
    path = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": server.openai_url}, {"id": "b", "base_url": server.openai_url}],
        binding="session",
    )
    lines = []
    for i in range(12):
        lines.append({"id": f"own-{i}", "prompt": f"question {i}"})
        if i % 3 == 0:
            lines.append({"id": f"shared-{i}", "session": "team", "prompt": f"and {i}"})
    lines.append({"id": "talk", "turns": ["hello", "and then?"]})
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    options = library.RunOptions(
        jobs=jobs, out=tmp_path / "r.jsonl", traces=tmp_path / "t.jsonl", concurrency=3
    )
    routers = []
    summary = asyncio.run(
        library.run(
            library.load_profile(path, environ={}),
            options,
            environ={},
            on_start=lambda _summary, router: routers.append(router),
        )
    )
    assert 17 == summary.ok
    results = {r["id"]: r for r in read_jsonl(tmp_path / "r.jsonl")}
    shared = {r["deployment"] for key, r in results.items() if key.startswith("shared-")}
    assert 1 == len(shared)
    assert {"team": shared.pop()} == routers[0].bindings
    calls = [r for r in read_jsonl(tmp_path / "t.jsonl") if r["event"] == "call"]
    assert 18 == len(calls)  # one per attempt
