"""What the providers keep of a server's answer: its request id and its error body.

A canned server (the standard library's threaded HTTP server on a free loopback port) answers
every POST with what the test says, so the body's id, the request-id header and the error body
can each be chosen; the providers talk to it over real sockets.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from canned import Answer, Request, json_answer, sse_answer
from runkit import read_jsonl, rrcli, write_jobs, write_profile

from rrcli.config.profile import Backend, RetrySettings
from rrcli.errors import ProviderError
from rrcli.providers import make_provider
from rrcli.providers.base import BODY_LIMIT, Call, Reply

KEY = "sk-canned-secret-0123456789"
MESSAGES = [{"role": "user", "content": "hi"}]


def send(provider: str, url: str, call: Call, key: str | None = KEY) -> Reply:
    backend = Backend(id="b", provider=provider, base_url=url, model="m", allow_private=True)

    async def go() -> Reply:
        adapter = make_provider(backend, key, retry=RetrySettings(), seed=None)
        try:
            return await adapter.send(call)
        finally:
            await adapter.aclose()

    return asyncio.run(go())


OPENAI_BODY = {
    "model": "m",
    "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
}
ANTHROPIC_BODY = {
    "type": "message",
    "model": "m",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1, "output_tokens": 1},
}
PLAIN = {
    "openai": ("/v1", OPENAI_BODY, "x-request-id"),
    "anthropic": ("", ANTHROPIC_BODY, "request-id"),
}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_bodys_id_is_the_request_id_before_the_header(canned, provider: str) -> None:
    """A plain answer's request id is the body's ``id``; a body without one gives the
    provider's request-id header (``x-request-id`` for OpenAI, ``request-id`` for Anthropic)."""
    suffix, body, header = PLAIN[provider]
    with_id = canned(json_answer(200, {**body, "id": "body-id"}, {header: "header-id"}))
    without_id = canned(json_answer(200, body, {header: "header-id"}))
    ids = [send(provider, url + suffix, Call(MESSAGES)).request_id for url in (with_id, without_id)]
    assert ["body-id", "header-id"] == ids


def test_an_openai_stream_takes_the_first_chunks_id(canned) -> None:
    """A streamed OpenAI answer's request id is its first chunk's ``id``, not a later chunk's
    nor the ``x-request-id`` header; chunks without ids fall back to the header."""

    def chunk(id_: str | None, content: str, finish: str | None = None) -> dict:
        delta = {"content": content}
        return {"id": id_, "model": "m", "choices": [{"delta": delta, "finish_reason": finish}]}

    header = {"x-request-id": "header-id"}
    with_ids = [(None, chunk("first-id", "o")), (None, chunk("later-id", "k", "stop"))]
    without = [(None, chunk(None, "o")), (None, chunk(None, "k", "stop"))]
    urls = [
        canned(sse_answer([*events, (None, "[DONE]")], header)) for events in (with_ids, without)
    ]
    replies = [send("openai", url + "/v1", Call(MESSAGES, stream=True)) for url in urls]
    assert [("ok", "first-id"), ("ok", "header-id")] == [(r.output, r.request_id) for r in replies]


def test_an_anthropic_stream_takes_the_messages_id(canned) -> None:
    """A streamed Anthropic answer's request id is message_start's ``message.id``, not the
    ``request-id`` header; without one, the header's."""

    def events(message_id: str | None) -> list[tuple[str, object]]:
        return [
            ("message_start", {"type": "message_start", "message": {"id": message_id}}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "ok"}}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            ("message_stop", {"type": "message_stop"}),
        ]  # fmt: skip

    header = {"request-id": "header-id"}
    urls = [canned(sse_answer(events(i), header)) for i in ("msg-id", None)]
    replies = [send("anthropic", url, Call(MESSAGES, stream=True)) for url in urls]
    assert [("stop", "msg-id"), ("stop", "header-id")] == [
        (r.finish_reason, r.request_id) for r in replies
    ]


def echo_key(status: int) -> Answer:
    """An error answer whose JSON body repeats the Bearer key it received (as some gateways
    do in their messages)."""

    def answer(received: Request) -> tuple[int, dict[str, str], bytes]:
        key = received.headers.get("authorization", "").removeprefix("Bearer ")
        error = {"message": f"bad request for key {key}", "type": "invalid_request_error"}
        body = orjson.dumps({"error": error, "echo": key})
        return status, {"content-type": "application/json"}, body

    return answer


def failure(url: str, *, stream: bool = False) -> ProviderError:
    """The error of one OpenAI call to ``url``."""
    with pytest.raises(ProviderError) as info:
        send("openai", url + "/v1", Call(MESSAGES, stream=stream))
    return info.value


def test_an_error_keeps_the_servers_body_with_the_key_masked(canned) -> None:
    """A 400 whose body echoes the key: the error carries the body as text, every copy of the
    key masked, and the result's ``error`` object includes it as ``body``."""
    error = failure(canned(echo_key(400)))
    expected = '{"error":{"message":"bad request for key ***","type":"invalid_request_error"},'
    expected += '"echo":"***"}'
    assert expected == error.body
    assert expected == error.as_dict()["body"]
    assert KEY not in str(error.as_dict())


def test_a_long_error_body_is_cut_to_2_kb(canned) -> None:
    """A 500 with a 10,000-character body keeps its first 2,047 characters and an ellipsis
    (2,048 in all); a short one is kept whole; an empty one gives no ``body`` at all."""
    long = canned(lambda _: (500, {"content-type": "text/plain"}, b"x" * 10_000))
    short = canned(lambda _: (502, {"content-type": "text/plain"}, b"bad gateway"))
    empty = canned(lambda _: (503, {}, b""))
    cut = failure(long).body
    assert (BODY_LIMIT, "x" * (BODY_LIMIT - 1) + "…") == (len(cut), cut)
    assert "bad gateway" == failure(short).body
    assert (None, False) == (failure(empty).body, "body" in failure(empty).as_dict())


def test_an_error_event_in_a_stream_keeps_its_data_as_the_body(canned) -> None:
    """An ``error`` event inside a 200 stream: the error's body is the event's data, the key
    masked."""
    error = {"error": {"type": "server_error", "message": f"boom for {KEY}"}}
    url = canned(sse_answer([(None, error)], {}))
    got = failure(url, stream=True)
    assert ("server_error", '{"error":{"type":"server_error","message":"boom for ***"}}') == (
        got.type,
        got.body,
    )


def test_the_results_error_carries_the_body_with_the_key_masked(tmp_path, canned) -> None:
    """End to end: ``rrcli run`` against a server answering 400 with a body echoing the key
    writes a result whose ``error.body`` is that body with the key masked; the key is nowhere
    in the results file."""
    url = canned(echo_key(400))
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": url + "/v1", "credentials": {"api_key_env": "CANNED_KEY"}}],
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path, env={"CANNED_KEY": KEY})
    assert 1 == result.returncode, result.stderr
    [line] = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert ("http_400", "***") == (
        line["error"]["type"],
        orjson.loads(line["error"]["body"])["echo"],
    )
    assert KEY not in (tmp_path / "jobs.results.jsonl").read_text()
