"""A run with a cache reads its jobs' answers ahead, a chunk of jobs in one lookup."""

from __future__ import annotations

import orjson
from runkit import calls, read_jsonl, rrcli, write_profile

SIM = {"id": "s", "provider": "sim", "model": "sim", "sim": {"latency_ms": 0}}


def _jobs(path, ids):
    path.write_bytes(
        b"".join(orjson.dumps({"id": f"j{i}", "prompt": f"question {i}"}) + b"\n" for i in ids)
    )
    return path


def test_a_rerun_of_many_chunks_answers_exactly_the_stored_jobs(tmp_path):
    """After a run of every third of 700 jobs, a run of all 700 with the same cache (more jobs
    than one lookup reads) answers exactly those from the cache, with the first run's outputs,
    and sends every other job; each job has one result line and one call record."""
    profile = write_profile(tmp_path / "p.toml", [SIM], concurrency=16)
    stored = list(range(0, 700, 3))
    first = rrcli(
        "run", _jobs(tmp_path / "some.jsonl", stored), "-p", profile, "--cache", "c.db",
        "--out", "first.jsonl", cwd=tmp_path,
    )  # fmt: skip
    assert 0 == first.returncode, first.stderr
    again = rrcli(
        "run", _jobs(tmp_path / "all.jsonl", range(700)), "-p", profile, "--cache", "c.db",
        "--out", "again.jsonl", "--traces", "again.traces.jsonl", cwd=tmp_path,
    )  # fmt: skip
    assert 0 == again.returncode, again.stderr
    lines = {line["id"]: line for line in read_jsonl(tmp_path / "again.jsonl")}
    assert 700 == len(lines)
    assert {f"j{i}" for i in stored} == {k for k, line in lines.items() if line.get("cached")}
    before = {line["id"]: line["output"] for line in read_jsonl(tmp_path / "first.jsonl")}
    assert before == {k: lines[k]["output"] for k in before}
    outcomes = sorted(r["outcome"] for r in calls(tmp_path / "again.traces.jsonl"))
    assert ["cached"] * len(stored) + ["ok"] * (700 - len(stored)) == outcomes
