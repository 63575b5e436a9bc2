"""Whole answers from ``rrcli sim`` (SPEC §12), through ``rrcli run`` end to end.

The sim answers a tools job with a deterministic call of the first tool (arguments built from its
schema), ``n`` choices, logprobs, reasoning and cached tokens on request, on both APIs, plain and
streamed; these tests hold what rrcli keeps of it. test_run_whole_answers.py does the same
against canned bodies chosen field by field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from runkit import read_jsonl, rrcli, write_profile
from simkit import post

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": CITY}}]
JOB = {"id": "w", "prompt": "Weather in Paris?", "params": {"tools": TOOLS, "max_tokens": 50}}
MODES = {"x-sim-mode": "reasoning,cache"}


def run(
    tmp_path: Path, backend: dict[str, Any], *flags: str, jobs: list[dict] | None = None
) -> tuple[int, list[dict[str, Any]]]:
    """``rrcli run`` of ``jobs`` (the tools job) on ``backend``: exit status and result lines."""
    folder = tmp_path / "-".join([backend["provider"], *(f.strip("-") for f in flags)])
    folder.mkdir()
    profile = write_profile(folder / "p.toml", [backend], retry={"max_retries": 1})
    path = folder / "jobs.jsonl"
    path.write_bytes(b"".join(orjson.dumps(job) + b"\n" for job in jobs or [JOB]))
    result = rrcli("run", path, "-p", profile, *flags, cwd=folder)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, read_jsonl(folder / "jobs.results.jsonl")


def backend(server, provider: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    url = server.openai_url if provider == "openai" else server.url
    return {"id": "b", "provider": provider, "base_url": url, "headers": headers or MODES}


def answer(line: dict[str, Any]) -> dict[str, Any]:
    """A line without what differs between two calls of the same job (latency, response ids)."""
    return {k: v for k, v in line.items() if k not in ("latency_ms", "request_id", "response")}


def test_sim_tool_calls_are_the_same_from_both_apis_plain_and_streamed(tmp_path, sim_server):
    """The sim's tool call for the same job, served by either API, plain or streamed: the same
    function and arguments in OpenAI's shape (only the call id's prefix is the API's), the
    same output, finish reason, reasoning and usage with cached tokens."""
    server = sim_server()
    lines = {}
    for provider in ("openai", "anthropic"):
        for flags in ((), ("--stream",)):
            code, [line] = run(tmp_path, backend(server, provider), *flags)
            assert 0 == code
            lines[provider, bool(flags)] = line
    for provider in ("openai", "anthropic"):
        assert answer(lines[provider, False]) == answer(lines[provider, True])
    openai, anthropic = lines["openai", False], lines["anthropic", False]
    [call] = openai["tool_calls"]
    assert ("get_weather", "tool_calls") == (call["function"]["name"], openai["finish_reason"])
    assert isinstance(orjson.loads(call["function"]["arguments"])["city"], str)
    assert ("call_", "toolu_") == (call["id"][:5], anthropic["tool_calls"][0]["id"][:6])
    same = ("output", "finish_reason", "reasoning_content")
    assert [openai[k] for k in same] == [anthropic[k] for k in same]
    assert [c["function"] for c in openai["tool_calls"]] == [
        c["function"] for c in anthropic["tool_calls"]
    ]
    assert 0 < openai["usage"]["cached_input_tokens"] == anthropic["usage"]["cached_input_tokens"]


def test_n_3_gives_three_choices_with_logprobs(tmp_path, sim_server):
    """``n`` = 3 with logprobs on an OpenAI-compatible server: three choices, each with its
    output, finish reason, tool calls and logprobs; the top-level fields are the first's."""
    job = {**JOB, "params": {**JOB["params"], "n": 3, "logprobs": True}}
    code, [line] = run(tmp_path, backend(sim_server(), "openai"), "--stream", jobs=[job])
    assert 0 == code
    choices = line["choices"]
    assert 3 == len(choices)
    assert [["output", "finish_reason", "tool_calls", "reasoning_content", "logprobs"]] * 3 == [
        list(c) for c in choices
    ]
    assert (line["tool_calls"], line["logprobs"]) == (
        choices[0]["tool_calls"],
        choices[0]["logprobs"],
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_keep_response_is_what_the_sim_answers(tmp_path, sim_server, provider):
    """--keep-response: the plain body is the sim's answer to that request (the same request
    sent again gets it, ids and time aside); a streamed run's folded body is the same."""
    server = sim_server()
    _, [plain] = run(tmp_path, backend(server, provider), "--keep-response")
    _, [streamed] = run(tmp_path, backend(server, provider), "--keep-response", "--stream")
    request = {"model": "sim", "messages": [{"role": "user", "content": JOB["prompt"]}],
               **JOB["params"]}  # fmt: skip
    if provider == "openai":
        again = post(server.openai_url + "/chat/completions", request, MODES).json()
    else:
        tools = [{"name": "get_weather", "input_schema": CITY}]
        headers = {**MODES, "anthropic-version": "2023-06-01"}
        again = post(server.url + "/v1/messages", {**request, "tools": tools}, headers).json()

    def same(body: dict[str, Any], *other: str) -> dict[str, Any]:
        return {k: v for k, v in body.items() if k not in ("id", "created", *other)}

    assert same(again) == same(plain["response"])
    # the sim's chunks do not carry the service_tier its plain bodies have
    assert same(plain["response"], "service_tier") == same(streamed["response"])


@pytest.mark.parametrize("fmt", ["openai-batch", "anthropic-batch"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_sim_batch_bodies_satisfy_the_sdk_types(tmp_path, sim_server, provider, fmt):
    """Streamed from either API, each batch format's body is accepted by the official SDK's
    type and carries the tool call."""
    _, [line] = run(tmp_path, backend(sim_server(), provider), "--stream", "--format", fmt)
    if fmt == "openai-batch":
        body = line["response"]["body"]
        pytest.importorskip("openai.types.chat").ChatCompletion.model_validate(body)
        assert "get_weather" == body["choices"][0]["message"]["tool_calls"][0]["function"]["name"]
    else:
        body = line["result"]["message"]
        pytest.importorskip("anthropic.types").Message.model_validate(body)
        assert ["get_weather"] == [b["name"] for b in body["content"] if b["type"] == "tool_use"]


def test_bad_tool_arguments_from_the_sim_are_retried_then_an_error(tmp_path, sim_server):
    """The sim's ``bad-arguments`` mode (arguments that are not JSON): once only, the retry on
    the same backend succeeds (attempts 2); always, the job is an error ``invalid_response``
    with the answer's body kept, exit 1, no traceback."""
    server = sim_server()
    once = {"x-sim-mode": "bad-arguments", "x-sim-times": "1"}
    code, [line] = run(tmp_path, backend(server, "openai", once))
    assert (0, "ok", 2) == (code, line["status"], line["attempts"])
    always = backend(server, "openai", {"x-sim-mode": "bad-arguments"})
    code, [line] = run(tmp_path, always, "--stream")
    assert (1, "error", 2, "invalid_response") == (
        code,
        line["status"],
        line["attempts"],
        line["error"]["type"],
    )
    assert "tool_calls[0].function.arguments is not a JSON object" in line["error"]["message"]
    assert "get_weather" in line["error"]["body"]


def test_the_sim_provider_calls_the_same_tool_as_the_sim_server(tmp_path, sim_server):
    """The in-process ``sim`` provider answers a tools job with the call the ``rrcli sim``
    server makes for it (same id, function and arguments), finish reason tool_calls; a job
    without tools still gets text."""
    server_code, [served] = run(tmp_path, backend(sim_server(), "openai", {}))
    local = {"id": "b", "provider": "sim", "base_url": "sim://local"}
    plain = {"id": "t", "prompt": "Weather in Paris?"}
    code, lines = run(tmp_path, local, jobs=[JOB, plain])
    assert (0, 0) == (server_code, code)
    assert (served["tool_calls"], "tool_calls", "") == (
        lines[0]["tool_calls"],
        lines[0]["finish_reason"],
        lines[0]["output"],
    )
    assert ("tool_calls" not in lines[1], "stop") == (True, lines[1]["finish_reason"])
