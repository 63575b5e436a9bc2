"""Prices as providers charge them: input read from a provider's prompt cache at its
`cached_input` price, input written to it at its `cache_write` price (from the profile, or from
genai-prices), in each call record's `cost_usd` and in what a budget counts and reserves.
"""

from __future__ import annotations

import orjson
import pytest
from runkit import calls, read_jsonl, rrcli, write_profile

CLAUDE = {"input": 3.0, "output": 15.0, "cached_input": 0.3, "cache_write": 3.75}


def write_lines(path, lines):
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def test_cached_input_is_charged_at_the_cached_price(tmp_path, sim_server):
    """A server with a prefix cache answering jobs that share a long prefix: each call record's
    `cost_usd` is its uncached input at the input price, its cached input (as the server
    reported it) at `cached_input`, and its output at the output price."""
    server = sim_server(prefix_cache_tokens=8192, output_tokens=4)
    price = {"input": 2.5, "output": 10.0, "cached_input": 1.25}
    entry = {"id": "b0", "base_url": server.openai_url, "price": price, "max_concurrency": 1}
    profile = write_profile(tmp_path / "p.toml", [entry])
    shared = "the same long instructions for every job. " * 40
    lines = [{"id": f"j{i}", "prompt": f"{shared}question {i}"} for i in range(6)]
    jobs = write_lines(tmp_path / "jobs.jsonl", lines)
    done = rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    records = calls(tmp_path / "jobs.traces.jsonl")
    assert 5 == sum(c["cached_input_tokens"] > 0 for c in records)  # all but the first
    for c in records:
        cached = c["cached_input_tokens"]
        usd = ((c["input_tokens"] - cached) * 2.5 + cached * 1.25 + c["output_tokens"] * 10) / 1e6
        assert usd == pytest.approx(c["cost_usd"], abs=1e-9)


def claude_profile(tmp_path, server, price=CLAUDE):
    entry = {"id": "c", "provider": "anthropic", "base_url": server.url,
             "model": "claude-sonnet-4-5", "price": price, "max_concurrency": 16}  # fmt: skip
    return write_profile(tmp_path / "p.toml", [entry])


def test_cache_reads_and_writes_are_charged_as_the_provider_bills_them(tmp_path, billing_server):
    """An Anthropic server caching the system text every job shares: the calls that write it
    are charged at `cache_write`, those that read it at `cached_input`, so what the run
    charged (each call's `cost_usd`, and run_end's spend) is what the server billed."""
    server = billing_server(writes=20, prompt_cache=True)
    profile = claude_profile(tmp_path, server)
    system = {"role": "system", "content": "You answer in one word. " * 100}
    lines = [{"id": f"j{i}", "messages": [system, {"role": "user", "content": f"q{i}"}],
              "params": {"max_tokens": 20}} for i in range(100)]  # fmt: skip
    jobs = write_lines(tmp_path / "jobs.jsonl", lines)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "5", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    assert server.ledger.cache_written > 0 and server.ledger.cache_read > 0
    charged = sum(c["cost_usd"] for c in calls(tmp_path / "jobs.traces.jsonl"))
    assert server.billed(CLAUDE) == pytest.approx(charged, abs=1e-9)
    (end,) = [r for r in read_jsonl(tmp_path / "jobs.traces.jsonl") if r["event"] == "run_end"]
    assert server.billed(CLAUDE) == pytest.approx(end["budget"]["spent"], abs=1e-6)


def test_a_budget_reserves_input_at_the_dearer_cache_write_price(tmp_path, billing_server):
    """Every job with a system text of its own, so every call writes the cache at 1.25 times
    the input price: each call's input is reserved at the cache-write price, so what was
    billed stays within the limit."""
    server = billing_server(writes=10, prompt_cache=True)
    profile = claude_profile(tmp_path, server)
    lines = [{"id": f"j{i}", "messages": [{"role": "system", "content": f"{i} " + "x" * 3000},
                                         {"role": "user", "content": "q"}],
              "params": {"max_tokens": 10}} for i in range(300)]  # fmt: skip
    jobs = write_lines(tmp_path / "jobs.jsonl", lines)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "1", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    assert server.ledger.cache_written > 0
    assert 0.9 < server.billed(CLAUDE) <= 1.0
