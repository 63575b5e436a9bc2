"""`rrcli stats` prints the same numbers and tables as the version they were recorded with.

A mixed trace (made here, seeded) holds everything the reader and the arithmetic treat apart:
calls from the response cache, cancelled calls, charged and estimated costs, estimated usage, a
prompt cache with its own price, several endpoints and error types, a run without its run
record, an interrupted run, other timestamp forms amid canonical ones, malformed lines of every
kind, blank lines, an unknown event and a torn last line. The summary for every ``--by`` (and
the timeline) and the tables the command prints must equal the recorded ones
(tests/golden/stats_mixed.*) exactly: a faster reader or sum must not move a digit. A change
meant to move one records them again with ``RRCLI_RECORD_GOLDEN=1 python -m pytest
tests/test_stats_golden.py``.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from runkit import rrcli
from stats_tracegen import POOL, SimBackend, lines, run_records

from rrcli.stats.summary import BY_FIELDS, summarize

GOLDEN = Path(__file__).parent / "golden"
T0 = 1_767_000_000_000
CACHED_PRICE = {"input": 3.0, "output": 15.0, "cached_input": 0.3}
CACHED_POOL = (*POOL[:2], SimBackend("cached-api", "claude-x", 3, 90.0, CACHED_PRICE))
BAD = [
    b"not json at all",
    b'{"event": "call", "run_id": "r"',
    b"[1, 2, 3]",
    b'{"run_id": "x"}',
    b'{"event":"call","run_id":"r","deployment":"d","outcome":"maybe",'
    b'"ts_start":"2026-01-01T00:00:00.000Z","ts_end":"2026-01-01T00:00:01.000Z"}',
    b'{"event":"call","run_id":"r","deployment":"d","outcome":"ok","latency_ms":"fast",'
    b'"ts_start":"2026-01-01T00:00:00.000Z","ts_end":"2026-01-01T00:00:01.000Z"}',
    b'{"event":"call","run_id":"r","deployment":"d","outcome":"ok","model":5,"latency_ms":1.0,'
    b'"ts_start":"2026-01-01T00:00:00.000Z","ts_end":"2026-01-01T00:00:00.001Z"}',
    b'{"event":"call","run_id":"r","deployment":"d","outcome":"ok","latency_ms":-3.0,'
    b'"ts_start":"2026-01-01T00:00:00.000Z","ts_end":"2026-01-01T00:00:00.000Z"}',
    b'{"event":"call","run_id":"r","deployment":"d","outcome":"ok","latency_ms":1.0,'
    b'"input_tokens":' + b"9" * 400 + b',"ts_start":"2026-01-01T00:00:00.000Z",'
    b'"ts_end":"2026-01-01T00:00:00.001Z"}',
    b'{"event":"call","run_id":"r","deployment":"d","outcome":"ok","latency_ms":1.0,'
    b'"ts_start":"2026-02-30T00:00:00.000Z","ts_end":"2026-03-01T00:00:00.001Z"}',
    b'{"event":"run","run_id":"r","ts":"yesterday","profile":{}}',
    b"[" * 2000 + b"]" * 2000,
]


def mixed_records() -> list[dict]:
    """Three runs' records, altered call by call (seeded) into every kind of call."""
    rng = random.Random(26)
    first = list(run_records("run-1", jobs=300, start_ms=T0, seed=1, pool=CACHED_POOL))
    second = list(run_records("run-2", jobs=200, start_ms=T0 + 30_000, seed=2, ended=False))
    third = list(run_records("run-3", jobs=120, start_ms=T0 + 60_000, seed=3))[1:]  # no run
    records = first + second + third
    for record in records:
        if record["event"] == "call":
            vary(record, rng)
    return records


def vary(call: dict, rng: random.Random) -> None:
    roll = rng.random()
    if roll < 0.05:
        call.update(outcome="cached", latency_ms=0.0, ttft_ms=None, ts_end=call["ts_start"])
    elif roll < 0.08:
        call.update(outcome="cancelled", error_type="client_disconnected", http_status=None)
    elif roll < 0.2 and call["input_tokens"]:
        call.update(cost_usd=round(rng.random() / 1000, 9), cost_estimated=rng.random() < 0.3)
    if call["input_tokens"] and rng.random() < 0.3:
        call["cached_input_tokens"] = rng.randint(0, call["input_tokens"] + 50)
    call["usage_estimated"] = rng.random() < 0.1
    call["endpoint"] = rng.choice(("chat", "chat", "responses", "embeddings"))
    if rng.random() < 0.02:
        del call["endpoint"]


def mixed_bytes() -> bytes:
    body = lines(mixed_records()).split(b"\n")
    for i in range(400, 460):  # another writer's timestamps amid canonical ones
        record = json.loads(body[i])
        for key in ("ts_start", "ts_end", "ts"):
            if key in record:
                record[key] = record[key].replace("Z", "+00:00")
        body[i] = json.dumps(record).encode()
    for i, bad in enumerate(BAD):
        body.insert(30 + 53 * i, bad)
    body.insert(5, b"")
    body.insert(700, b'{"event": "heartbeat", "run_id": "run-1"}')
    return b"\n".join(body) + b'{"event": "call", "run_id": "run-2", "deploym'


def summaries(path: Path) -> dict:
    out = {by: summarize([path], by=by, workers=1) for by in BY_FIELDS}
    out["timeline"] = summarize([path], timeline_bins=9, workers=1)["timeline"]
    return out


def tables(path: Path) -> str:
    """What the command prints, piped: the default table, every column, and by run."""
    printed = []
    for args in ([], ["--wide"], ["--by", "run", "--wide"], ["--by", "model", "--run", "run-1"]):
        result = rrcli("stats", path.name, *args, cwd=path.parent, env={"COLUMNS": "200"})
        assert 0 == result.returncode, result.stderr
        printed.append(f"$ rrcli stats {' '.join(args)}\n{result.stdout}{result.stderr}")
    return "\n".join(printed)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("golden") / "mixed.traces.jsonl"
    path.write_bytes(mixed_bytes())
    return path


def recorded(name: str, text: str) -> str:
    """The recorded text (written when RRCLI_RECORD_GOLDEN is set, to record a change)."""
    if os.environ.get("RRCLI_RECORD_GOLDEN"):
        (GOLDEN / name).write_text(text)
    return (GOLDEN / name).read_text()


def test_summaries_equal_the_recorded_ones(mixed):
    """Every group's numbers, for every --by, and the timeline, equal the recorded ones."""
    actual = json.dumps(summaries(mixed), indent=1, sort_keys=True) + "\n"
    assert recorded("stats_mixed.json", actual) == actual


def test_parallel_reading_equals_the_recorded_summary(mixed, monkeypatch, tmp_path):
    """Read in parts by forked workers, in blocks of a few lines (some with a field null in
    every record, some with a bad line), summed in two processes: the recorded numbers, and
    no file left behind by the workers' handover."""
    monkeypatch.setattr("rrcli.stats.columns._BLOCK_BYTES", 4096)
    monkeypatch.setattr("rrcli.stats.parallel._HANDOVER_DIR", str(tmp_path))
    monkeypatch.setattr("rrcli.stats.parallel._PARALLEL_BYTES", 0)
    monkeypatch.setattr("rrcli.stats.summary._SPLIT_CALLS", 0)
    expected = json.loads((GOLDEN / "stats_mixed.json").read_text())
    for by in ("deployment", "endpoint"):
        assert expected[by] == json.loads(json.dumps(summarize([mixed], by=by, workers=3)))
    assert [] == list(tmp_path.iterdir())


def test_tables_equal_the_recorded_ones(mixed):
    """The tables and the lines under them print exactly as recorded."""
    actual = tables(mixed)
    assert recorded("stats_mixed.txt", actual) == actual
