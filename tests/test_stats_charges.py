"""`rrcli stats` counts money as the run was charged: each call record's `cost_usd`, the same
charge `--resume` and the budget count, tokens at the run's prices only for records without
one (traces of an older rrcli), and it says how many calls' usage and charges are estimates."""

from __future__ import annotations

import json

import orjson
import pytest
from billing import GPT_4O
from runkit import calls, rrcli, write_profile
from stats_tracegen import lines, run_records

T0 = 1_767_000_000_000


def stats_json(path, cwd) -> dict:
    result = rrcli("stats", path, "--json", cwd=cwd)
    assert 0 == result.returncode, result.stderr
    return json.loads(result.stdout)


def token_cost(record: dict, price: dict) -> float:
    spent = (record["input_tokens"] or 0) * price["input"]
    return (spent + (record["output_tokens"] or 0) * price["output"]) / 1e6


def test_a_run_without_usage_costs_what_its_calls_were_charged(tmp_path, billing_server):
    """A server that reports no usage, under a budget: every call's tokens are rrcli's estimate
    and its charge its reservation. `stats --json` costs the calls at the charges the trace
    records (not at their estimated tokens, which cost less), says every call's usage and charge
    were estimated, and the table's lines under it say so too."""
    server = billing_server(writes=30, usage=False)
    entry = {"id": "b0", "base_url": server.openai_url, "model": "gpt-4o", "price": GPT_4O,
             "max_concurrency": 4}  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", [entry])
    with open(tmp_path / "jobs.jsonl", "wb") as out:
        for i in range(40):
            job = {"id": f"j{i}", "prompt": f"q{i}", "params": {"max_tokens": 64}}
            out.write(orjson.dumps(job) + b"\n")
    run = rrcli("run", "jobs.jsonl", "-p", profile, "-q", "--max-cost", "5", cwd=tmp_path)
    assert 0 == run.returncode, run.stderr
    traces = tmp_path / "jobs.traces.jsonl"
    records = calls(traces)
    charged = sum(r["cost_usd"] for r in records)
    assert charged > sum(token_cost(r, GPT_4O) for r in records)  # the charge is not the tokens'
    total = stats_json(traces, tmp_path)["total"]
    assert round(charged, 6) == pytest.approx(total["cost_usd"], abs=1e-9)
    counts = (total["usage_estimated_calls"], total["cost_estimated_calls"], total["priced_calls"])
    assert (len(records),) * 3 == counts
    table = rrcli("stats", traces, cwd=tmp_path).stdout
    n = len(records)
    assert 0.01 < charged < 0.1  # shown to two significant figures
    assert f"cost {charged:.2g} (100 % of calls priced, {n} charged an estimate)" in table
    assert f"usage estimated: {len(records)} of {len(records)} calls" in table


def test_records_with_and_without_a_charge_are_costed_each_their_way(tmp_path):
    """In one trace, records that carry `cost_usd` cost that (also on a deployment the run
    record gives no price), records without it (an older rrcli's) their tokens at the run's
    price, and a charge no call can have (negative) is not believed: its tokens are priced. The
    counts of estimated usage and charges are per group."""
    records = list(run_records("r", jobs=60, start_ms=T0, seed=3))
    price = next(r for r in records if r["event"] == "run")["profile"]["backends"][0]["price"]
    expected = {"openai-a": 0.0, "openai-b": 0.0, "local-vllm": 0.0}
    guessed, estimated = dict.fromkeys(expected, 0), dict.fromkeys(expected, 0)
    for i, record in enumerate(r for r in records if r["event"] == "call"):
        name = record["deployment"]
        if name == "openai-a":  # old records: no charge, no flags at all
            for field in ("cost_usd", "cost_estimated", "usage_estimated"):
                del record[field]
            expected[name] += token_cost(record, price)
        elif name == "local-vllm":  # unpriced in the run record, but charged
            record.update(cost_usd=0.001 * (i % 3), usage_estimated=True, cost_estimated=i % 2 == 0)
            expected[name] += record["cost_usd"]
            guessed[name] += 1
            estimated[name] += i % 2 == 0
        else:
            record["cost_usd"] = -1.0 if i % 4 == 0 else 0.002
            expected[name] += token_cost(record, price) if i % 4 == 0 else 0.002
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines(records))
    summary = stats_json(path, tmp_path)
    groups = {g["key"]: g for g in summary["groups"]}
    assert {k: round(v, 6) for k, v in expected.items()} == pytest.approx(
        {k: g["cost_usd"] for k, g in groups.items()}, abs=1e-9
    )
    assert guessed == {k: g["usage_estimated_calls"] for k, g in groups.items()}
    assert estimated == {k: g["cost_estimated_calls"] for k, g in groups.items()}
    assert {k: g["calls"] for k, g in groups.items()} == {
        k: g["priced_calls"] for k, g in groups.items()
    }
    assert 0 == summary["malformed_lines"]
