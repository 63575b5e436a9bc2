"""Mixed pools through the CLI: each server receives only its own API, translated by the table.

A recording server (the standard library's threaded HTTP server on a free loopback port) keeps
every request body it receives and answers each API with a small valid reply: a chat completion
on ``/v1/chat/completions``, a message on ``/v1/messages`` (a call of the forced tool when the
request forces one). The CLI runs as a real process against it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
from runkit import read_jsonl, rrcli, write_profile
from test_translate import ANTHROPIC_BLOCKS, ANTHROPIC_REQUEST, OPENAI_PARTS, OPENAI_REQUEST

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}  # fmt: skip


def message_reply(request: dict[str, Any]) -> dict[str, Any]:
    """Text, or a call of the tool the request forces (its answer: ``{"answer": 42}``)."""
    choice = request.get("tool_choice") or {}
    content: list[dict[str, Any]] = [{"type": "text", "text": "ok"}]
    if choice.get("type") == "tool":
        content = [{"type": "tool_use", "id": "toolu_1", "name": choice["name"],
                    "input": {"answer": 42}}]  # fmt: skip
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": content,
        "stop_reason": "tool_use" if choice.get("type") == "tool" else "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }  # fmt: skip


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = orjson.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        self.server.received.append((self.path, body))  # type: ignore[attr-defined]
        answer = CHAT if self.path.endswith("/chat/completions") else message_reply(body)
        payload = orjson.dumps(answer)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def recorder() -> Iterator[Callable[[], tuple[str, list[tuple[str, dict[str, Any]]]]]]:
    """Start a recording server: (its base URL, the (path, body) of each request received)."""
    servers: list[ThreadingHTTPServer] = []

    def start() -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
        server.received = []  # type: ignore[attr-defined]
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}", server.received  # type: ignore[attr-defined]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


IMAGE = "data:image/png;base64,iVBORw0KGgo="
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
OPENAI_JOB = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [
            {"type": "text", "text": "Weather here?", "cache_control": {"type": "ephemeral"}},
            {"type": "image_url", "image_url": {"url": IMAGE, "detail": "low"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
    ],
    "params": {
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": WEATHER}}],
        "tool_choice": "auto", "parallel_tool_calls": False, "stop": "END", "user": "u1",
        "max_completion_tokens": 50, "n": 1, "logprobs": False, "temperature": 0.2,
        "stream_options": {"include_usage": True},
    },
}  # fmt: skip
ANTHROPIC_JOB = {
    "params": {
        "system": "Be brief.",
        "max_tokens": 50, "stop_sequences": ["END"], "metadata": {"user_id": "u1"},
        "tools": [{"name": "weather", "input_schema": WEATHER,
                   "cache_control": {"type": "ephemeral"}}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "thinking": {"type": "disabled"},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Weather here?", "cache_control": {"type": "ephemeral"}},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "iVBORw0KGgo="}}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "weather",
                 "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "rain"}]}]},
        ],
    },
}  # fmt: skip
SCHEMA_JOB = {
    "prompt": "What is six times seven?",
    "params": {"response_format": {"type": "json_schema",
                                   "json_schema": {"name": "reply", "schema": WEATHER}}},
}  # fmt: skip


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def parts(body: dict[str, Any]) -> set[str]:
    return {
        p["type"] for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]
    }


def test_each_server_of_a_mixed_pool_receives_only_its_own_api(tmp_path, recorder) -> None:
    """Round robin over an OpenAI and an Anthropic backend with OpenAI-shaped jobs and Message
    Batches lines interleaved: every body each server received has only its API's fields,
    roles and content types (no cache_control toward OpenAI), and every job is answered."""
    openai_url, to_openai = recorder()
    anthropic_url, to_anthropic = recorder()
    backends = [
        {"id": "oa", "base_url": openai_url + "/v1"},
        {"id": "an", "provider": "anthropic", "base_url": anthropic_url},
    ]
    profile = write_profile(tmp_path / "p.toml", backends)
    shapes = [OPENAI_JOB, ANTHROPIC_JOB, ANTHROPIC_JOB, OPENAI_JOB] * 2
    lines = [{"custom_id" if "params" in s and "messages" in s["params"] else "id": f"j{i}", **s}
             for i, s in enumerate(shapes)]  # fmt: skip
    jobs = write_lines(tmp_path / "jobs.jsonl", lines)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    assert ["ok"] * 8 == [r["status"] for r in read_jsonl(tmp_path / "jobs.results.jsonl")]
    assert (4, 4) == (len(to_openai), len(to_anthropic))
    for _, body in to_openai:
        assert (set(), set()) == (body.keys() - OPENAI_REQUEST, parts(body) - OPENAI_PARTS)
        assert b"cache_control" not in orjson.dumps(body)
    for _, body in to_anthropic:
        assert (set(), set()) == (body.keys() - ANTHROPIC_REQUEST, parts(body) - ANTHROPIC_BLOCKS)
        assert {"user", "assistant"} >= {m["role"] for m in body["messages"]}


def test_a_message_batches_tool_result_reaches_openai_as_tool_messages(tmp_path, recorder) -> None:
    """An Anthropic-shaped job's tool_use and tool_result history arrives at an OpenAI server as
    an assistant message with tool_calls and a ``tool`` message; its image as an image_url part;
    its system, stop, user and tools in OpenAI's words."""
    url, received = recorder()
    profile = write_profile(tmp_path / "p.toml", [{"id": "oa", "base_url": url + "/v1"}])
    jobs = write_lines(tmp_path / "jobs.jsonl", [{"custom_id": "a1", **ANTHROPIC_JOB}])
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    [(path, body)] = received
    assert "/v1/chat/completions" == path
    assert [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [
            {"type": "text", "text": "Weather here?"},
            {"type": "image_url", "image_url": {"url": IMAGE}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "rain"},
    ] == body["messages"]  # fmt: skip
    assert (["END"], "u1", 50, "auto", False) == (
        body["stop"], body["user"], body["max_tokens"], body["tool_choice"],
        body["parallel_tool_calls"],
    )  # fmt: skip
    tool = {"type": "function", "function": {"name": "weather", "parameters": WEATHER}}
    assert ([tool], "sim") == (body["tools"], body["model"])


def test_a_json_schema_job_on_anthropic_answers_with_the_json_text(tmp_path, recorder) -> None:
    """A json_schema response_format goes to Anthropic as a forced tool; the result's output is
    the tool's input as JSON text, finish reason stop, and no tool call, as an OpenAI server
    would answer."""
    url, received = recorder()
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "an", "provider": "anthropic", "base_url": url}]
    )
    jobs = write_lines(tmp_path / "jobs.jsonl", [{"id": "s", **SCHEMA_JOB}])
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    [line] = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert ('{"answer":42}', "stop", None) == (
        line["output"],
        line["finish_reason"],
        line.get("tool_calls"),
    )
    [(_, body)] = received
    assert ({"type": "tool", "name": "reply"}, "response_format" in body) == (
        body["tool_choice"],
        False,
    )


N2 = {"id": "many", "prompt": "Name a colour.", "params": {"n": 2, "seed": 7}}
PLAIN = {"id": "one", "prompt": "Name a colour."}
REASON = (
    "n = 2, seed = 7 cannot be sent to anthropic backends a, b: Anthropic's Messages API cannot "
    "express them"
)


def test_a_job_no_backend_can_express_is_invalid_with_the_reason(tmp_path, sim_server) -> None:
    """On an Anthropic-only pool an n = 2 job is invalid, naming the parameters and the
    backends, and nothing is sent for it; the other job runs. validate --jobs and --dry-run
    report it before a run."""
    server = sim_server()
    backends = [{"id": b, "provider": "anthropic", "base_url": server.url} for b in "ab"]
    profile = write_profile(tmp_path / "p.toml", backends)
    jobs = write_lines(tmp_path / "jobs.jsonl", [N2, PLAIN])
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 1 == result.returncode, result.stderr
    by_id = {r["id"]: r for r in read_jsonl(tmp_path / "jobs.results.jsonl")}
    assert ("invalid", "ok") == (by_id["many"]["status"], by_id["one"]["status"])
    assert by_id["many"]["error"]["message"].startswith(f"line 1: {REASON} — ")
    assert 1 == server.stats()["requests"]
    checked = rrcli("validate", profile, "--jobs", jobs, cwd=tmp_path)
    assert 1 == checked.returncode
    assert f"{jobs}: line 1: {REASON}" in checked.stdout
    planned = rrcli("run", jobs, "-p", profile, "--dry-run", cwd=tmp_path, env={"COLUMNS": "400"})
    assert 0 == planned.returncode, planned.stderr
    assert f"invalid: line 1: {REASON}" in planned.stdout


def test_a_mixed_pool_routes_a_job_only_to_backends_that_can_express_it(tmp_path, recorder) -> None:
    """n = 2 jobs in a pool of an Anthropic and an OpenAI backend all go to the OpenAI one (the
    Anthropic backend is excluded from their routing); plain jobs still use both."""
    openai_url, to_openai = recorder()
    anthropic_url, to_anthropic = recorder()
    backends = [
        {"id": "an", "provider": "anthropic", "base_url": anthropic_url},
        {"id": "oa", "base_url": openai_url + "/v1"},
    ]
    profile = write_profile(tmp_path / "p.toml", backends)
    lines = [{**N2, "id": f"n{i}"} for i in range(4)] + [{**PLAIN, "id": f"p{i}"} for i in range(4)]
    jobs = write_lines(tmp_path / "jobs.jsonl", lines)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    served = {r["id"]: r["deployment"] for r in read_jsonl(tmp_path / "jobs.results.jsonl")}
    assert {"oa"} == {served[f"n{i}"] for i in range(4)}
    assert {"an", "oa"} == {served[f"p{i}"] for i in range(4)}
    assert all("n" not in body for _, body in to_anthropic)
    assert 6 == len(to_openai)


def test_tool_arguments_that_are_not_json_make_an_error_result(tmp_path, recorder) -> None:
    """A history tool call whose arguments are not JSON cannot go to Anthropic: the job is an
    error naming the place (type untranslatable, not retried) and nothing is sent."""
    url, received = recorder()
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "an", "provider": "anthropic", "base_url": url}]
    )
    bad = {"id": "bad", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"}]}  # fmt: skip
    jobs = write_lines(tmp_path / "jobs.jsonl", [bad])
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 1 == result.returncode
    [line] = read_jsonl(tmp_path / "jobs.results.jsonl")
    error = line["error"]
    assert ("error", "untranslatable", False, 1) == (
        line["status"], error["type"], error["retryable"], line["attempts"],
    )  # fmt: skip
    assert error["message"].startswith("messages[1].tool_calls[0].function.arguments is not JSON")
    assert [] == received
