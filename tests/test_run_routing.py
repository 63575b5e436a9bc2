"""`rrcli run` end to end against `rrcli sim` over loopback: who served what, and how many."""

from __future__ import annotations

from collections import Counter

import pytest
from runkit import calls, read_jsonl, rrcli, write_jobs, write_profile

STRATEGIES = ["round_robin", "random", "weighted", "least_loaded", "first_available", "fastest"]


def order(traces):
    return [c["deployment"] for c in calls(traces)]


def test_round_robin_order_and_wrap(tmp_path, sim_server):
    """Round robin sends decision k to backend k mod n, in profile order, and wraps around."""
    url = sim_server().openai_url
    profile = write_profile(
        tmp_path / "p.toml", [{"id": i, "base_url": url} for i in ("a", "b", "c")]
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 7)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    assert ["a", "b", "c", "a", "b", "c", "a"] == order(tmp_path / "jobs.traces.jsonl")


def test_round_robin_rotate_every(tmp_path, sim_server):
    """With rotate_every = 2, each backend serves two decisions before the rotation advances."""
    url = sim_server().openai_url
    profile = write_profile(
        tmp_path / "p.toml", [{"id": i, "base_url": url} for i in ("a", "b", "c")], rotate_every=2
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 8)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    assert list("aabbccaa") == order(tmp_path / "jobs.traces.jsonl")


def test_weighted_shares_exact_over_a_cycle(tmp_path, sim_server):
    """Weights 3:2:1 give exactly 6, 4 and 2 of 12 calls (two whole cycles)."""
    url = sim_server().openai_url
    backends = [{"id": i, "base_url": url, "weight": w} for i, w in (("a", 3), ("b", 2), ("c", 1))]
    profile = write_profile(tmp_path / "p.toml", backends, strategy="weighted")
    jobs = write_jobs(tmp_path / "jobs.jsonl", 12)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    assert {"a": 6, "b": 4, "c": 2} == Counter(order(tmp_path / "jobs.traces.jsonl"))


def test_random_is_repeatable_with_a_seed(tmp_path, sim_server):
    """The same --seed gives the same choices; another seed gives others."""
    url = sim_server().openai_url
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": i, "base_url": url} for i in ("a", "b", "c")],
        strategy="random",
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 30)
    runs = {}
    for name, seed in (("one", "7"), ("two", "7"), ("three", "8")):
        traces = tmp_path / f"{name}.traces.jsonl"
        result = rrcli(
            "run", jobs, "-p", profile, "--concurrency", "1", "--seed", seed,
            "--out", tmp_path / f"{name}.jsonl", "--traces", traces, cwd=tmp_path,
        )  # fmt: skip
        assert 0 == result.returncode, result.stderr
        runs[name] = order(traces)
    assert runs["one"] == runs["two"]
    assert runs["one"] != runs["three"]
    assert {"a", "b", "c"} == set(runs["one"])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_server_ever_sees_more_than_its_cap(tmp_path, sim_server, strategy):
    """Caps 1, 2 and 3 on three servers: under load, each server's own peak stays within its cap,
    every backend serves work, and every job succeeds."""
    servers = [sim_server(latency_ms=15, jitter_ms=5, cap=cap) for cap in (1, 2, 3)]
    backends = [
        {"id": f"b{cap}", "base_url": s.openai_url, "max_concurrency": cap}
        for cap, s in zip((1, 2, 3), servers, strict=True)
    ]
    profile = write_profile(tmp_path / "p.toml", backends, strategy=strategy, seed=1)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 60)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "12", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    peaks = {b["id"]: s.stats()["peak_concurrency"] for b, s in zip(backends, servers, strict=True)}
    for cap, server in zip((1, 2, 3), servers, strict=True):
        stats = server.stats()
        assert stats["peak_concurrency"] <= cap, peaks
        assert 0 == stats.get("rate_limited", 0) or stats["peak_concurrency"] <= cap
    used = Counter(order(tmp_path / "jobs.traces.jsonl"))
    assert {"b1", "b2", "b3"} == set(used), used
    assert 60 == sum(r["status"] == "ok" for r in read_jsonl(tmp_path / "jobs.results.jsonl"))
    if strategy in ("least_loaded", "first_available", "fastest"):
        # load-aware strategies keep every backend busy: each reaches its cap
        assert {"b1": 1, "b2": 2, "b3": 3} == peaks
