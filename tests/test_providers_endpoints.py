"""How the OpenAI-compatible adapter reads the answers of the endpoints besides chat.

Parsing only, with ``httpx2.MockTransport`` and canned bodies (the wire is tested end to end in
test_run_endpoints.py): what a request body holds, each answer's fields, and every answer a
client must refuse raising ``invalid_response`` with its reason.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from typing import Any

import httpx2
import pytest

from rrcli.config.profile import Backend, RetrySettings
from rrcli.errors import ProviderError
from rrcli.providers.base import Call, Reply
from rrcli.providers.openai import OpenAIProvider

BACKEND = Backend(id="b", base_url="http://api.test/v1", model="m")


def exchange(call: Call, answer: Any, *, sse: bool = False) -> tuple[dict[str, Any], Reply]:
    """(the request (path and body), the reply) of one attempt answered with ``answer``."""
    seen: dict[str, Any] = {}

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.update(path=request.url.path, body=json.loads(request.content))
        if sse:
            return httpx2.Response(200, text=answer, headers={"content-type": "text/event-stream"})
        return httpx2.Response(200, json=answer)

    async def go() -> Reply:
        provider = OpenAIProvider(
            BACKEND, "k", retry=RetrySettings(), transport=httpx2.MockTransport(handler)
        )
        try:
            return await provider.send(call)
        finally:
            await provider.aclose()

    return seen, asyncio.run(go())


def refusal(call: Call, answer: Any) -> str:
    with pytest.raises(ProviderError) as info:
        exchange(call, answer)
    assert "invalid_response" == info.value.type
    return info.value.message


def embed(value: object, **params: object) -> Call:
    return Call([], params, endpoint="embeddings", input=value)


def test_an_embeddings_request_is_params_model_and_input():
    """The body is the job's params, the backend's model and the input, posted to
    {base_url}/embeddings; vectors come back in input order whatever order the data came in."""
    data = [{"index": 1, "embedding": [2.0]}, {"index": 0, "embedding": [1.0]}]
    answer = {"data": data, "model": "m-2", "usage": {"prompt_tokens": 6}}
    seen, reply = exchange(embed(["a", "b"], dimensions=2), answer)
    assert "/v1/embeddings" == seen["path"]
    assert {"dimensions": 2, "model": "m", "input": ["a", "b"]} == seen["body"]
    assert ([[1.0], [2.0]], 6, "m-2") == (
        reply.embeddings,
        reply.input_tokens,
        reply.response_model,
    )


def test_base64_vectors_are_little_endian_float32():
    """A base64 embedding decodes to its float32 numbers."""
    text = base64.b64encode(struct.pack("<3f", 0.5, -2.0, 3.25)).decode()
    _, reply = exchange(embed("a"), {"data": [{"index": 0, "embedding": text}]})
    assert [[0.5, -2.0, 3.25]] == reply.embeddings


@pytest.mark.parametrize(
    ("call", "answer", "reason"),
    [
        (embed(["a", "b"]), {"data": [{"index": 0, "embedding": [1.0]}]}, "1 embeddings for 2"),
        (embed("a"), {"object": "list"}, "no data list of embeddings"),
        (embed(["a", "b"]), {"data": [{"index": 0, "embedding": [1.0]}] * 2}, "indexes [0, 0]"),
        (embed("a"), {"data": [{"index": 0, "embedding": "%%%"}]}, "embedding 0 is not base64"),
        (embed("a"), {"data": [{"index": 0, "embedding": 3}]}, "embedding 0 is neither"),
        (
            Call([], endpoint="responses", input="hi"),
            {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
             "output": [{"type": "reasoning", "summary": []}]},
            "no output text (status incomplete: max_output_tokens)",
        ),
        (Call([], endpoint="responses", input="hi"), {"id": "r"}, "no output list"),
        (
            Call([], endpoint="responses", input="hi"),
            {"output": [{"type": "function_call", "name": "f", "arguments": "{not json"}]},
            "function_call 'f' has arguments that are not a JSON object: '{not json'",
        ),
        (Call([], endpoint="completions", input="x"), {"choices": []}, "no choices"),
        (Call([], endpoint="completions", input="x"), {"choices": [{"index": 0}]}, "no text"),
        (Call([], endpoint="moderations", input=["a", "b"]), {"results": [{}]}, "1 moderation"),
    ],
)  # fmt: skip
def test_answers_a_client_must_refuse(call, answer, reason):
    """Each malformed answer is invalid_response naming what is wrong."""
    assert reason in refusal(call, answer)


def test_a_responses_answer_gives_text_tool_calls_and_its_id():
    """Output text joined, function calls in chat's tool_calls shape, the response's id, usage,
    reasoning summaries as reasoning_content; a cut response finishes with ``length``."""
    answer = {
        "id": "resp_9",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "a"},
                                            {"type": "output_text", "text": "b"}]},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        ],
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }  # fmt: skip
    call = Call([], {"instructions": "be brief"}, endpoint="responses", input="hi")
    seen, reply = exchange(call, answer)
    assert ("/v1/responses", {"instructions": "be brief", "model": "m", "input": "hi"}) == (
        seen["path"],
        seen["body"],
    )
    tool = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert ("ab", "length", [tool], "resp_9", 3, 4, "think") == (
        reply.output,
        reply.finish_reason,
        reply.tool_calls,
        reply.response_id,
        reply.input_tokens,
        reply.output_tokens,
        reply.reasoning_content,
    )


def test_a_responses_stream_folds_into_the_completed_body():
    """Text deltas are the text as it comes; the reply is read from response.completed's body;
    an error event is the error it names."""
    item = {"type": "message", "content": [{"type": "output_text", "text": "hello there"}]}
    body = {"id": "resp_1", "status": "completed", "output": [item]}
    events = [
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "hello"}),
        ("response.completed", {"type": "response.completed", "response": body}),
    ]
    text = "".join(f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events)
    call = Call([], stream=True, endpoint="responses", input="hi")
    seen, reply = exchange(call, text, sse=True)
    assert (True, "hello there", "resp_1") == (
        seen["body"]["stream"],
        reply.output,
        reply.response_id,
    )
    failing = 'event: error\ndata: {"type": "error", "code": "server_error", "message": "oops"}\n\n'
    with pytest.raises(ProviderError) as info:
        exchange(call, failing, sse=True)
    assert ("server_error", True) == (info.value.type, info.value.transient)


def test_an_unstreamed_endpoint_refuses_a_stream():
    """Embeddings have no streamed form: a streamed call is refused before anything is sent."""
    with pytest.raises(ProviderError) as info:
        exchange(Call([], stream=True, endpoint="embeddings", input="a"), {})
    assert "/embeddings has no streamed form" == info.value.message
