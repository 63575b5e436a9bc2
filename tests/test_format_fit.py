"""--format anthropic-batch and the jobs it cannot hold whole (embeddings, moderations, n > 1):
refused before anything is sent, naming the lines and the formats that keep them."""

from __future__ import annotations

import subprocess
import sys

import orjson
from runkit import ROOT, read_jsonl, rrcli, write_profile

MIXED = [
    {"id": "chat", "prompt": "hi"},
    {"id": "emb", "endpoint": "embeddings", "input": "hello"},
    {"id": "mod", "endpoint": "moderations", "input": "hello"},
    {"id": "three", "prompt": "hi", "params": {"n": 3}},
]


def pool(tmp_path, server):
    backend = {"id": "a", "base_url": server.openai_url,
               "endpoints": ["chat", "embeddings", "moderations"]}  # fmt: skip
    return write_profile(tmp_path / "p.toml", [backend])


def mixed_jobs(tmp_path):
    path = tmp_path / "jobs.jsonl"
    path.write_bytes(b"".join(orjson.dumps(job) + b"\n" for job in MIXED))
    return path


def test_anthropic_batch_refuses_jobs_it_would_drop_before_sending(tmp_path, sim_server):
    """`run --format anthropic-batch` (and its --dry-run) exits 2 naming lines 2, 3 and 4 and
    the formats that keep them; nothing is sent and no results file is written."""
    server = sim_server()
    profile = pool(tmp_path, server)
    jobs = mixed_jobs(tmp_path)
    for extra in ([], ["--dry-run"]):
        done = rrcli(
            "run", jobs, "-p", profile, "--format", "anthropic-batch", *extra, cwd=tmp_path
        )
        assert 2 == done.returncode
        expected = (
            "line 2 (the embeddings answer), line 3 (the moderations answer), "
            "line 4 (choices 2 to 3 of n = 3) — --format openai-batch or rrcli keeps every "
            "answer whole"
        )
        assert expected in done.stderr
    assert 0 == server.stats()["requests"]
    assert not (tmp_path / "jobs.results.jsonl").exists()
    kept = rrcli("run", jobs, "-p", profile, "--format", "openai-batch", "-q", cwd=tmp_path)
    assert 0 == kept.returncode, kept.stderr
    assert 4 == server.stats()["requests"]


def test_piped_jobs_it_would_drop_are_errored_lines_saying_why(tmp_path, sim_server):
    """Jobs on standard input cannot be read ahead: each one anthropic-batch would drop is an
    errored line naming the format that keeps it, and only the chat job is sent."""
    server = sim_server()
    profile = pool(tmp_path, server)
    done = subprocess.run(
        [sys.executable, "-m", "rrcli", "run", "-", "-p", str(profile), "-q",
         "--format", "anthropic-batch", "--out", "out.jsonl"],
        input=mixed_jobs(tmp_path).read_bytes(), cwd=tmp_path, capture_output=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert 1 == done.returncode
    lines = {line["custom_id"]: line["result"] for line in read_jsonl(tmp_path / "out.jsonl")}
    assert "succeeded" == lines["chat"]["type"]
    message = lines["emb"]["error"]["error"]["message"]
    expected = "line 2: --format anthropic-batch would drop the embeddings answer — --format "
    assert expected == message[: len(expected)]
    assert {"errored"} == {lines[k]["type"] for k in ("emb", "mod", "three")}
    assert 1 == server.stats()["requests"]
