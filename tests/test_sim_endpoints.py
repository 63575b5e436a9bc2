"""``rrcli sim`` answers every endpoint of the Batch APIs over real HTTP: embeddings, the Responses
API (with ``previous_response_id``), completions and moderations, plain and streamed where the API
streams; other paths 404 in the API's own error shape."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import struct
from typing import Any

import httpx2
import jsonschema
import pytest
from simkit import data_lines, events, post

from rrcli.sim.responses import ResponseIds
from rrcli.sim.seen import Received

FN = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
RESPONSE_TOOLS = [{"type": "function", "name": "search", "parameters": FN}]

# the fields the official SDK's types require (openai-python)
RESPONSE = {
    "type": "object",
    "required": [
        "id", "object", "created_at", "model", "output", "parallel_tool_calls", "tool_choice",
        "tools", "status", "usage",
    ],
    "properties": {
        "object": {"const": "response"},
        "usage": {
            "type": "object",
            "required": [
                "input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details",
                "total_tokens",
            ],
        },
    },
}  # fmt: skip


def embed(server, **body: Any) -> httpx2.Response:
    return post(server.openai_url + "/embeddings", {"model": "e", **body})


def respond(server, body: dict[str, Any], **headers: str) -> httpx2.Response:
    return post(server.openai_url + "/responses", {"model": "m", **body}, headers)


def test_embeddings_are_deterministic_unit_vectors_in_input_order(sim_server) -> None:
    """One 256-float unit vector per input, in input order (index 0, 1, ...), the same for the
    same text in any request; token arrays are inputs too; usage counts the input tokens."""
    server = sim_server()
    both = embed(server, input=["first text", "second text"]).json()
    alone = embed(server, input="second text").json()
    tokens = embed(server, input=[[1, 2, 3], [4, 5]]).json()
    assert ("list", [0, 1]) == (both["object"], [d["index"] for d in both["data"]])
    vectors = [d["embedding"] for d in both["data"]]
    assert [256, 256] == [len(v) for v in vectors]
    assert all(math.isclose(1.0, math.fsum(x * x for x in v), abs_tol=1e-5) for v in vectors)
    assert vectors[1] == alone["data"][0]["embedding"]
    assert vectors[0] != vectors[1]
    assert {"prompt_tokens": 4, "total_tokens": 4} == both["usage"]
    assert (2, 5) == (len(tokens["data"]), tokens["usage"]["prompt_tokens"])
    assert "e" == both["model"]


def test_embedding_dimensions_and_base64(sim_server) -> None:
    """``dimensions`` sets the length; ``encoding_format: base64`` is the same vector as
    little-endian float32 bytes, exactly; a stream request gets the plain body."""
    server = sim_server()
    floats = embed(server, input="x", dimensions=8).json()["data"][0]["embedding"]
    encoded = embed(server, input="x", dimensions=8, encoding_format="base64", stream=True)
    raw = base64.b64decode(encoded.json()["data"][0]["embedding"])
    assert 8 == len(floats)
    assert floats == list(struct.unpack("<8f", raw))


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "input"),
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": [1, "a"]}, "input"),
        ({"input": "a", "dimensions": 0}, "dimensions"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ],
)
def test_a_bad_embeddings_request_is_a_400_naming_the_parameter(sim_server, body, param) -> None:
    """A missing or malformed input, dimensions or encoding answers 400 in OpenAI's shape."""
    response = embed(sim_server(), **body)
    assert (400, "invalid_request_error", param) == (
        response.status_code,
        response.json()["error"]["type"],
        response.json()["error"]["param"],
    )


def test_a_response_answers_text_and_remembers_its_id(sim_server) -> None:
    """A Responses request answers a ``message`` item with one ``output_text`` part; its id
    may be named as ``previous_response_id`` in the next request on the same server, and is
    echoed there; another server does not know it (400 ``previous_response_not_found``)."""
    server, other = sim_server(output_tokens=5), sim_server()
    first = respond(server, {"input": "hello", "instructions": "be brief"}).json()
    jsonschema.validate(first, RESPONSE)
    (item,) = first["output"]
    assert ("completed", "message", "assistant", "be brief") == (
        first["status"],
        item["type"],
        item["role"],
        first["instructions"],
    )
    assert 5 == len(item["content"][0]["text"].split())
    follow = {"input": "and then?", "previous_response_id": first["id"]}
    second = respond(server, follow).json()
    refused = respond(other, follow)
    assert first["id"] == second["previous_response_id"]
    assert first["id"].startswith("resp_")
    assert (400, "previous_response_not_found", "previous_response_id") == (
        refused.status_code,
        refused.json()["error"]["code"],
        refused.json()["error"]["param"],
    )


def test_a_response_with_tools_is_a_function_call_until_its_output_comes_back(sim_server):
    """With function tools the output is a ``function_call`` item (call_id, name, arguments
    valid against its parameters); an input ending in its ``function_call_output`` gets
    text."""
    server = sim_server()
    first = respond(server, {"input": "find cats", "tools": RESPONSE_TOOLS}).json()
    (call,) = first["output"]
    assert ("function_call", "search") == (call["type"], call["name"])
    jsonschema.validate(json.loads(call["arguments"]), FN)
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "3 cats"}
    items = [{"role": "user", "content": "find cats"}, call, result]
    answer = respond(server, {"input": items, "tools": RESPONSE_TOOLS}).json()
    assert "message" == answer["output"][0]["type"]


def test_a_response_limited_by_max_output_tokens_is_incomplete(sim_server) -> None:
    """``max_output_tokens`` below the answer cuts it: status ``incomplete`` with reason
    ``max_output_tokens``."""
    cut = respond(sim_server(output_tokens=8), {"input": "hi", "max_output_tokens": 3}).json()
    assert ("incomplete", {"reason": "max_output_tokens"}, 3) == (
        cut["status"],
        cut["incomplete_details"],
        len(cut["output"][0]["content"][0]["text"].split()),
    )


def test_a_response_text_format_json_schema_is_a_valid_document(sim_server) -> None:
    """``text.format`` ``json_schema``: the output text is a JSON document valid against it."""
    fmt = {"type": "json_schema", "name": "q", "schema": FN, "strict": True}
    body = respond(sim_server(), {"input": "hi", "text": {"format": fmt}}).json()
    jsonschema.validate(json.loads(body["output"][0]["content"][0]["text"]), FN)


@pytest.mark.parametrize("tools", [None, RESPONSE_TOOLS])
def test_a_streamed_response_folds_into_the_plain_one(sim_server, tools) -> None:
    """A stream goes response.created, response.in_progress, output_item.added, the deltas
    (text or function arguments), their done events, output_item.done, response.completed,
    with increasing sequence numbers; the deltas join to the plain output and the completed
    response equals the plain one but for its ids and its creation second."""
    server = sim_server(output_tokens=6)
    body = {"input": "hello", **({"tools": tools} if tools else {})}
    plain = respond(server, body).json()
    stream = events(respond(server, {**body, "stream": True}))
    kinds = [e["type"] for e in stream]
    delta = "response.function_call_arguments.delta" if tools else "response.output_text.delta"
    assert ["response.created", "response.in_progress", "response.output_item.added"] == kinds[:3]
    assert ["response.output_item.done", "response.completed"] == kinds[-2:]
    assert list(range(len(stream))) == [e["sequence_number"] for e in stream]
    joined = "".join(e["delta"] for e in stream if e["type"] == delta)
    item = plain["output"][0]
    assert (item.get("arguments") or item["content"][0]["text"]) == joined
    completed = stream[-1]["response"]

    def without_ids(r: dict[str, Any]) -> dict[str, Any]:
        outputs = [{**o, "id": None} for o in r["output"]]
        return {**r, "id": None, "created_at": None, "output": outputs}

    assert without_ids(plain) == without_ids(completed)


def test_response_ids_are_remembered_up_to_a_bound() -> None:
    """The memory of created response ids forgets the oldest beyond its bound."""
    ids = ResponseIds(limit=2)
    for response_id in ("resp_a", "resp_b", "resp_c"):
        ids.add(response_id)
    assert [False, True, True] == [r in ids for r in ("resp_a", "resp_b", "resp_c")]


@pytest.mark.parametrize("stream", [False, True])
def test_completions_answer_each_prompt_n_times(sim_server, stream: bool) -> None:
    """A ``text_completion`` has ``n`` choices a prompt (index prompt × n + j), cut by
    max_tokens (finish ``length``); a stream's text chunks join to the plain texts."""
    server = sim_server(output_tokens=6)
    body = {"model": "m", "prompt": ["one", "two"], "n": 2, "max_tokens": 4}
    plain = post(server.openai_url + "/completions", body).json()
    assert ("text_completion", [0, 1, 2, 3]) == (
        plain["object"],
        [c["index"] for c in plain["choices"]],
    )
    assert {("length", 4)} == {
        (c["finish_reason"], len(c["text"].split())) for c in plain["choices"]
    }
    assert 16 == plain["usage"]["completion_tokens"]
    if stream:
        chunks = data_lines(post(server.openai_url + "/completions", {**body, "stream": True}))
        texts = ["", "", "", ""]
        for chunk in chunks:
            for c in chunk["choices"]:
                texts[c["index"]] += c["text"]
        assert [c["text"] for c in plain["choices"]] == texts


def test_moderations_flag_nothing_with_deterministic_scores(sim_server) -> None:
    """One result a string input, none flagged, every category scored, the same text the same
    scores."""
    server = sim_server()
    url = server.openai_url + "/moderations"
    many = post(url, {"input": ["a text", "another"]}).json()
    one = post(url, {"input": "another"}).json()
    assert (2, [False, False]) == (len(many["results"]), [r["flagged"] for r in many["results"]])
    assert many["results"][1] == one["results"][0]
    assert 13 == len(one["results"][0]["category_scores"])
    assert one["id"].startswith("modr-")


@pytest.mark.parametrize(
    ("method", "path", "headers", "shape"),
    [
        ("POST", "/v1/fine_tuning/jobs", {}, "openai"),
        ("GET", "/v1/chat/completions", {}, "openai"),
        ("POST", "/v1/images/generations", {}, "openai"),
        ("POST", "/v1/skills", {"anthropic-version": "2023-06-01"}, "anthropic"),
        ("POST", "/v1/messages/count_tokens", {}, "anthropic"),
        ("POST", "/v1/complete", {"anthropic-version": "2023-06-01"}, "anthropic"),
    ],
)
def test_other_paths_are_404_in_the_apis_error_shape(sim_server, method, path, headers, shape):
    """An endpoint the sim does not serve answers 404: ``{"error": {...}}`` for OpenAI,
    ``{"type": "error", "error": {"type": "not_found_error"}}`` for a request that speaks
    Anthropic (an anthropic-version header, a /v1/messages/... path)."""
    server = sim_server()
    with httpx2.Client(timeout=10) as client:
        response = client.request(method, server.url + path, json={}, headers=headers)
    body = response.json()
    kind = body["error"]["type"]
    expected = "not_found_error" if shape == "anthropic" else "invalid_request_error"
    assert (404, expected, shape == "anthropic") == (response.status_code, kind, "type" in body)


def test_requests_shows_what_the_server_received(sim_server) -> None:
    """``GET /requests`` lists each request in order with its path, method, headers (never the
    credentials) and parsed body; ``path`` filters; ``/stats/reset`` forgets them."""
    server = sim_server()
    embed(server, input="a")
    respond(server, {"input": "b"}, authorization="Bearer k")
    post(server.url + "/v1/nowhere", {"x": 1})
    seen = server.received()
    assert [1, 2, 3] == [r["seq"] for r in seen]
    assert ["/v1/embeddings", "/v1/responses", "/v1/nowhere"] == [r["path"] for r in seen]
    assert {"model": "m", "input": "b"} == seen[1]["body"]
    assert ("POST", "application/json", None) == (
        seen[1]["method"],
        seen[1]["headers"]["content-type"],
        seen[1]["headers"].get("authorization"),
    )
    assert [{"model": "e", "input": "a"}] == [r["body"] for r in server.received("/v1/embeddings")]
    server.reset()
    assert [] == server.received()


def test_the_record_keeps_the_last_requests_and_counts_the_dropped() -> None:
    """Beyond its bound the record drops the oldest requests and says how many."""
    record = Received(limit=2)
    for i in range(3):
        record.add("POST", "/v1/embeddings", [], json.dumps({"i": i}).encode())
    seen = record.read()
    assert (1, [2, 3], [{"i": 1}, {"i": 2}]) == (
        seen["dropped"],
        [r["seq"] for r in seen["requests"]],
        [r["body"] for r in seen["requests"]],
    )
    assert [3] == [r["seq"] for r in record.read(since=2)["requests"]]


def test_missing_vector_and_empty_output_modes_send_replies_a_client_must_refuse(sim_server):
    """``missing-vector`` answers one embedding fewer than the inputs; ``empty-output`` a
    Responses object without output items, plain and streamed."""
    server = sim_server()
    short = post(
        server.openai_url + "/embeddings",
        {"model": "e", "input": ["a", "b"]},
        {"x-sim-mode": "missing-vector"},
    ).json()
    empty = respond(server, {"input": "hi"}, **{"x-sim-mode": "empty-output"}).json()
    stream = events(
        respond(server, {"input": "hi", "stream": True}, **{"x-sim-mode": "empty-output"})
    )
    assert (1, 2) == (len(short["data"]), short["usage"]["prompt_tokens"])
    assert ([], "completed") == (empty["output"], empty["status"])
    assert ["response.created", "response.in_progress", "response.completed"] == [
        e["type"] for e in stream
    ]
    assert [] == stream[-1]["response"]["output"]


@pytest.mark.parametrize("path", ["/embeddings", "/responses", "/completions", "/moderations"])
def test_the_behaviour_options_hold_on_every_endpoint(sim_server, path: str) -> None:
    """Forced statuses (with Retry-After on a 429), the key check, the concurrency cap, the
    latency and the rate-limit headers apply to every endpoint, in OpenAI's shape."""
    server = sim_server(api_keys=["k"], cap=1, latency_ms=150, retry_after_ms=2000)
    url, body = server.openai_url + path, {"model": "m", "input": "a", "prompt": "a"}
    ok = {"authorization": "Bearer k"}
    forced = post(url, body, {**ok, "x-sim-status": "429"})
    assert (429, "2", "requests") == (
        forced.status_code,
        forced.headers["retry-after"],
        forced.json()["error"]["type"],
    )
    assert 401 == post(url, body).status_code
    limited = post(url, body, {**ok, "x-sim-ratelimit": "requests=500"})
    assert (200, "0") == (limited.status_code, limited.headers["x-ratelimit-remaining-requests"])
    assert limited.elapsed.total_seconds() >= 0.15

    async def two() -> list[int]:
        async with httpx2.AsyncClient(timeout=10) as client:
            answers = await asyncio.gather(*(client.post(url, json=body, headers=ok) for _ in "ab"))
            return sorted(a.status_code for a in answers)

    assert [200, 429] == asyncio.run(two())


def test_bodies_validate_against_the_official_sdk_types(sim_server) -> None:
    """Where the ``openai`` package is installed, its types accept the sim's embeddings,
        Responses (and their stream events), completions and moderations bodies (a completions chunk
    has a null finish_reason, which the SDK's type, used for chunks unvalidated, does not allow)."""
    openai = pytest.importorskip("openai")
    from pydantic import TypeAdapter

    server = sim_server()
    url = server.openai_url
    types = openai.types
    types.CreateEmbeddingResponse.model_validate(embed(server, input=["a", "b"]).json())
    events_of = TypeAdapter(types.responses.ResponseStreamEvent)
    for body in ({"input": "hi"}, {"input": "hi", "tools": RESPONSE_TOOLS}):
        types.responses.Response.model_validate(respond(server, body).json())
        for event in events(
            respond(server, {**body, "stream": True}, **{"x-sim-mode": "reasoning"})
        ):
            events_of.validate_python(event)
    completion = {"model": "m", "prompt": ["a", "b"], "n": 2}
    types.Completion.model_validate(post(url + "/completions", completion).json())
    moderation = post(url + "/moderations", {"input": "a"}).json()
    types.ModerationCreateResponse.model_validate(moderation)
