"""``rrcli sim`` speaks the Gemini API as Gemini does: Google's own SDK (``google-genai``)
pointed at it generates, streams, embeds and completes a function call round trip, and reads
its errors. rrcli's Gemini tests then run against the same sim."""

from __future__ import annotations

import pytest

genai = pytest.importorskip("google.genai")
types = pytest.importorskip("google.genai.types")
errors = pytest.importorskip("google.genai.errors")

KEY = "gm-test-key-0123456789"
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def client(sim, key: str = KEY, headers: dict[str, str] | None = None):
    """The official client on ``sim``, without its own retries (a test sees each answer)."""
    options = {"base_url": sim.url, "retry_options": {"attempts": 1}}
    if headers:
        options["headers"] = headers
    return genai.Client(api_key=key, http_options=options)


def test_generate_content_reads_text_and_usage(sim_server):
    """generate_content with a system instruction and a generation config: text, the finish
    reason, usage with cached and thinking tokens as the SDK's types name them."""
    sim = sim_server(api_keys=(KEY,))
    config = types.GenerateContentConfig(
        system_instruction="Be brief.",
        max_output_tokens=64,
        temperature=0.2,
        thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=128),
    )
    google = client(sim, headers={"x-sim-mode": "cache"})
    answer = google.models.generate_content(
        model="gemini-2.5-flash", contents="Hello there", config=config
    )
    usage = answer.usage_metadata
    assert answer.text
    assert "STOP" == answer.candidates[0].finish_reason.value
    assert [True, None] == [p.thought for p in answer.candidates[0].content.parts]
    assert usage.cached_content_token_count == usage.prompt_token_count // 2 > 0
    assert usage.thoughts_token_count > 0
    assert (
        usage.total_token_count
        == usage.prompt_token_count + usage.candidates_token_count + usage.thoughts_token_count
    )
    (request,) = sim.received()
    assert "/v1/models/gemini-2.5-flash:generateContent" == request["path"]
    assert "x-goog-api-key" not in request["headers"]  # kept out of the log, counted apart
    assert {"x-goog-api-key:" + fingerprint(KEY): 1} == sim.stats()["credentials"]


def fingerprint(key: str) -> str:
    from rrcli.sim.behaviour import key_fingerprint

    return key_fingerprint(key)


def test_stream_adds_up_to_the_plain_answer(sim_server):
    """generate_content_stream (``?alt=sse``): the chunks' text joins into the plain answer's,
    the last chunk carries the finish reason and the usage."""
    sim = sim_server(api_keys=(KEY,))
    google = client(sim)
    models = google.models
    plain = models.generate_content(model="gemini-2.5-flash", contents="Tell me more")
    chunks = list(models.generate_content_stream(model="gemini-2.5-flash", contents="Tell me more"))
    assert plain.text == "".join(c.text or "" for c in chunks)
    assert len(chunks) > 2
    assert "STOP" == chunks[-1].candidates[0].finish_reason.value
    assert plain.usage_metadata.candidates_token_count == (
        chunks[-1].usage_metadata.candidates_token_count
    )
    assert "alt=sse" == sim.received()[-1]["query"]


def test_embed_content(sim_server):
    """embed_content of one text and of several: one vector each, of the asked dimensions."""
    sim = sim_server(api_keys=(KEY,))
    google = client(sim)
    models = google.models
    config = types.EmbedContentConfig(output_dimensionality=64)
    one = models.embed_content(model="text-embedding-004", contents="alpha", config=config)
    two = models.embed_content(model="text-embedding-004", contents=["alpha", "beta"])
    assert [64] == [len(e.values) for e in one.embeddings]
    assert [256, 256] == [len(e.values) for e in two.embeddings]
    assert one.embeddings[0].values != two.embeddings[1].values


def test_function_call_round_trip_keeps_the_thought_signature(sim_server):
    """A function call comes with its thoughtSignature; sent back in the history with the
    function's response (the sim refusing, as Gemini 3 does, a call without it), the model
    answers in text."""
    sim = sim_server(api_keys=(KEY,))
    google = client(sim, headers={"x-sim-mode": "signatures"})
    models = google.models
    weather = types.FunctionDeclaration(
        name="get_weather", description="The weather in a city", parameters_json_schema=WEATHER
    )
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[weather])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    asked = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
    first = models.generate_content(model="gemini-3-pro", contents=[asked], config=config)
    (call,) = first.function_calls
    assert "get_weather" == call.name
    assert isinstance(call.args["city"], str)
    turn = first.candidates[0].content
    assert turn.parts[0].thought_signature
    result = types.Part.from_function_response(name="get_weather", response={"temp_c": 21})
    answered = types.Content(role="user", parts=[result])
    second = models.generate_content(
        model="gemini-3-pro", contents=[asked, turn, answered], config=config
    )
    assert second.text and not second.function_calls
    unsigned = types.Content(role="model", parts=[types.Part(function_call=call)])
    with pytest.raises(errors.ClientError) as refused:
        models.generate_content(
            model="gemini-3-pro", contents=[asked, unsigned, answered], config=config
        )
    assert 400 == refused.value.code
    assert "thought_signature" in refused.value.message


def test_errors_read_as_gemini_errors(sim_server):
    """A wrong key is Gemini's 400 INVALID_ARGUMENT (API_KEY_INVALID); a forced 429 is
    RESOURCE_EXHAUSTED with its RetryInfo delay; an unknown field is refused by name."""
    sim = sim_server(api_keys=(KEY,), retry_after_ms=1500)
    wrong = client(sim, key="wrong-key-0123456789")
    with pytest.raises(errors.ClientError) as bad_key:
        wrong.models.generate_content(model="gemini-2.5-flash", contents="x")
    assert (400, "INVALID_ARGUMENT") == (bad_key.value.code, bad_key.value.status)
    assert "API_KEY_INVALID" == bad_key.value.details["error"]["details"][0]["reason"]
    limited = client(sim, headers={"x-sim-status": "429"})
    with pytest.raises(errors.ClientError) as exhausted:
        limited.models.generate_content(model="gemini-2.5-flash", contents="x")
    assert (429, "RESOURCE_EXHAUSTED") == (exhausted.value.code, exhausted.value.status)
    retry = exhausted.value.details["error"]["details"][0]
    assert "1.5s" == retry["retryDelay"]
    assert "retry-after" not in exhausted.value.response.headers


def test_safety_blocks_as_gemini_sends_them(sim_server):
    """The safety modes: a blocked prompt has promptFeedback.blockReason and no candidate; a
    stopped answer has finishReason SAFETY and its ratings."""
    sim = sim_server()
    blocking = client(sim, headers={"x-sim-mode": "safety-prompt"})
    prompt = blocking.models.generate_content(model="gemini-2.5-flash", contents="x")
    assert "SAFETY" == prompt.prompt_feedback.block_reason.value
    assert not prompt.candidates
    stopping = client(sim, headers={"x-sim-mode": "safety-answer"})
    answer = stopping.models.generate_content(model="gemini-2.5-flash", contents="x")
    assert "SAFETY" == answer.candidates[0].finish_reason.value
    assert answer.candidates[0].safety_ratings[0].blocked


def test_an_unknown_method_is_gemini_s_404(sim_server):
    """A Gemini method the sim does not serve answers 404 NOT_FOUND in Gemini's error shape,
    which the SDK reads."""
    sim = sim_server()
    google = client(sim)
    with pytest.raises(errors.ClientError) as missing:
        google.models.count_tokens(model="gemini-2.5-flash", contents="x")
    assert (404, "NOT_FOUND") == (missing.value.code, missing.value.status)
