"""Inputs that are the wrong thing, met through the CLI: each said once, plainly, with the fix,
and nothing sent; and output that stays readable when piped."""

from __future__ import annotations

import json
import re
import zlib

import orjson
import pytest
from runkit import calls, read_jsonl, rrcli, write_jobs, write_profile


def test_stats_on_a_results_file_says_so(tmp_path):
    """`rrcli stats` given a results file says it is one, not a trace, and exits 2."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2)
    assert 0 == rrcli("run", jobs, "-p", "demo", "-q", cwd=tmp_path).returncode
    done = rrcli("stats", "jobs.results.jsonl", cwd=tmp_path)
    assert 2 == done.returncode
    assert "a results file (one line per job), not a trace" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ('[{"id": "a", "prompt": "x"},\n {"id": "b", "prompt": "y"}]\n', "jq -c '.[]'"),
        ('{\n  "id": "a",\n  "prompt": "x"\n}\n', "jq -c ."),
    ],
    ids=["array", "pretty-object"],
)
def test_a_jobs_file_that_is_one_json_document_is_refused_once(tmp_path, sim_server, text, fix):
    """A jobs file that is one JSON array (or one object over several lines) is refused with
    one message naming JSON Lines and the fix: exit 2, nothing sent, no trace, no result."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = tmp_path / "jobs.json"
    jobs.write_text(text)
    done = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 2 == done.returncode
    assert 1 == done.stderr.count("rrcli reads JSON Lines: one object per line")
    assert fix in done.stderr
    assert 0 == server.stats()["requests"]
    assert not (tmp_path / "jobs.traces.jsonl").exists()
    assert not (tmp_path / "jobs.results.jsonl").exists()
    checked = rrcli("validate", "demo", "--jobs", jobs, cwd=tmp_path)
    assert 2 == checked.returncode and "one object per line" in checked.stderr


HOST = "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("provider", "base_url", "fix"),
    [
        ("openai", f"{HOST}/v1/chat/completions", f'write base_url = "{HOST}/v1"'),
        ("anthropic", f"{HOST}/v1/", f'write base_url = "{HOST}"'),
        ("anthropic", f"{HOST}/v1/messages", f'write base_url = "{HOST}"'),
        ("openai", f"{HOST}/v1/messages", f'set provider = "anthropic" and base_url = "{HOST}"'),
    ],
)
def test_a_base_url_naming_the_endpoint_is_an_error_with_the_fix(tmp_path, provider, base_url, fix):
    """A base_url that already ends with the path the provider appends (or, for anthropic,
    with /v1) is a validation error whose fix is the base_url to write."""
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "a", "provider": provider, "base_url": base_url}]
    )
    done = rrcli("validate", profile, "--json", cwd=tmp_path)
    assert 1 == done.returncode
    diagnostics = json.loads(done.stdout)["errors"]
    [found] = [d for d in diagnostics if d["code"] == "endpoint_in_base_url"]
    assert ("error", "backends[0].base_url", fix) == (
        found["severity"],
        found["path"],
        found["fix"],
    )


def test_probe_prints_the_url_and_a_timeout_names_the_limit_and_key(tmp_path, sim_server):
    """--probe shows the URL each probe was posted to; a backend slower than its timeout
    fails with the limit and the `timeout` key named."""
    quick, slow = sim_server(), sim_server(latency_ms=3000)
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "quick", "base_url": quick.openai_url},
            {"id": "slow", "base_url": slow.openai_url, "timeout": 0.3},
        ],
    )
    done = rrcli("validate", profile, "--probe", cwd=tmp_path)
    assert 1 == done.returncode
    assert f"[POST {quick.openai_url}/chat/completions]" in done.stdout
    [slow_line] = [line for line in done.stdout.splitlines() if "probe: slow" in line]
    assert "no answer within 0.3 s" in slow_line and "`timeout`" in slow_line


def test_a_run_timeout_names_the_limit_and_key(tmp_path, sim_server):
    """A call that outlives its backend's timeout fails with a message naming the limit and
    the `timeout` key."""
    slow = sim_server(latency_ms=3000)
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": slow.openai_url, "timeout": 0.3}],
        retry={"max_retries": 0},
    )
    done = rrcli("run", "--prompt", "hi", "-p", profile, "--out", "r.jsonl", cwd=tmp_path)
    assert 1 == done.returncode
    [line] = read_jsonl(tmp_path / "r.jsonl")
    assert "no answer within 0.3 s" in line["error"]["message"]
    assert "`timeout`" in line["error"]["message"]


def test_validate_without_an_argument_finds_the_profile_as_run_does(tmp_path):
    """`rrcli validate` alone checks $RRCLI_PROFILE, else ./rrcli.toml; with neither it exits 2
    naming every way to give one."""
    none = rrcli(
        "validate", cwd=tmp_path, env={"RRCLI_PROFILE": "", "XDG_CONFIG_HOME": str(tmp_path)}
    )
    assert 2 == none.returncode and "RRCLI_PROFILE" in none.stderr and "rrcli.toml" in none.stderr
    write_profile(tmp_path / "rrcli.toml", [{"id": "here", "provider": "sim"}])
    local = rrcli("validate", cwd=tmp_path, env={"RRCLI_PROFILE": ""})
    assert 0 == local.returncode, local.stderr
    assert f"{tmp_path / 'rrcli.toml'}: ok" in local.stdout
    named = rrcli("validate", "--json", cwd=tmp_path, env={"RRCLI_PROFILE": "demo"})
    assert (0, "demo") == (named.returncode, json.loads(named.stdout)["profile"]["name"])


def test_piped_stderr_is_never_wrapped(tmp_path):
    """Messages longer than 80 columns stay on one line when stderr is a pipe: a failed
    prompt's message and the run's summary."""
    backend = "a-backend-with-a-name-long-enough-to-push-every-line-past-eighty-columns"
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": backend, "base_url": "http://127.0.0.1:9/v1"}],
        retry={"max_retries": 0},
    )
    done = rrcli("run", "--prompt", "hi", "-p", profile, cwd=tmp_path)
    assert 1 == done.returncode
    [failed] = [line for line in done.stderr.splitlines() if "prompt-1 failed" in line]
    assert failed.endswith("Connection refused (127.0.0.1:9)")  # the whole message on one line
    assert len(failed) > 80
    jobs = write_jobs(tmp_path / "a-jobs-file-with-a-long-name-for-the-summary-line.jsonl", 1)
    ran = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    [summary] = [line for line in ran.stderr.splitlines() if line.startswith("0 ok, 1 error")]
    assert summary.endswith(".traces.jsonl)")


def rounded(value, places):
    return all(round(x, places) == x for x in floats(value))


def floats(value):
    if isinstance(value, float):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from floats(item)
    elif isinstance(value, list):
        for item in value:
            yield from floats(item)


def test_json_outputs_round_their_floats(tmp_path, sim_server):
    """`stats --json` and `validate --probe --json` write milliseconds to 3 decimals and no
    float with a long tail."""
    server = sim_server(latency_ms=7, jitter_ms=5)
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 30)
    assert 0 == rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path).returncode
    stats = json.loads(rrcli("stats", "jobs.traces.jsonl", "--json", "--plot", cwd=tmp_path).stdout)
    group = stats["groups"][0]
    assert rounded([group["latency_ms"], group["ttft_ms"], group["tpot_ms"]], 3)
    assert rounded(stats, 6)
    checked = json.loads(rrcli("validate", profile, "--probe", "--json", cwd=tmp_path).stdout)
    assert rounded(checked["probe"], 3)


def test_a_profile_without_a_name_logs_its_file_name(tmp_path):
    """The run's log names a profile without a name by its file name, not None."""
    profile = write_profile(tmp_path / "nameless.toml", [{"id": "a", "provider": "sim"}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    done = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    [started] = [line for line in done.stderr.splitlines() if "rrcli.run_started" in line]
    assert re.search(r"profile=nameless\.toml\b", started), started


def test_shard_is_applied_before_limit(tmp_path):
    """--shard 0/2 --limit 3 runs the first three jobs of shard 0 (not those of the first three
    lines that fall in shard 0)."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 40)
    done = rrcli("run", jobs, "-p", "demo", "--shard", "0/2", "--limit", "3", "-q", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    shard = [f"j{i}" for i in range(40) if zlib.crc32(f"j{i}".encode()) % 2 == 0]
    ran = {r["id"] for r in read_jsonl(tmp_path / "jobs.results.jsonl")}
    assert set(shard[:3]) == ran
    assert 3 == len(calls(tmp_path / "jobs.traces.jsonl"))


def test_invalid_lines_in_a_shard_or_a_resume_do_not_crash(tmp_path):
    """An invalid line under --shard or --resume is an invalid result like any other."""
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(b'{"id": "a", "prompt": "x"}\nnot json\n' + orjson.dumps({"id": "b"}) + b"\n")
    for flags in (("--shard", "0/1"), ("--resume",)):
        done = rrcli("run", jobs, "-p", "demo", "--out", "r.jsonl", *flags, cwd=tmp_path)
        assert (1, False) == (done.returncode, "Traceback" in done.stderr), done.stderr
        invalid = [r["id"] for r in read_jsonl(tmp_path / "r.jsonl") if r["status"] == "invalid"]
        assert {"line-2", "b"} <= set(invalid)


def test_typos_get_one_kind_of_hint_wherever_they_are(tmp_path):
    """A misspelt key gets "did you mean" whether it misses a shape (`prmpt`, `mesages`), sits
    beside one (`sytem`), names an endpoint (`embedding`) or is a profile's (`modle`); a key
    like no key of ours (`question`) is not guessed at."""
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(
        '{"id": "a", "prmpt": "x"}\n{"id": "b", "prompt": "x", "sytem": "s"}\n'
        '{"id": "c", "mesages": []}\n{"id": "d", "endpoint": "embedding", "input": "x"}\n'
        '{"id": "e", "question": "x"}\n'
    )
    checked = rrcli("validate", "demo", "--jobs", jobs, cwd=tmp_path)
    assert 1 == checked.returncode
    hints = [re.search(r"did you mean \"(\w+)\"|none of the job shapes", line).group(1)
             for line in checked.stdout.splitlines()[-5:]]  # fmt: skip
    assert ["prompt", "system", "messages", "embeddings", None] == hints
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "modle": "m"}])
    typo = rrcli("validate", profile, "--json", cwd=tmp_path)
    [error] = json.loads(typo.stdout)["errors"]
    assert ('unknown key "modle"', 'did you mean "model"?') == (error["message"], error["fix"])
