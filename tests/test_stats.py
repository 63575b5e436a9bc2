"""`rrcli stats` numbers against an independent computation on SPEC §5 traces.

The traces come from tests/stats_tracegen.py (retries, final errors, streamed calls, sessions,
several deployments and runs, one run interrupted without run_end). The reference numbers are
computed here another way: the stdlib json module, plain Python lists, numpy.percentile and a
brute-force sweep for peak calls in flight.
"""

from __future__ import annotations

import io
import json
from datetime import datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stats_tracegen import lines, run_records

from rrcli.errors import UsageError
from rrcli.records.traceschema import rfc3339
from rrcli.stats.summary import summarize

T0 = 1_767_000_000_000
KEY_OF = {
    "deployment": "deployment",
    "model": "model",
    "status": "http_status",
    "error_type": "error_type",
    "run": "run_id",
}
MALFORMED = [
    b"not json at all",
    b'{"event": "call", "run_id": "r"',  # truncated
    b"[1, 2, 3]",
    b'{"run_id": "x"}',  # no event
    b'{"event": "call", "run_id": "r", "deployment": "d", "outcome": "maybe",'
    b' "ts_start": "2026-01-01T00:00:00.000Z", "ts_end": "2026-01-01T00:00:01.000Z"}',
    b'{"event": "call", "run_id": "r", "deployment": "d", "outcome": "ok", "latency_ms": "fast",'
    b' "ts_start": "2026-01-01T00:00:00.000Z", "ts_end": "2026-01-01T00:00:01.000Z"}',
    b'{"event": "call", "run_id": "r", "deployment": "d", "outcome": "ok",'
    b' "ts_start": "2026-01-01T00:00:02.000Z", "ts_end": "2026-01-01T00:00:01.000Z"}',
]


def ms(ts: str) -> float:
    return datetime.fromisoformat(ts).timestamp() * 1000.0


def two_runs() -> list[dict]:
    first = list(run_records("run-1", jobs=240, start_ms=T0, seed=1))
    second = list(run_records("run-2", jobs=150, start_ms=T0 + 20_000, seed=2, ended=False))
    return first + second


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    """Two runs (the second interrupted, no run_end), malformed lines mixed in, blank lines,
    an unknown event and a torn last line."""
    path = tmp_path_factory.mktemp("stats") / "traces.jsonl"
    body = lines(two_runs()).split(b"\n")
    for i, bad in enumerate(MALFORMED):
        body.insert(50 + 40 * i, bad)
    body.insert(10, b"")
    body.insert(20, b'{"event": "heartbeat", "run_id": "run-1"}')
    path.write_bytes(b"\n".join(body) + b'{"event": "call", "run_id": "run-2", "deploym')
    return path


def reference(records: list[dict], by: str) -> dict:
    """The SPEC §10 numbers of each group, computed without rrcli."""
    prices = {}
    for r in records:
        if r["event"] == "run":
            for b in r["profile"]["backends"]:
                prices[(r["run_id"], b["id"])] = b["price"]
    calls = [r for r in records if r["event"] == "call"]
    groups = {}
    for c in calls:
        groups.setdefault(c[KEY_OF[by]], []).append(c)
    groups["total"] = calls
    return {key: reference_group(members, len(calls), prices) for key, members in groups.items()}


def reference_group(calls: list[dict], total: int, prices: dict) -> dict:
    ok = [c for c in calls if c["outcome"] == "ok"]

    def pct(values, qs):
        return {
            f"p{q}": (round(float(np.percentile(values, q)), 3) if values else None) for q in qs
        }

    tpot = [
        (c["latency_ms"] - c["ttft_ms"]) / (c["output_tokens"] - 1)
        for c in ok
        if c["stream"] and c["ttft_ms"] is not None and (c["output_tokens"] or 0) > 1
    ]
    intervals = [(ms(c["ts_start"]), ms(c["ts_end"])) for c in calls]
    tokens_out = sum(c["output_tokens"] or 0 for c in calls)
    priced = [c for c in calls if prices.get((c["run_id"], c["deployment"]))]
    cost = sum(
        (c["input_tokens"] or 0) * prices[(c["run_id"], c["deployment"])]["input"]
        + (c["output_tokens"] or 0) * prices[(c["run_id"], c["deployment"])]["output"]
        for c in priced
    )
    busy = union_length(intervals)
    return {
        "calls": len(calls),
        "ok": len(ok),
        "retried": sum(c["outcome"] == "retry" for c in calls),
        "errors": sum(c["outcome"] == "error" for c in calls),
        "share": round(len(calls) / total, 4),
        "latency_ms": pct([c["latency_ms"] for c in ok], (50, 95, 99)),
        "ttft_ms": pct([c["ttft_ms"] for c in ok if c["ttft_ms"] is not None], (50, 95)),
        "tpot_ms": pct(tpot, (50,)),
        "input_tokens": sum(c["input_tokens"] or 0 for c in calls),
        "output_tokens": tokens_out,
        "cost_usd": round(cost / 1e6, 6) if priced else None,
        "priced_calls": len(priced),
        "output_tokens_per_s": round(tokens_out / busy * 1000.0, 3) if busy else None,
        "peak_in_flight": brute_peak(intervals),
    }


def brute_peak(intervals) -> int:
    """Most half-open intervals covering one instant: check every start."""
    return max((sum(s <= t < e for s, e in intervals) for t, _ in intervals), default=0)


def union_length(intervals) -> float:
    total, reach, begin = 0.0, None, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            if reach is not None:
                total += reach - begin
            begin, reach = s, e
        else:
            reach = max(reach, e)
    return total + (reach - begin if reach is not None else 0.0)


def assert_group(expected: dict, actual: dict) -> None:
    for name in ("calls", "ok", "retried", "errors", "input_tokens", "output_tokens"):
        assert expected[name] == actual[name], name
    for name in ("latency_ms", "ttft_ms", "tpot_ms"):
        assert expected[name] == actual[name], name
    assert expected["peak_in_flight"] == actual["peak_in_flight"]
    for name in ("share", "cost_usd", "output_tokens_per_s"):
        if actual[name] is None:  # no sample (e.g. no price): both say so
            assert expected[name] is None, name
        else:
            assert expected[name] == pytest.approx(actual[name], rel=1e-9), name


@pytest.mark.parametrize("by", ["deployment", "model", "status", "error_type", "run"])
def test_numbers_match_independent_computation(trace_file, by):
    """Every group's counts, exact percentiles, tokens, cost, throughput and peak in flight
    equal a computation with json, plain Python and numpy.percentile, despite malformed lines."""
    summary = summarize([trace_file], by=by)
    expected = reference(two_runs(), by)
    assert sorted(expected, key=str) == sorted(
        [g["key"] for g in summary["groups"]] + ["total"], key=str
    )
    for group in summary["groups"]:
        assert_group(expected[group["key"]], group)
    assert_group(expected["total"], summary["total"])


def test_malformed_and_torn_lines_are_counted_not_fatal(trace_file):
    """Each malformed line and the torn last line count once; blank lines and an unknown
    event do not count; the good records are all read."""
    summary = summarize([trace_file])
    assert len(MALFORMED) + 1 == summary["malformed_lines"]
    calls = sum(r["event"] == "call" for r in two_runs())
    assert calls == summary["total"]["calls"]


def test_jobs_and_runs_from_run_records(trace_file):
    """Jobs are summed from run_end records; the interrupted run shows as not ended."""
    summary = summarize([trace_file])
    run_end = next(r for r in two_runs() if r["event"] == "run_end")
    assert run_end["jobs"] == summary["jobs"]
    assert ["run-1", "run-2"] == [r["run_id"] for r in summary["runs"]]
    assert [True, False] == [r["ended"] for r in summary["runs"]]


def test_run_and_since_pick_runs(trace_file):
    """--run by id prefix and --since by start time each keep only the matching run."""
    second = [r for r in two_runs() if r["run_id"] == "run-2" and r["event"] == "call"]
    by_run = summarize([trace_file], run=["run-2"])
    by_since = summarize([trace_file], since=rfc3339((T0 + 10_000) / 1000))
    assert len(second) == by_run["total"]["calls"] == by_since["total"]["calls"]
    assert ["run-2"] == [r["run_id"] for r in by_since["runs"]]
    with pytest.raises(UsageError, match="run-"):
        summarize([trace_file], run=["run-"])  # ambiguous prefix


def test_several_files_equal_their_concatenation(tmp_path):
    """Two files summarised together give the numbers of one file holding both."""
    a = list(run_records("a", jobs=60, start_ms=T0, seed=3))
    b = list(run_records("b", jobs=60, start_ms=T0 + 5_000, seed=4))
    (tmp_path / "a.jsonl").write_bytes(lines(a))
    (tmp_path / "b.jsonl").write_bytes(lines(b))
    (tmp_path / "ab.jsonl").write_bytes(lines(a + b))
    both = summarize([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])
    assert summarize([tmp_path / "ab.jsonl"]) == both


def test_parallel_parts_equal_one_pass(trace_file, monkeypatch):
    """A file cut into parts read by forked workers gives exactly the one-pass summary."""
    one = summarize([trace_file], workers=1)
    monkeypatch.setattr("rrcli.stats.parallel._PARALLEL_BYTES", 0)
    monkeypatch.setattr("rrcli.stats.summary._SPLIT_CALLS", 0)
    assert one == summarize([trace_file], workers=3)


def test_other_timestamp_forms_and_spacing_read_the_same(tmp_path):
    """Timestamps with +00:00 offsets and JSON with spaces (another writer) give the same
    numbers as the canonical form."""
    records = list(run_records("r", jobs=80, start_ms=T0, seed=5))
    canonical = tmp_path / "c.jsonl"
    canonical.write_bytes(lines(records))
    other = tmp_path / "o.jsonl"
    with other.open("w") as out:
        for r in records:
            r = {k: (v.replace("Z", "+00:00") if k.startswith("ts") else v) for k, v in r.items()}
            out.write(json.dumps(r) + "\n")
    assert summarize([canonical]) == summarize([other])


def test_empty_file(tmp_path):
    """An empty trace file has no groups, zero calls and null percentiles."""
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    summary = summarize([path])
    assert [] == summary["groups"]
    assert 0 == summary["total"]["calls"]
    assert {"p50": None, "p95": None, "p99": None} == summary["total"]["latency_ms"]
    assert 0 == summary["malformed_lines"]


def call(start: int, end: int, **extra) -> dict:
    record = {
        "event": "call",
        "run_id": "r",
        "deployment": "d",
        "outcome": "ok",
        "ts_start": rfc3339(start / 1000),
        "ts_end": rfc3339(end / 1000),
        "latency_ms": float(end - start),
        "ttft_ms": None,
        "input_tokens": 1,
        "output_tokens": 1,
        "stream": False,
    }
    return record | extra


def test_one_sample_has_that_value_for_every_percentile():
    """A group with one ok call reports its latency as p50, p95 and p99."""
    summary = summarize([io.BytesIO(lines([call(T0, T0 + 123)]))])
    assert {"p50": 123.0, "p95": 123.0, "p99": 123.0} == summary["total"]["latency_ms"]


def test_back_to_back_calls_do_not_overlap():
    """Intervals are half-open: a call starting when another ends is not in flight with it, so
    a chain of back-to-back calls has a peak of one (closed intervals would count two), and a
    call inside another still counts two."""
    chain = [call(T0 + 100 * i, T0 + 100 * (i + 1)) for i in range(4)]
    assert 1 == summarize([io.BytesIO(lines(chain))])["total"]["peak_in_flight"]
    traces = [call(T0, T0 + 100), call(T0 + 100, T0 + 200), call(T0 + 150, T0 + 160)]
    assert 2 == summarize([io.BytesIO(lines(traces))])["total"]["peak_in_flight"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), min_size=1, max_size=40))
def test_peak_and_busy_time_match_brute_force(spans):
    """For any set of calls, peak in flight and tokens per busy second equal a brute-force
    sweep over the intervals."""
    intervals = [(T0 + s, T0 + s + d) for s, d in spans]
    traces = [call(s, e, output_tokens=7) for s, e in intervals]
    total = summarize([io.BytesIO(lines(traces))])["total"]
    assert brute_peak(intervals) == total["peak_in_flight"]
    busy = union_length(intervals)
    expected = 7 * len(traces) / busy * 1000.0 if busy else None
    assert expected == pytest.approx(total["output_tokens_per_s"], abs=0.0005)  # 3 decimals


def test_timeline_area_equals_call_time(trace_file):
    """The plot's mean in flight per slice, times the slice length, adds up to the time the
    deployment's calls spent in flight (to the rounding of means and slice to 3 decimals)."""
    summary = summarize([trace_file], run=["run-1"], timeline_bins=37)
    timeline = summary["timeline"]
    run_one = [r for r in two_runs() if r["event"] == "call" and r["run_id"] == "run-1"]
    for series in timeline["series"]:
        mine = [c for c in run_one if c["deployment"] == series["deployment"]]
        expected = sum(ms(c["ts_end"]) - ms(c["ts_start"]) for c in mine)
        assert 37 == len(series["mean_in_flight"])
        means, width = series["mean_in_flight"], timeline["bin_ms"]
        rounding = 0.0005 * (len(means) * width + sum(means))
        assert expected == pytest.approx(sum(means) * width, abs=rounding)


def test_tiny_read_blocks_give_the_same_numbers(trace_file, monkeypatch):
    """Lines cut across read blocks, and lines longer than a block, read the same."""
    whole = summarize([trace_file])
    monkeypatch.setattr("rrcli.stats.columns._BLOCK_BYTES", 64)
    assert whole == summarize([trace_file])
