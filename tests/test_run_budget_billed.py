"""Budgets against a server that bills what it reads and writes (tests/billing.py): whatever the
server reports, and however calls end, what it billed stays within `--max-cost`, and the run
uses the budget instead of stopping while most of it is left.
"""

from __future__ import annotations

import orjson
import pytest
from billing import GPT_4O
from runkit import calls, read_jsonl, rrcli, write_profile


def billed_profile(tmp_path, server, cap=64, **backend):
    entry = {"id": "b0", "base_url": server.openai_url, "model": "gpt-4o", "price": GPT_4O,
             "max_concurrency": cap, **backend}  # fmt: skip
    return write_profile(tmp_path / "p.toml", [entry])


def write_jobs(path, n, prompt="q", **params):
    with open(path, "wb") as f:
        for i in range(n):
            job = {"id": f"j{i}", "prompt": f"{prompt}{i}", "params": params}
            f.write(orjson.dumps(job) + b"\n")
    return path


def run_end(traces):
    (end,) = [r for r in read_jsonl(traces) if r["event"] == "run_end"]
    return end


def test_a_budget_far_above_the_spend_runs_every_job(tmp_path, billing_server):
    """2,000 short jobs, 64 in flight, each capped at 16,384 output tokens (a worst case of
    $0.16) and really costing about $0.0001, with `--max-cost 5`: every job runs (calls whose
    worst case does not fit yet wait for others to settle), exit 0, and no more was billed."""
    server = billing_server(writes=5)
    profile = billed_profile(tmp_path, server)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2000, max_tokens=16_384)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "5", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert 2000 == sum(r["status"] == "ok" for r in results)
    end = run_end(tmp_path / "jobs.traces.jsonl")
    assert server.billed() == pytest.approx(end["budget"]["spent"], abs=1e-6)
    assert 4.0 < end["budget"]["reserved_peak"] <= 5.0  # the budget was used, not fled


def test_a_binding_budget_is_spent_to_the_last_call_and_never_passed(tmp_path, billing_server):
    """Calls capped at 64 tokens and `--max-cost 0.1`: the run halts (exit 3) only once what is
    left cannot cover one more call: at least 90 % of the limit was billed, never more than it;
    the message says what was spent and what lowers a reservation, and no Ctrl-C line is shown
    since no one pressed it."""
    server = billing_server(writes=5)
    profile = billed_profile(tmp_path, server)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2000, max_tokens=64)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "0.1", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    assert 0.09 <= server.billed() <= 0.1
    assert "a smaller max_tokens lowers it" in done.stderr
    assert "Ctrl-C" not in done.stderr
    end = run_end(tmp_path / "jobs.traces.jsonl")
    assert server.billed() == pytest.approx(end["budget"]["spent"], abs=1e-6)
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert f"{2000 - len(results)} jobs not run" in done.stderr
    charged = sum(c["cost_usd"] for c in calls(tmp_path / "jobs.traces.jsonl"))
    assert charged == pytest.approx(end["budget"]["spent"], abs=1e-6)
