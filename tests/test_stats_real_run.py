"""`rrcli stats` on the trace of a real run: its numbers equal a computation done another way."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from runkit import calls, read_jsonl, rrcli, write_jobs, write_profile


def test_stats_of_a_real_run_match_an_independent_computation(tmp_path, sim_server):
    """A run with retries on two servers; `rrcli stats --json` gives, per deployment, the counts,
    tokens and latency percentiles (to 3 decimals) that numpy computes from the same trace
    lines."""
    flaky = sim_server(latency_ms=10, jitter_ms=8, error_rate=0.2, seed=5)
    steady = sim_server(latency_ms=25, jitter_ms=10)
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "flaky", "base_url": flaky.openai_url, "max_concurrency": 3},
            {"id": "steady", "base_url": steady.openai_url, "max_concurrency": 2},
        ],
        strategy="least_loaded",
        retry={"max_retries": 5},
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 60)
    run = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    # a job may use up its retries on the flaky server (exit 1): its failed calls are counted too
    assert run.returncode in (0, 1), run.stderr
    statuses = [r["status"] for r in read_jsonl(tmp_path / "jobs.results.jsonl")]
    assert 60 == len(statuses)
    traces = tmp_path / "jobs.traces.jsonl"
    result = rrcli("stats", traces, "--json", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    summary = json.loads(result.stdout)

    records = calls(traces)
    by = defaultdict(list)
    for record in records:
        by[record["deployment"]].append(record)
    assert any(r["outcome"] == "retry" for r in records), "the run had no retry to count"
    groups = {g["key"]: g for g in summary["groups"]}
    assert set(by) == set(groups)
    for deployment, mine in by.items():
        theirs = groups[deployment]
        outcomes = [r["outcome"] for r in mine]
        counted = (len(mine), *(outcomes.count(o) for o in ("ok", "retry", "error")))
        assert counted == tuple(theirs[k] for k in ("calls", "ok", "retried", "errors"))
        assert sum(r["input_tokens"] or 0 for r in mine) == theirs["input_tokens"]
        assert sum(r["output_tokens"] or 0 for r in mine) == theirs["output_tokens"]
        latencies = [r["latency_ms"] for r in mine if r["outcome"] == "ok"]
        for q in (50, 95, 99):
            assert round(float(np.percentile(latencies, q)), 3) == pytest.approx(
                theirs["latency_ms"][f"p{q}"], abs=1e-6
            )
        assert round(len(mine) / len(records), 4) == pytest.approx(theirs["share"])
    expected = {"ok": statuses.count("ok"), "error": statuses.count("error")}
    assert expected == {k: summary["jobs"][k] for k in ("ok", "error")}
    assert 0 == summary["malformed_lines"]
