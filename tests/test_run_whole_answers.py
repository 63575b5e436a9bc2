"""Results keep everything the provider said (SPEC §12), through ``rrcli run`` end to end.

Canned servers on loopback answer with whole bodies and streams (tests/answers.py): tool calls,
three choices, logprobs, a refusal, reasoning, cache and reasoning token counts, a system
fingerprint. The CLI runs in its own process against them, plain and streamed, for both APIs.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from answers import (
    ANTHROPIC_BODY,
    OPENAI_BODY,
    TOOL_CALLS,
    TOOLS,
    anthropic_events,
    openai_events,
)
from canned import Request, json_answer, plain_or_streamed
from runkit import read_jsonl, rrcli, write_profile

from rrcli.providers.base import Call

CANNED = {
    "openai": (OPENAI_BODY, openai_events(OPENAI_BODY), "/v1"),
    "anthropic": (ANTHROPIC_BODY, anthropic_events(ANTHROPIC_BODY), ""),
}
JOB = {"id": "t1", "prompt": "Weather and time in Paris?", "params": {"tools": TOOLS}}
BOTH = pytest.mark.parametrize("provider", ["openai", "anthropic"])
STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


def run(
    tmp_path: Path, url: str, provider: str, *flags: str, jobs: list[dict] | None = None
) -> list[dict[str, Any]]:
    """``rrcli run`` of ``jobs`` (the tools job) on one backend at ``url``; its result lines."""
    name = "-".join([provider, *(f.strip("-") for f in flags)]) or "run"
    folder = tmp_path / name
    folder.mkdir()
    backend = {"id": "b", "provider": provider, "base_url": url}
    profile = write_profile(folder / "p.toml", [backend], retry={"max_retries": 1})
    path = folder / "jobs.jsonl"
    path.write_bytes(b"".join(orjson.dumps(job) + b"\n" for job in jobs or [JOB]))
    result = rrcli("run", path, "-p", profile, *flags, cwd=folder)
    assert "Traceback" not in result.stderr, result.stderr
    return read_jsonl(folder / "jobs.results.jsonl")


def served(canned_server, provider: str) -> str:
    body, events, suffix = CANNED[provider]
    return canned_server(plain_or_streamed(body, events)).url + suffix


def without_latency(line: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in line.items() if k != "latency_ms"}


@BOTH
def test_tool_calls_are_the_same_from_both_providers_plain_and_streamed(
    tmp_path, canned_server, provider
):
    """A tools job answered with two tool calls: the result's ``tool_calls`` are in OpenAI's
    shape (arguments JSON text) whichever API served it, finish reason ``tool_calls``; the
    streamed result line equals the plain one but for its latency."""
    url = served(canned_server, provider)
    [plain] = run(tmp_path, url, provider)
    [streamed] = run(tmp_path, url, provider, "--stream")
    assert (TOOL_CALLS, "tool_calls") == (plain["tool_calls"], plain["finish_reason"])
    assert without_latency(plain) == without_latency(streamed)


def test_an_openai_line_keeps_everything_in_its_order(tmp_path, canned_server):
    """An OpenAI answer with n = 3: the line's keys in the documented order; usage with the
    cached and reasoning counts; the first choice's fields at the top; three choices, each
    with its output, finish reason, tool calls, refusal and logprobs as the server said."""
    [line] = run(tmp_path, served(canned_server, "openai"), "openai")
    assert ["id", "status", "deployment", "model", "output", "tool_calls", "finish_reason",
            "usage", "attempts", "latency_ms", "request_id", "system_fingerprint", "metadata",
            "reasoning_content", "logprobs", "choices"] == list(line)  # fmt: skip
    usage = {"input_tokens": 50, "output_tokens": 30, "cached_input_tokens": 32,
             "reasoning_tokens": 12}  # fmt: skip
    assert (usage, "fp_canned", "chatcmpl-canned") == (
        line["usage"],
        line["system_fingerprint"],
        line["request_id"],
    )
    first, second, third = (choice for choice in OPENAI_BODY["choices"])
    assert [
        {"output": "", "finish_reason": "tool_calls", "tool_calls": TOOL_CALLS,
         "reasoning_content": "Two tools are needed.", "logprobs": first["logprobs"]},
        {"output": "Sunny in Paris, 21 degrees.", "finish_reason": "stop", "tool_calls": None,
         "logprobs": second["logprobs"]},
        {"output": "", "finish_reason": "stop", "tool_calls": None,
         "refusal": "I can't help with that.", "logprobs": third["logprobs"]},
    ] == line["choices"]  # fmt: skip
    assert (first["logprobs"], "Two tools are needed.") == (
        line["logprobs"],
        line["reasoning_content"],
    )


def test_an_anthropic_line_keeps_thinking_text_and_cache_reads(tmp_path, canned_server):
    """An Anthropic answer: text blocks as output, thinking as reasoning_content, tool_use
    blocks as tool calls, cache reads counted in input tokens and as cached_input_tokens."""
    [line] = run(tmp_path, served(canned_server, "anthropic"), "anthropic")
    usage = {"input_tokens": 50, "output_tokens": 30, "cached_input_tokens": 32}
    assert ("Let me check both.", "Two tools are needed.", usage) == (
        line["output"],
        line["reasoning_content"],
        line["usage"],
    )


@BOTH
@STREAMED
def test_keep_response_is_the_body_the_server_sent(tmp_path, canned_server, provider, stream):
    """--keep-response adds ``response``, last: the body as the server sent it; for a stream,
    the body its events fold into, which for these streams is the same body."""
    flags = ["--keep-response", *(["--stream"] if stream else [])]
    [line] = run(tmp_path, served(canned_server, provider), provider, *flags)
    assert CANNED[provider][0] == line["response"]
    assert "response" == list(line)[-1]


def validate(fmt: str, line: dict[str, Any]) -> dict[str, Any]:
    """The body of a batch output line, validated by the official SDK's type."""
    if fmt == "openai-batch":
        types = pytest.importorskip("openai.types.chat")
        body = line["response"]["body"]
        types.ChatCompletion.model_validate(body)
        return body
    types = pytest.importorskip("anthropic.types")
    body = line["result"]["message"]
    types.Message.model_validate(body)
    return body


@BOTH
@STREAMED
@pytest.mark.parametrize("fmt", ["openai-batch", "anthropic-batch"])
def test_batch_bodies_are_whole_whichever_api_served_them(
    tmp_path, canned_server, provider, stream, fmt
):
    """Both batch formats, whichever API served the job, streamed or not: a body the official
    SDK's type accepts, carrying the tool calls (OpenAI ``tool_calls``, Anthropic ``tool_use``
    blocks with the arguments as input) and the stop in the format's words."""
    flags = ["--format", fmt, *(["--stream"] if stream else [])]
    [line] = run(tmp_path, served(canned_server, provider), provider, *flags)
    body = validate(fmt, line)
    if fmt == "openai-batch":
        choice = body["choices"][0]
        calls = choice["message"]["tool_calls"]
        assert (TOOL_CALLS, "tool_calls") == (calls, choice["finish_reason"])
    else:
        uses = [
            (b["id"], b["name"], b["input"]) for b in body["content"] if b["type"] == "tool_use"
        ]
        expected = [
            ("call_weather", "get_weather", {"city": "Paris"}),
            ("call_time", "get_time", {"tz": "CET", "utc": False}),
        ]
        assert (expected, "tool_use") == (uses, body["stop_reason"])


@STREAMED
def test_batch_bodies_of_the_same_api_are_the_servers(tmp_path, canned_server, stream):
    """openai-batch from an OpenAI server and anthropic-batch from an Anthropic one: the body
    is the server's (for a stream, the one it folds into), nothing added or changed."""
    flags = ["--stream"] if stream else []
    [openai] = run(tmp_path, served(canned_server, "openai"), "openai",
                   "--format", "openai-batch", *flags)  # fmt: skip
    [anthropic] = run(tmp_path, served(canned_server, "anthropic"), "anthropic",
                      "--format", "anthropic-batch", *flags)  # fmt: skip
    assert OPENAI_BODY == openai["response"]["body"]
    assert ANTHROPIC_BODY == anthropic["result"]["message"]


def test_a_plain_text_answer_line_has_none_of_the_new_keys(tmp_path, canned_server):
    """A plain text answer (no tool calls, one choice, no logprobs, no details) gives the line
    SPEC §4 always had, key for key."""
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}  # fmt: skip
    url = canned_server(json_answer(200, body)).url + "/v1"
    [line] = run(tmp_path, url, "openai", jobs=[{"id": "q", "prompt": "2+2?"}])
    assert ["id", "status", "deployment", "model", "output", "finish_reason", "usage",
            "attempts", "latency_ms", "request_id", "metadata"] == list(line)  # fmt: skip
    assert {"input_tokens": 3, "output_tokens": 1} == line["usage"]


def two_turns(first: dict[str, Any], then: dict[str, Any]):
    """An answer giving ``first`` to the first request and ``then`` to every later one."""
    bodies = [orjson.dumps(first), orjson.dumps(then)]
    seen: list[Request] = []

    def answer(request: Request) -> tuple[int, dict[str, str], bytes]:
        seen.append(request)
        return 200, {"content-type": "application/json"}, bodies[min(len(seen) - 1, 1)]

    return answer


SESSION = {"id": "s1", "turns": ["Weather in Paris?", "Thanks!"], "params": {"tools": TOOLS}}


def test_a_session_sends_its_tool_calls_back_in_the_history(tmp_path, canned_server):
    """A session whose first reply is tool calls (OpenAI): the second turn's request carries
    the assistant message with those tool calls, and the line's first turn entry has them."""
    text = {"id": "c2", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "You're welcome."}}]}  # fmt: skip
    server = canned_server(two_turns(OPENAI_BODY, text))
    [line] = run(tmp_path, server.url + "/v1", "openai", jobs=[SESSION])
    assistant = server.requests[1].body["messages"][1]
    assert ("assistant", TOOL_CALLS) == (assistant["role"], assistant["tool_calls"])
    assert [TOOL_CALLS, None] == [turn.get("tool_calls") for turn in line["turns"]]


@pytest.mark.skipif(
    "dialect" not in Call.__slots__,
    reason="needs the translation of history messages for Anthropic (providers/translate.py)",
)
def test_an_anthropic_session_sends_tool_use_blocks_back(tmp_path, canned_server):
    """A session whose first reply (Anthropic) is tool_use blocks: the second turn's request
    carries an assistant message with those tool_use blocks."""
    text = copy.deepcopy(ANTHROPIC_BODY)
    text.update(content=[{"type": "text", "text": "You're welcome."}], stop_reason="end_turn")
    server = canned_server(two_turns(ANTHROPIC_BODY, text))
    run(tmp_path, server.url, "anthropic", jobs=[SESSION])
    assistant = server.requests[1].body["messages"][1]
    uses = [(b["id"], b["name"], b["input"]) for b in assistant["content"]
            if b["type"] == "tool_use"]  # fmt: skip
    assert [("call_weather", "get_weather", {"city": "Paris"}),
            ("call_time", "get_time", {"tz": "CET", "utc": False})] == uses  # fmt: skip


def test_tool_arguments_that_are_not_json_make_the_job_an_error(tmp_path, canned_server):
    """A tool call whose arguments are not JSON: the job is an error ``invalid_response``
    naming the arguments, retried first (another sample may be whole), the body kept in the
    error; the other job of the run is ok, no traceback, exit 1."""
    bad = copy.deepcopy(OPENAI_BODY)
    bad["choices"][0]["message"]["tool_calls"][1]["function"]["arguments"] = '{"tz": CET'

    def answer(request: Request) -> tuple[int, dict[str, str], bytes]:
        body = bad if "bad" in request.body["messages"][0]["content"] else OPENAI_BODY
        return 200, {"content-type": "application/json"}, orjson.dumps(body)

    url = canned_server(answer).url + "/v1"
    jobs = [{"id": "bad", "prompt": "bad"}, {"id": "good", "prompt": "good"}]
    lines = {line["id"]: line for line in run(tmp_path, url, "openai", jobs=jobs)}
    error = lines["bad"]["error"]
    assert ("error", 2, "invalid_response", True) == (
        lines["bad"]["status"],
        lines["bad"]["attempts"],
        error["type"],
        error["retryable"],
    )
    assert "choices[0].message.tool_calls[1].function.arguments" in error["message"]
    assert "'{\"tz\": CET'" in error["message"]
    assert bad == orjson.loads(error["body"])
    assert ("ok", TOOL_CALLS) == (lines["good"]["status"], lines["good"]["tool_calls"])
