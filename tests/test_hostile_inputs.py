"""Hostile local files that used to end in a traceback (docs/reliability.md): profiles nested or
dotted past reason, header values and keys that cannot be sent, a NUL in a base_url, trace lines
nested too deep or counting tokens past 64 bits. Each is a clear error naming the file and the
place (``validate`` catches what ``run`` would choke on), in bounded time and memory: every
command here runs under a 3 GB address-space limit.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import orjson
import pytest
from hostile import chat
from runkit import calls, rrcli, write_jobs, write_profile

ADDRESS_SPACE = 3 * 1024**3


def limited(*args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout=60):
    """``rrcli ARGS`` under a 3 GB address-space limit; (result, seconds taken)."""
    started = time.monotonic()
    result = rrcli(*args, cwd=cwd, env=env, timeout=timeout, memory=ADDRESS_SPACE)
    return result, time.monotonic() - started


BACKEND = '[[backends]]\nid = "a"\nprovider = "sim"\n'
DOTTED = ".".join(["a"] * 32_000)  # 64 KB

SHAPES = {
    "nested arrays": (f"x = {'[' * 100_000}{']' * 100_000}\n{BACKEND}", 1, "nested"),
    "nested tables": (f"x = {'{a=' * 5_000}1{'}' * 5_000}\n{BACKEND}", 1, "nested"),
    "a dotted key": (f"{BACKEND}{DOTTED} = 1\n", 4, "dotted key"),
    "a dotted params key": (f"{BACKEND}params.{DOTTED} = 1\n", 4, "dotted key"),
    "a dotted table": (f"[{DOTTED}]\nx = 1\n{BACKEND}", 1, "dotted key"),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_profile_nested_or_dotted_past_reason_is_refused_at_its_line(tmp_path, shape):
    """Arrays nested 100,000 deep, inline tables 5,000 deep, a 64 KB dotted key: ``validate``
    and ``run`` refuse the profile at once (exit 2) naming the file and the line, without a
    traceback, in seconds and under 3 GB (the dotted key took 47 s and 6 GB in the parser)."""
    text, line, what = SHAPES[shape]
    profile = tmp_path / "p.toml"
    profile.write_text(text)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    for args in (("validate", profile), ("run", jobs, "-p", profile)):
        result, took = limited(*args, cwd=tmp_path)
        assert 2 == result.returncode, result.stderr
        assert f"p.toml:{line}: " in result.stderr and what in result.stderr
        assert "Traceback" not in result.stderr
        assert took < 15.0
    assert not (tmp_path / "jobs.results.jsonl").exists()


def test_a_64_kb_key_without_dots_is_an_unknown_key_in_seconds(tmp_path):
    """A 64 KB bare key and a 64 KB quoted key full of dots are read in linear time: each an
    unknown key at its line (exit 1), in seconds."""
    profile = tmp_path / "p.toml"
    profile.write_text(f'{BACKEND}{"a" * 65_536} = 1\n"{"b." * 32_768}" = 2\n')
    result, took = limited("validate", profile, cwd=tmp_path)
    assert 1 == result.returncode, result.stderr
    assert 2 == result.stdout.count("unknown key")
    assert took < 15.0


ZERO_WIDTH = "sk-abc\u200bdef0123456789"


@pytest.mark.parametrize(
    ("backend", "env", "where", "what"),
    [
        ({"headers": {"x-team": "caf\u00e9"}}, {}, "headers.x-team", "U+00E9 at character 4"),
        ({"credentials": {"api_key": ZERO_WIDTH}}, {}, "credentials.api_key", "U+200B"),
        (
            {"credentials": {"api_key_env": "HOSTILE_KEY"}},
            {"HOSTILE_KEY": ZERO_WIDTH},
            "credentials.api_key_env",
            "U+200B at character 7",
        ),
        ({"base_url": "http://127.0.0.1:9/v1\u0000x"}, {}, "base_url", "U+0000"),
    ],
    ids=["non-ascii header", "zero-width key", "zero-width key variable", "nul in base_url"],
)
def test_what_cannot_be_sent_is_caught_by_validate(
    tmp_path, hostile_server, backend, env, where, what
):
    """A non-ASCII header value, a zero-width space inside a key (written or in its variable)
    and a NUL in base_url are profile errors at their key, from ``validate`` (exit 1) and from
    ``run`` (exit 2, nothing sent) — not a UnicodeEncodeError or InvalidURL mid-run. The key is
    never repeated in the message."""
    server = hostile_server(lambda _: chat())
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "h", "base_url": server.openai_url, **backend}]
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    for code, args in ((1, ("validate", profile)), (2, ("run", jobs, "-p", profile))):
        result = rrcli(*args, cwd=tmp_path, env=env)
        output = result.stdout + result.stderr
        assert code == result.returncode, output
        assert f'backends[0] (id "h"): {where}: ' in output and what in output
        assert "Traceback" not in output and "def0123456789" not in output
    assert [] == server.requests


def test_stats_counts_a_nested_line_and_bigint_tokens_as_malformed(tmp_path, hostile_server):
    """A trace of four good calls with a line nested 100,000 deep and lines claiming 2^70,
    2^64 − 1 or 10^400 tokens: ``stats`` and ``stats --json`` report the four calls and the four
    malformed lines (exit 0, no traceback), under 3 GB."""
    server = hostile_server(lambda _: chat({"prompt_tokens": 3, "completion_tokens": 2}))
    profile = write_profile(tmp_path / "p.toml", [{"id": "h", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    assert 0 == rrcli("run", jobs, "-p", profile, cwd=tmp_path).returncode
    traces = tmp_path / "jobs.traces.jsonl"
    call = calls(traces)[0]
    hostile = [
        b'{"event": "call", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        json.dumps({**call, "input_tokens": 2**70}).encode(),
        json.dumps({**call, "output_tokens": 2**64 - 1}).encode(),
        json.dumps({**call, "output_tokens": 10**400}).encode(),
    ]
    with open(traces, "ab") as f:
        f.write(b"\n".join(hostile) + b"\n")
    table, _ = limited("stats", traces, cwd=tmp_path)
    assert 0 == table.returncode, table.stderr
    assert "malformed lines: 4" in table.stdout + table.stderr
    result, _ = limited("stats", traces, "--json", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    report = orjson.loads(result.stdout)
    assert (4, 4, 12) == (
        report["total"]["calls"],
        report["malformed_lines"],
        report["total"]["input_tokens"],
    )
