"""Retries stay on their backend; budgets end in the job's error; keys stay with their backend."""

from __future__ import annotations

from runkit import calls, read_jsonl, rrcli, write_jobs, write_profile


def test_budget_spent_ends_in_the_jobs_error_with_no_call_elsewhere(tmp_path, sim_server):
    """A backend that always answers 503: each job is attempted max_retries + 1 times on that
    backend only, then fails with http_503; the healthy backend never sees its calls."""
    bad, good = sim_server(), sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "bad", "base_url": bad.openai_url, "headers": {"x-sim-status": "503"}},
            {"id": "good", "base_url": good.openai_url},
        ],
        retry={"max_retries": 2},
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    assert 1 == result.returncode, result.stderr
    results = {r["id"]: r for r in read_jsonl(tmp_path / "jobs.results.jsonl")}
    failed = [r for r in results.values() if r["status"] == "error"]
    assert 2 == len(failed)
    for r in failed:
        assert "bad" == r["deployment"]
        assert 3 == r["attempts"]
        assert {"type": "http_503", "status_code": 503, "retryable": True} == {
            k: r["error"][k] for k in ("type", "status_code", "retryable")
        }
        trail = [c for c in calls(tmp_path / "jobs.traces.jsonl") if c["job_id"] == r["id"]]
        assert ["bad"] * 3 == [c["deployment"] for c in trail]
        assert ["retry", "retry", "error"] == [c["outcome"] for c in trail]
        assert [1, 2, 3] == [c["attempt"] for c in trail]
    assert 2 == good.stats()["requests"]


def test_a_400_fails_at_once(tmp_path, sim_server):
    """A 400 is not transient: one attempt, a non-retryable error, exit 1."""
    server = sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": server.openai_url, "headers": {"x-sim-status": "400"}}],
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 1 == result.returncode
    [r] = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert ("error", 1, "http_400", False) == (
        r["status"], r["attempts"], r["error"]["type"], r["error"]["retryable"],
    )  # fmt: skip
    assert 1 == server.stats()["requests"]


def test_transient_429_retried_on_the_same_backend_honouring_retry_after(tmp_path, sim_server):
    """429s with Retry-After are retried on the backend that was chosen, after the server's delay;
    every job ends ok."""
    server = sim_server(rate_limit_rate=0.5, retry_after_ms=120, seed=3)
    other = sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": server.openai_url}, {"id": "b", "base_url": other.openai_url}],
        retry={"max_retries": 8},
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 10)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "2", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    trail = calls(tmp_path / "jobs.traces.jsonl")
    retried = [c for c in trail if c["outcome"] == "retry"]
    assert retried, "the simulator answered no 429 at all"
    for c in retried:
        assert ("a", 429, 120.0, 120.0) == (
            c["deployment"], c["http_status"], c["retry_after_ms"], c["backoff_ms"],
        )  # fmt: skip
        later = [x for x in trail if x["job_id"] == c["job_id"] and x["attempt"] > c["attempt"]]
        assert {"a"} == {x["deployment"] for x in later}
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert ["ok"] * 10 == [r["status"] for r in results]


def test_each_backend_sends_only_its_own_key_and_no_key_is_printed(tmp_path, sim_server):
    """Two backends of one provider with their own keys: each server sees only its key (any other
    key would get a 401), and neither key appears in results, traces or the command's output."""
    key_a, key_b = "sk-test-AAAA-1111-secret", "sk-test-BBBB-2222-secret"
    a, b = sim_server(api_keys=(key_a,)), sim_server(api_keys=(key_b,))
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "a", "base_url": a.openai_url, "credentials": {"api_key_env": "KEY_A"}},
            {"id": "b", "base_url": b.openai_url, "credentials": {"api_key_env": "KEY_B"}},
        ],
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 6)
    env = {"KEY_A": key_a, "KEY_B": key_b}
    result = rrcli("run", jobs, "-p", profile, "-v", cwd=tmp_path, env=env)
    assert 0 == result.returncode, result.stderr
    assert 1 == len(a.stats()["credentials"]) == len(b.stats()["credentials"])
    assert a.stats()["credentials"] != b.stats()["credentials"]
    assert 3 == a.stats()["requests"] == b.stats()["requests"]
    everything = result.stdout + result.stderr
    for path in tmp_path.glob("jobs.*.jsonl"):
        everything += path.read_text()
    assert key_a not in everything and key_b not in everything


def test_an_unreachable_backend_is_a_jobs_error_not_a_crash(tmp_path, sim_server):
    """Connection refused is transient: retried on that backend, then the job's error; the other
    backend's jobs succeed; exit 1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    live = sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "dead", "base_url": f"http://127.0.0.1:{dead}/v1"},
            {"id": "live", "base_url": live.openai_url},
        ],
        retry={"max_retries": 1},
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    assert 1 == result.returncode
    assert "Traceback" not in result.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert {"ok": 2, "error": 2} == {
        s: sum(r["status"] == s for r in results) for s in ("ok", "error")
    }
    for r in results:
        if r["status"] == "error":
            assert ("dead", "connect_error", 2) == (
                r["deployment"], r["error"]["type"], r["attempts"],
            )  # fmt: skip
