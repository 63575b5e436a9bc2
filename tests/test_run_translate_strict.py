"""Mixed pools through the CLI against strict servers of both APIs (tests/strict_api.py), which
answer 400 exactly where the real APIs do: what the other API cannot say is routed to the
backends that can say it, invalid with the reason where none can, and counted by
``validate --jobs``; what it can say is sent in its terms. No server ever answers 400.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from runkit import read_jsonl, rrcli, write_profile
from strict_api import strict_servers

HISTORY = [{"role": "user", "content": "Hi"}]
#: OpenAI-shaped jobs whose every part the Messages API can say
SAYABLE = [
    {"id": "empty-turn", "messages": [*HISTORY, {"role": "assistant", "content": ""},
                                      {"role": "user", "content": "Still there?"}]},
    {"id": "blank-turn", "messages": [*HISTORY, {"role": "assistant", "content": " \n"},
                                      {"role": "user", "content": "Still there?"}]},
    {"id": "refusal-part", "messages": [
        *HISTORY, {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
        {"role": "user", "content": "Why?"}]},
    {"id": "refusal-field", "messages": [
        *HISTORY, {"role": "assistant", "content": "", "refusal": "I can't."},
        {"role": "user", "content": "Why?"}]},
    {"id": "stop-words", "prompt": "Count", "params": {"stop": ["END", "\n\nUser:"]}},
    {"id": "loose-tool", "prompt": "Weather?", "params": {"tools": [
        {"type": "function", "function": {"name": "weather", "strict": False,
                                          "parameters": {"type": "object"}}}]}},
]  # fmt: skip
STRICT_SCHEMA = {"name": "out", "strict": True, "schema": {"type": "object"}}
#: OpenAI-shaped jobs the Messages API cannot say, and the place each reason names
UNSAYABLE = {
    "newline-stop": ({"prompt": "Count", "params": {"stop": ["\n"]}}, "stop"),
    "blank-stop": ({"prompt": "Count", "params": {"stop": "\n\n"}}, "stop"),
    "named": ({"messages": [{"role": "user", "content": "Hi", "name": "ann"}]}, "messages[0].name"),
    "strict-tool": ({"prompt": "Weather?", "params": {"tools": [
        {"type": "function", "function": {"name": "weather", "strict": True,
                                          "parameters": {"type": "object"}}}]}}, "tools"),
    "strict-format": ({"prompt": "JSON", "params": {"response_format": {
        "type": "json_schema", "json_schema": STRICT_SCHEMA}}}, "response_format"),
}  # fmt: skip


def batch_line(custom_id: str, stops: list[str]) -> dict[str, Any]:
    """An Anthropic Message Batches line with ``stops`` as its stop sequences."""
    messages = [{"role": "user", "content": "Count to ten"}]
    params = {"max_tokens": 50, "stop_sequences": stops, "messages": messages}
    return {"custom_id": custom_id, "params": params}


FIVE_STOPS = batch_line("five-stops", ["a", "b", "c", "d", "e"])
FOUR_STOPS = batch_line("four-stops", ["a", "b", "c", "d"])


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def unsayable_lines() -> list[dict[str, Any]]:
    return [{"id": name, **job} for name, (job, _) in UNSAYABLE.items()]


def results(tmp_path: Path, name: str = "jobs") -> dict[str, dict[str, Any]]:
    lines = read_jsonl(tmp_path / f"{name}.results.jsonl")
    return {line["id"]: line for line in lines}


def test_an_anthropic_pool_takes_what_it_can_say_and_refuses_the_rest(tmp_path) -> None:
    """On an Anthropic-only pool, a history with an empty or blank assistant turn or a
    refusal-only one, stop sequences with text, a tool that is not strict: each sent and ok.
    A whitespace-only stop, a message's ``name``, a strict tool, a strict response_format:
    each invalid, naming what and the backend, nothing sent for it; ``validate --jobs`` lists
    them first. The strict server answers no 400."""
    with strict_servers() as (_, anthropic):
        backend = {"id": "cl", "provider": "anthropic", "base_url": anthropic.url}
        profile = write_profile(tmp_path / "p.toml", [backend])
        jobs = write_lines(tmp_path / "jobs.jsonl", SAYABLE + unsayable_lines())
        checked = rrcli("validate", profile, "--jobs", jobs, cwd=tmp_path)
        run = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
        assert 1 == run.returncode, run.stderr
        assert ([], len(SAYABLE)) == (anthropic.refused, len(anthropic.bodies))
    by_id = results(tmp_path)
    assert {job["id"]: "ok" for job in SAYABLE} == {
        job["id"]: by_id[job["id"]]["status"] for job in SAYABLE
    }
    for name, (_, place) in UNSAYABLE.items():
        error = by_id[name]["error"]["message"]
        assert ("invalid", True) == (by_id[name]["status"], f"{place}" in error), error
        assert "anthropic backend cl" in error
    assert (
        f"{len(SAYABLE)} jobs" in checked.stdout and f"{len(UNSAYABLE)} invalid" in checked.stdout
    )
    assert "messages[0].name cannot be sent to anthropic backend cl" in checked.stdout


def test_an_openai_pool_refuses_a_batch_line_with_five_stop_sequences(tmp_path) -> None:
    """A Message Batches line with five stop sequences cannot go to an OpenAI-compatible
    backend (at most four): invalid, naming them; one with four is sent and ok. The strict
    server answers no 400."""
    with strict_servers() as (openai, _):
        profile = write_profile(tmp_path / "p.toml", [{"id": "gpt", "base_url": openai.url}])
        jobs = write_lines(tmp_path / "jobs.jsonl", [FIVE_STOPS, FOUR_STOPS])
        run = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
        assert 1 == run.returncode, run.stderr
        assert ([], 1) == (openai.refused, len(openai.bodies))
    by_id = results(tmp_path)
    assert ("invalid", "ok") == (by_id["five-stops"]["status"], by_id["four-stops"]["status"])
    assert (
        "stop_sequences cannot be sent to openai backend gpt"
        in (by_id["five-stops"]["error"]["message"])
    )
    assert ["a", "b", "c", "d"] == openai.bodies[0]["stop"]


def test_a_mixed_pool_sends_each_job_where_it_can_be_said_and_validate_counts_them(
    tmp_path,
) -> None:
    """A pool of one backend of each API: every job is ok; the ones Anthropic cannot say all go
    to the OpenAI backend, the five-stop batch line to the Anthropic one, and
    ``validate --jobs`` counts those as jobs only some backends can say. Neither strict server
    answers a 400."""
    with strict_servers() as (openai, anthropic):
        backends = [
            {"id": "cl", "provider": "anthropic", "base_url": anthropic.url},
            {"id": "gpt", "base_url": openai.url},
        ]
        profile = write_profile(tmp_path / "p.toml", backends)
        lines = SAYABLE + unsayable_lines() + [FIVE_STOPS, FOUR_STOPS]
        jobs = write_lines(tmp_path / "jobs.jsonl", lines)
        checked = rrcli("validate", profile, "--jobs", jobs, "--json", cwd=tmp_path)
        text = rrcli("validate", profile, "--jobs", jobs, cwd=tmp_path)
        run = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
        assert 0 == run.returncode, run.stderr
        assert ([], []) == (openai.refused, anthropic.refused)
    served = {key: line["deployment"] for key, line in results(tmp_path).items()}
    assert {name: "gpt" for name in UNSAYABLE} == {name: served[name] for name in UNSAYABLE}
    assert "cl" == served["five-stops"]
    report = orjson.loads(checked.stdout)["jobs"]
    assert (len(lines), len(UNSAYABLE) + 1, []) == (
        report["jobs"],
        report["narrowed"],
        report["invalid"],
    )
    assert f"{len(UNSAYABLE) + 1} only for the backends that can say them" in text.stdout
