"""Hostile replies through the CLI: a server that pauses a turn forever, 200s that carry no
answer, and trace files whose numbers make no sense (docs/reliability.md).

Each server test starts a real loopback server that answers with the shape under test
(tests/hostile.py) and runs ``rrcli run`` against it as a user would.
"""

from __future__ import annotations

import time

import orjson
import pytest
from hostile import Canned
from runkit import calls, read_jsonl, rrcli, write_jobs, write_profile


def json_answer(body: dict) -> Canned:
    return Canned(200, {"content-type": "application/json"}, orjson.dumps(body))


def anthropic_message(content: object, stop_reason: str = "end_turn", **extra: object) -> Canned:
    """An Anthropic message with ``content`` as given (left out when it is ``...``)."""
    body: dict = {"id": "msg_hostile", "type": "message", "role": "assistant", "model": "m"}
    if content is not ...:
        body["content"] = content
    body |= {"stop_reason": stop_reason, "usage": {"input_tokens": 3, "output_tokens": 2}}
    return json_answer({**body, **extra})


# --- 5. continuations are bounded ----------------------------------------------------------


@pytest.mark.parametrize("limit", [None, 3])
def test_a_turn_paused_forever_ends_after_max_continuations(tmp_path, hostile_server, limit):
    """A server that answers every request with Anthropic's pause_turn: the turn is continued
    ``max_continuations`` times (default 10), then the job is an error of type
    ``too_many_continuations`` whose message names the key; nothing is retried, the run exits 1
    in seconds, and a --resume runs the job again."""
    text = [{"type": "text", "text": "thinking..."}]
    server = hostile_server(lambda _: anthropic_message(text, "pause_turn"))
    retry = {} if limit is None else {"max_continuations": limit}
    backend = {"id": "an", "provider": "anthropic", "base_url": server.url}
    profile = write_profile(tmp_path / "p.toml", [backend], retry=retry)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    started = time.monotonic()
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path, timeout=60)
    assert 1 == result.returncode, result.stderr
    assert time.monotonic() - started < 20.0
    expected_calls = (10 if limit is None else limit) + 1
    assert expected_calls == len(server.requests)
    traced = calls(tmp_path / "jobs.traces.jsonl")
    assert ["ok"] * (expected_calls - 1) + ["error"] == [c["outcome"] for c in traced]
    assert "too_many_continuations" == traced[-1]["error_type"]
    [line] = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert ("error", "too_many_continuations", False) == (
        line["status"],
        line["error"]["type"],
        line["error"]["retryable"],
    )
    assert "max_continuations" in line["error"]["message"]
    assert expected_calls == line["attempts"]


def test_max_continuations_is_validated(tmp_path):
    """A max_continuations that is negative or absurd is a profile error naming the key and
    its bound; nothing is sent."""
    backend = {"id": "a", "base_url": "http://127.0.0.1:9/v1"}
    for bad in (-1, 10**6):
        profile = write_profile(tmp_path / "p.toml", [backend], retry={"max_continuations": bad})
        result = rrcli("validate", profile, cwd=tmp_path)
        assert 1 == result.returncode
        assert "retry.max_continuations" in result.stdout + result.stderr
        assert "1000" in result.stdout + result.stderr
