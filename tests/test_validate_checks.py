"""`rrcli validate --probe --jobs`: reachability of every backend, and the jobs file checked."""

from __future__ import annotations

import json
import socket

from runkit import rrcli, write_profile


def test_probe_reports_each_backend_reachable_or_not(tmp_path, sim_server):
    """--probe sends one request to each backend: the live one answers with its latency, the
    dead one is reported as failed, and the exit status is 1."""
    live = sim_server()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "live", "base_url": live.openai_url},
            {"id": "dead", "base_url": f"http://127.0.0.1:{dead}/v1"},
        ],
    )
    result = rrcli("validate", profile, "--probe", "--json", cwd=tmp_path)
    assert 1 == result.returncode
    document = json.loads(result.stdout)
    probes = {p["backend"]: p for p in document["probe"]}
    assert probes["live"]["ok"] and probes["live"]["latency_ms"] >= 0
    assert not probes["dead"]["ok"] and "connect" in probes["dead"]["detail"]
    assert 1 == live.stats()["requests"]
    assert document["ok"] is False


def test_probe_asks_each_backend_on_its_endpoint_and_the_sim_wants_v1(tmp_path, sim_server):
    """An embeddings-only backend is probed with an embeddings request (its line shows that
    URL); a base_url without /v1 fails against the sim as against OpenAI or vLLM, with the
    base_url to try."""
    server = sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "emb", "base_url": server.openai_url, "endpoints": ["embeddings"]},
            {"id": "bare", "base_url": server.url},
        ],
    )
    result = rrcli("validate", profile, "--probe", cwd=tmp_path)
    assert 1 == result.returncode
    lines = {line.split(":")[1].strip(): line for line in result.stdout.splitlines()
             if line.startswith("probe:")}  # fmt: skip
    assert lines["emb"].endswith(f"[POST {server.openai_url}/embeddings]")
    assert "ok in" in lines["emb"]
    expected = "http_404: HTTP 404: Invalid URL (POST /chat/completions) — OpenAI-compatible "
    assert expected in lines["bare"]
    assert f'try base_url = "{server.url}/v1"' in lines["bare"]
    assert {"/v1/embeddings": 1, "/chat/completions": 1} == server.stats()["paths"]


def test_jobs_option_counts_shapes_and_names_invalid_lines(tmp_path):
    """--jobs reads the jobs file as run would: shapes counted, each invalid line named; exit 1
    when any line is invalid."""
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"prompt": "a"}\n{"turns": ["x", "y"]}\nnope\n')
    result = rrcli("validate", "demo", "--jobs", jobs, cwd=tmp_path)
    assert 1 == result.returncode
    assert "2 jobs (prompt 1, session 1), 1 invalid" in result.stdout
    assert "line 3" in result.stdout
