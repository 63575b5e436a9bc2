"""`rrcli run` as a user meets it: the demo, bad input, clear messages, the right exit codes."""

from __future__ import annotations

import os

import orjson
import pytest
from runkit import ROOT, calls, read_jsonl, rrcli, write_jobs, write_profile


def test_demo_profile_runs_the_demo_jobs_offline(tmp_path):
    """The Quick start: the demo jobs on the built-in demo pool, no key, every job ok."""
    result = rrcli("run", ROOT / "profiles" / "demo-jobs.jsonl", "-p", "demo", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    results = read_jsonl(tmp_path / "demo-jobs.results.jsonl")
    lines = (ROOT / "profiles" / "demo-jobs.jsonl").read_text().splitlines()
    assert len([line for line in lines if line.strip()]) == len(results)
    assert {"ok"} == {r["status"] for r in results}
    sessions = [r for r in results if "turns" in r]
    assert sessions and all(len(r["turns"]) >= 2 for r in sessions)


def test_bad_job_lines_become_invalid_results_and_the_run_goes_on(tmp_path):
    """Not JSON, not an object, no known shape, a duplicate id: each an invalid result naming its
    line, under the line's own id when it has one (a duplicate: line-N); the good jobs still
    run; exit 1."""
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(
        '{"id": "a", "prompt": "hi"}\n'
        "not json\n"
        "[1, 2]\n"
        '{"id": "b", "colour": "blue"}\n'
        '{"id": "a", "prompt": "again"}\n'
        "\n"
        '{"id": "c", "prompt": "bye"}\n'
    )
    result = rrcli("run", jobs, "-p", "demo", cwd=tmp_path)
    assert 1 == result.returncode
    results = {r["id"]: r for r in read_jsonl(tmp_path / "jobs.results.jsonl")}
    assert "ok" == results["a"]["status"] == results["c"]["status"]
    for line, key in ((2, "line-2"), (3, "line-3"), (4, "b"), (5, "line-5")):
        r = results[key]
        assert "invalid" == r["status"]
        assert r["error"]["message"].startswith(f"line {line}")
    assert "a" == results["line-5"]["duplicate_of"]


def test_missing_profile_names_every_way_to_give_one(tmp_path):
    """No --profile, no RRCLI_PROFILE, no ./rrcli.toml: exit 2 and a message naming each way."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    env = {"RRCLI_PROFILE": "", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    result = rrcli("run", jobs, cwd=tmp_path, env=env)
    assert 2 == result.returncode
    for way in ("--profile", "RRCLI_PROFILE", "rrcli.toml", "demo"):
        assert way in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "jobs.results.jsonl").exists()


def test_unset_key_variable_stops_the_run_before_anything_is_sent(tmp_path, sim_server):
    """A backend whose api_key_env is unset: exit 2 naming the variable; the server saw nothing."""
    server = sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": server.openai_url, "credentials": {"api_key_env": "NOPE_KEY"}}],
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2)
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path, env={"NOPE_KEY": ""})
    assert 2 == result.returncode
    assert "NOPE_KEY" in result.stderr
    assert 0 == server.stats()["requests"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_output_folder_is_a_clear_error_before_sending(tmp_path, sim_server):
    """An output folder that cannot be written: exit 2 naming the path; nothing sent."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    result = rrcli("run", jobs, "-p", profile, "--out", locked / "r.jsonl", cwd=tmp_path)
    assert 2 == result.returncode
    assert "locked" in result.stderr
    assert 0 == server.stats()["requests"]


def test_output_that_is_a_folder_is_a_clear_error_before_sending(tmp_path, sim_server):
    """--out naming something that cannot be a results file: exit 2 naming it; nothing sent
    (holds for root too, unlike permission bits)."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2)
    (tmp_path / "file").write_text("")
    result = rrcli("run", jobs, "-p", profile, "--out", tmp_path / "file" / "r.jsonl", cwd=tmp_path)
    assert 2 == result.returncode, result.stderr
    assert "r.jsonl" in result.stderr and "Traceback" not in result.stderr
    assert 0 == server.stats()["requests"]


def test_existing_results_need_resume_or_overwrite(tmp_path):
    """A second run onto the same results file is refused (exit 2) unless --overwrite/--resume."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    assert 0 == rrcli("run", jobs, "-p", "demo", cwd=tmp_path).returncode
    again = rrcli("run", jobs, "-p", "demo", cwd=tmp_path)
    assert 2 == again.returncode
    assert "--resume" in again.stderr and "--overwrite" in again.stderr
    assert 3 == len(read_jsonl(tmp_path / "jobs.results.jsonl"))
    assert 0 == rrcli("run", jobs, "-p", "demo", "--overwrite", cwd=tmp_path).returncode
    assert 3 == len(read_jsonl(tmp_path / "jobs.results.jsonl"))


def test_prompt_prints_the_answer(tmp_path):
    """--prompt sends one job and prints its answer as text on stdout."""
    result = rrcli("run", "--prompt", "What is 2+2?", "-p", "demo", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    assert result.stdout.strip()
    assert not result.stdout.lstrip().startswith("{")
    assert [] == list(tmp_path.glob("*.jsonl"))


def test_dry_run_routes_on_paper_and_sends_nothing(tmp_path, sim_server):
    """--dry-run prints jobs per deployment and the estimated input cost; no request is sent
    and no file is written."""
    server = sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "a", "base_url": server.openai_url, "price": {"input": 1.0, "output": 2.0}},
            {"id": "b", "base_url": server.openai_url, "price": {"input": 3.0, "output": 4.0}},
        ],
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 10)
    result = rrcli("run", jobs, "-p", profile, "--dry-run", cwd=tmp_path, env={"COLUMNS": "200"})
    assert 0 == result.returncode, result.stderr
    assert 0 == server.stats()["requests"]
    cells = [line.replace("│", " ").split() for line in result.stdout.splitlines()]
    rows = {row[0]: row for row in cells if row}
    assert "5" == rows["a"][2] == rows["b"][2]
    assert not (tmp_path / "jobs.results.jsonl").exists()


def test_limit_and_shard_select_jobs(tmp_path):
    """--limit takes the first N; --shard I/N splits the jobs into disjoint parts that cover all."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 40)
    assert 0 == rrcli("run", jobs, "-p", "demo", "--limit", "5", cwd=tmp_path).returncode
    assert [f"j{i}" for i in range(5)] == sorted(
        (r["id"] for r in read_jsonl(tmp_path / "jobs.results.jsonl")), key=lambda s: int(s[1:])
    )
    seen = []
    for i in range(3):
        out = tmp_path / f"s{i}.jsonl"
        result = rrcli("run", jobs, "-p", "demo", "--shard", f"{i}/3", "--out", out,
                       "--traces", tmp_path / f"t{i}.jsonl", cwd=tmp_path)  # fmt: skip
        assert 0 == result.returncode, result.stderr
        seen.append({r["id"] for r in read_jsonl(out)})
    assert 40 == sum(map(len, seen)) == len(set().union(*seen))


def test_openai_batch_output_format(tmp_path, sim_server):
    """--format openai-batch writes OpenAI Batch output lines keyed by custom_id; the body's
    parameters reach the backend."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = tmp_path / "batch.jsonl"
    body = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    jobs.write_bytes(
        orjson.dumps(
            {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": body}
        )
        + b"\n"
    )
    result = rrcli("run", jobs, "-p", profile, "--format", "openai-batch", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    [line] = read_jsonl(tmp_path / "batch.results.jsonl")
    assert "r1" == line["custom_id"]
    assert 200 == line["response"]["status_code"]
    assert line["response"]["body"]["choices"][0]["message"]["content"]
    [call] = calls(tmp_path / "batch.traces.jsonl")
    assert call["output_tokens"] <= 5  # the body's max_tokens reached the backend as a param
