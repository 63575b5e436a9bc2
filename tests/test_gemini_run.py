"""``provider = "gemini"`` end to end: ``rrcli run`` against the sim speaking Gemini's wire
(tests/test_gemini_sdk.py shows Google's SDK reads it as Gemini), with OpenAI- and
Anthropic-shaped jobs, tools, streams, errors and their retry rules, the budget's cap, and
``rrcli serve`` in front of a Gemini backend for the openai SDK."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from otlp_receiver import otlp_receiver  # noqa: F401  (fixture: a real OTLP/HTTP receiver)
from runkit import calls, read_jsonl, rrcli, write_profile
from servekit import Served

MODEL = "gemini-2.5-flash"
KEY = "gm-run-key-0123456789abcdef"
ENV = {"RR_TEST_GEMINI_KEY": KEY}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="  # noqa: E501


def gemini(sim, **extra: Any) -> dict[str, Any]:
    """A gemini backend on ``sim`` with its key from the environment."""
    return {
        "id": "g",
        "provider": "gemini",
        "model": "gemini-2.5-flash",
        "base_url": sim.url,
        "credentials": {"api_key_env": "RR_TEST_GEMINI_KEY"},
        "endpoints": ["chat", "embeddings"],
        **extra,
    }


def run(tmp_path: Path, backends, jobs, *args: str, name: str = "jobs", **top: Any):
    """``rrcli run`` of ``jobs`` with traces; (exit code and stderr, results by id, traces)."""
    profile = write_profile(tmp_path / f"{name}.toml", backends, **top)
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(job) + b"\n" for job in jobs))
    traces = tmp_path / f"{name}.traces.jsonl"
    done = rrcli("run", path, "-p", profile, "-q", "--traces", traces, *args, cwd=tmp_path, env=ENV)
    lines = read_jsonl(tmp_path / f"{name}.results.jsonl")
    results = {r.get("id", r.get("custom_id")): r for r in lines}
    return done, results, traces


CHAT_JOBS = [
    {
        "id": "system",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello"},
        ],
        "params": {"max_tokens": 12, "temperature": 0.3, "top_p": 0.9, "stop": ["END"]},
    },
    {
        "id": "image",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": PIXEL}},
                ],
            }
        ],
    },
    {"id": "tool", "prompt": "Weather in Paris?", "params": {"tools": [WEATHER]}},
    {
        "id": "json",
        "prompt": "A person",
        "params": {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "person",
                    "schema": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                        "required": ["name"],
                    },
                },
            }
        },
    },
    {"id": "two", "prompt": "Pick a word", "params": {"n": 2}},
    {"id": "embed", "endpoint": "embeddings", "input": ["a", "b"], "params": {"dimensions": 8}},
]


def test_openai_shaped_jobs_plain_and_streamed(tmp_path, sim_server):
    """OpenAI-shaped jobs on a Gemini backend: each is answered, in OpenAI's shape (tool calls,
    a JSON document, two choices, embeddings), with usage counting cached and thinking tokens;
    a streamed run gives the same results; the requests are Gemini's own (system instruction,
    generation config, inline image, function declarations, response schema)."""
    sim = sim_server(api_keys=(KEY,))
    backend = gemini(sim, headers={"x-sim-mode": "cache,reasoning"})
    done, plain, _ = run(tmp_path, [backend], CHAT_JOBS, name="plain")
    assert 0 == done.returncode, done.stderr
    done, streamed, _ = run(tmp_path, [backend], CHAT_JOBS, "--stream", name="streamed")
    assert 0 == done.returncode, done.stderr
    assert {"ok"} == {r["status"] for r in plain.values()}
    keep = ("output", "tool_calls", "finish_reason", "usage", "choices", "embeddings")
    for job_id, result in plain.items():
        other = streamed[job_id]
        assert {k: result.get(k) for k in keep if k != "tool_calls"} == {
            k: other.get(k) for k in keep if k != "tool_calls"
        }
    system = plain["system"]
    assert "length" == system["finish_reason"]
    assert system["usage"]["cached_input_tokens"] == system["usage"]["input_tokens"] // 2 > 0
    assert system["usage"]["reasoning_tokens"] > 0
    assert system["reasoning_content"].startswith("sim reasoning")
    (call,) = plain["tool"]["tool_calls"]
    assert "tool_calls" == plain["tool"]["finish_reason"]
    assert "get_weather" == call["function"]["name"]
    assert "city" in orjson.loads(call["function"]["arguments"])
    assert call["extra_content"]["google"]["thought_signature"]
    assert "name" in orjson.loads(plain["json"]["output"])
    assert 2 == len(plain["two"]["choices"])
    assert [8, 8] == [len(v) for v in plain["embed"]["embeddings"]]
    bodies = {r["path"].rsplit(":", 1)[1]: r["body"] for r in sim.received()}
    assert {"generateContent", "streamGenerateContent", "batchEmbedContents"} == set(bodies)
    first = sim.received()[0]["body"]
    assert {"parts": [{"text": "Be brief."}]} == first["systemInstruction"]
    assert {"maxOutputTokens": 12, "temperature": 0.3, "topP": 0.9, "stopSequences": ["END"]} == (
        first["generationConfig"]
    )


def test_the_key_travels_in_its_header_only(tmp_path, sim_server):
    """The key is in x-goog-api-key, never in a URL, and never in a result, trace or log line,
    even when the server echoes it in an error."""
    sim = sim_server(api_keys=(KEY,))
    echo = {"x-sim-status": "400", "x-sim-error-message": f"bad request for key {KEY}"}
    done, results, traces = run(
        tmp_path,
        [gemini(sim, headers=echo)],
        [{"id": "a", "prompt": "hi"}],
        "-v",
    )
    assert 1 == done.returncode
    assert {"x-goog-api-key:" + fingerprint(KEY): 1} == sim.stats()["credentials"]
    assert all("key" not in r["query"] for r in sim.received())
    written = traces.read_text() + done.stderr + orjson.dumps(results).decode()
    assert KEY not in written
    assert "bad request for key" in results["a"]["error"]["message"]


def fingerprint(key: str) -> str:
    from rrcli.sim.behaviour import key_fingerprint

    return key_fingerprint(key)


def test_anthropic_shaped_jobs_are_translated(tmp_path, sim_server):
    """Anthropic Message Batches lines on a Gemini backend: system, stop sequences, max tokens,
    tools and a tool_use / tool_result history become Gemini's fields."""
    sim = sim_server(api_keys=(KEY,))
    tool = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"}
        ]},
    ]  # fmt: skip
    lines = [
        {"custom_id": "sys", "params": {"model": "m", "max_tokens": 30, "system": "Be brief.",
                                        "stop_sequences": ["END"],
                                        "messages": [{"role": "user", "content": "Hi"}]}},
        {"custom_id": "tools", "params": {"model": "m", "max_tokens": 30, "tools": [tool],
                                          "messages": history}},
    ]  # fmt: skip
    done, results, _ = run(tmp_path, [gemini(sim)], lines)
    assert 0 == done.returncode, done.stderr
    assert {"ok"} == {r["status"] for r in results.values()}
    sent = [r["body"] for r in sim.received()]
    assert {"parts": [{"text": "Be brief."}]} == sent[0]["systemInstruction"]
    assert {"maxOutputTokens": 30, "stopSequences": ["END"]} == sent[0]["generationConfig"]
    assert [
        {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather",
                                                      "args": {"city": "Paris"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather",
                                                         "response": {"result": "21 C"}}}]},
    ] == sent[1]["contents"]  # fmt: skip


def test_thought_signatures_go_back_with_their_calls(tmp_path, sim_server):
    """A tool call's thoughtSignature, kept on the result's tool call, is sent back with it on
    the next turn (the sim refusing, as Gemini 3 does, a current turn's call without it); a
    call sent back without one is the request's fault: not retried."""
    sim = sim_server(api_keys=(KEY,))
    backend = gemini(sim, headers={"x-sim-mode": "signatures"})
    asked = [{"role": "user", "content": "Weather in Paris?"}]
    job = {"id": "t1", "messages": asked, "params": {"tools": [WEATHER]}}
    done, first, _ = run(tmp_path, [backend], [job], name="first")
    assert 0 == done.returncode, done.stderr
    (call,) = first["t1"]["tool_calls"]
    answered = {"role": "tool", "tool_call_id": call["id"], "content": '{"temp_c": 21}'}
    unsigned = {k: v for k, v in call.items() if k != "extra_content"}
    jobs = [
        {"id": "signed", "messages": [*asked, {"role": "assistant", "tool_calls": [call]},
                                      answered], "params": {"tools": [WEATHER]}},
        {"id": "unsigned", "messages": [*asked, {"role": "assistant", "tool_calls": [unsigned]},
                                        answered], "params": {"tools": [WEATHER]}},
    ]  # fmt: skip
    done, second, _ = run(tmp_path, [backend], jobs, name="second")
    assert 1 == done.returncode
    assert ("ok", "stop") == (second["signed"]["status"], second["signed"]["finish_reason"])
    assert (1, "http_400") == (second["unsigned"]["attempts"], second["unsigned"]["error"]["type"])
    assert "INVALID_ARGUMENT" in second["unsigned"]["error"]["message"]
    sent = [r["body"] for r in sim.received()][-2:]
    signed_body = next(b for b in sent if "thoughtSignature" in b["contents"][1]["parts"][0])
    assert {"temp_c": 21} == signed_body["contents"][2]["parts"][0]["functionResponse"]["response"]


@pytest.mark.parametrize("mode", ["safety-prompt", "safety-answer"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_safety_block_is_not_retried(tmp_path, sim_server, mode, stream):
    """A prompt or an answer Gemini's safety filter blocks is a content_filter error naming the
    reason and the category, after one attempt: the same request meets the same filter."""
    sim = sim_server(api_keys=(KEY,))
    done, results, _ = run(
        tmp_path,
        [gemini(sim, headers={"x-sim-mode": mode})],
        [{"id": "a", "prompt": "x"}],
        *(["--stream"] if stream else []),
    )
    assert 1 == done.returncode
    error = results["a"]["error"]
    assert ("content_filter", 1) == (error["type"], results["a"]["attempts"])
    assert "SAFETY" in error["message"]
    assert "HARM_CATEGORY_DANGEROUS_CONTENT" in error["message"]
    assert 1 == sim.stats()["requests"]


def test_rate_limits_wait_their_retry_info_and_unavailable_is_retried(tmp_path, sim_server):
    """RESOURCE_EXHAUSTED (429) is a rate limit retried after RetryInfo's delay (Gemini sends no
    Retry-After); UNAVAILABLE (503) is retried; both jobs succeed on their second attempt."""
    limited = sim_server(api_keys=(KEY,), retry_after_ms=300)
    busy = sim_server(api_keys=(KEY,))
    backends = [
        gemini(limited, id="limited", headers={"x-sim-status": "429", "x-sim-times": "1"}),
        gemini(busy, id="busy", headers={"x-sim-status": "503", "x-sim-times": "1"}),
    ]
    jobs = [{"id": "a", "prompt": "x"}]
    done, results, traces = run(tmp_path, backends[:1], jobs, name="limited")
    assert 0 == done.returncode, done.stderr
    (failed, _) = calls(traces)
    assert ("http_429", 300) == (failed["error_type"], failed["retry_after_ms"])
    done, results, traces = run(tmp_path, backends[1:], jobs, name="busy")
    assert 0 == done.returncode, done.stderr
    assert 2 == results["a"]["attempts"]


@pytest.mark.parametrize("mode", ["stream-error", "cut-stream"])
def test_a_stream_that_fails_midway_is_retried(tmp_path, sim_server, mode):
    """A Gemini stream that carries an UNAVAILABLE error chunk, or ends before its finishReason
    (it has no end marker), fails its attempt, which is retried: the job is ok on its second,
    with the text of a plain run."""
    sim = sim_server(api_keys=(KEY,))
    backend = gemini(sim, headers={"x-sim-mode": mode, "x-sim-times": "1"})
    jobs = [{"id": "a", "prompt": "Tell me more"}]
    done, streamed, traces = run(tmp_path, [backend], jobs, "--stream", name="streamed")
    assert 0 == done.returncode, done.stderr
    done, plain, _ = run(tmp_path, [backend], jobs, name="plain")
    assert (2, plain["a"]["output"]) == (streamed["a"]["attempts"], streamed["a"]["output"])
    first = calls(traces)[0]["error_type"]
    assert {"stream-error": "stream_error", "cut-stream": "stream_broken"}[mode] == first


def test_an_invalid_key_takes_the_backend_down(tmp_path, sim_server):
    """Gemini's answer to a wrong key (400 INVALID_ARGUMENT, reason API_KEY_INVALID) is the
    backend's fault, not the job's: the backend leaves the pool and its jobs go to the other."""
    wrong = sim_server(api_keys=("another-key-0123456789",))
    right = sim_server(api_keys=(KEY,))
    backends = [gemini(wrong, id="wrong"), gemini(right, id="right")]
    jobs = [{"id": f"j{i}", "prompt": f"q{i}"} for i in range(6)]
    done, results, _ = run(tmp_path, backends, jobs, strategy="round_robin", concurrency=1)
    assert 0 == done.returncode, done.stderr
    assert {"right"} == {r["deployment"] for r in results.values()}
    assert 1 == wrong.stats()["requests"]


def test_the_budget_cap_is_max_output_tokens(tmp_path, sim_server):
    """Under a budget, every Gemini request carries the cap the budget reserved as
    maxOutputTokens (a job's own cap, the larger of its two spellings, else the budget's), and
    the run is priced by genai-prices' Gemini prices."""
    sim = sim_server(api_keys=(KEY,))
    jobs = [
        {"id": "own", "prompt": "x", "params": {"max_tokens": 7, "max_completion_tokens": 9}},
        {"id": "none", "prompt": "y"},
    ]
    done, _, traces = run(tmp_path, [gemini(sim)], jobs, "--max-cost", "5")
    assert 0 == done.returncode, done.stderr
    caps = sorted(r["body"]["generationConfig"]["maxOutputTokens"] for r in sim.received())
    assert 9 == caps[0] < caps[1]
    (record,) = [r for r in read_jsonl(traces) if r["event"] == "run"]
    assert 0.3 == record["profile"]["backends"][0]["price"]["input"]


def test_serve_gives_the_openai_sdk_a_gemini_backend(tmp_path, sim_server):
    """``rrcli serve`` in front of a Gemini backend: the openai SDK gets chat completions, plain
    and streamed, and a tool call whose signature it sends back on the next turn; the
    anthropic SDK gets a message."""
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    sim = sim_server(api_keys=(KEY,))
    profile = write_profile(
        tmp_path / "p.toml", [gemini(sim, headers={"x-sim-mode": "signatures"})]
    )
    served = Served(profile, tmp_path, "--no-auth", env=ENV)
    try:
        client = openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
        hi = [{"role": "user", "content": "Hello"}]
        plain = client.chat.completions.create(model=MODEL, messages=hi)
        stream = client.chat.completions.create(model=MODEL, messages=hi, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert plain.choices[0].message.content == text
        asked = [{"role": "user", "content": "Weather in Paris?"}]
        first = client.chat.completions.create(model=MODEL, messages=asked, tools=[WEATHER])
        turn = first.choices[0].message
        (call,) = turn.tool_calls
        history = [
            *asked,
            turn.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "21 C"},
        ]
        second = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
        assert second.choices[0].message.content
        assert "stop" == second.choices[0].finish_reason
        claude = anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)
        message = claude.messages.create(model=MODEL, max_tokens=50, messages=hi)
        assert message.content[0].text
        assert message.usage.output_tokens > 0
    finally:
        served.stop()


def test_a_signature_never_reaches_an_openai_server(tmp_path, sim_server):
    """A history whose tool call carries a Gemini thought signature, sent to an
    OpenAI-compatible backend: the call goes without it (that API has no such field)."""
    sim = sim_server()
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        "extra_content": {"google": {"thought_signature": "c2ln"}},
    }
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C"},
    ]
    backend = {"id": "o", "base_url": sim.openai_url}
    done, _, _ = run(tmp_path, [backend], [{"id": "a", "messages": messages}])
    assert 0 == done.returncode, done.stderr
    (sent,) = sim.received()
    assert [{k: v for k, v in call.items() if k != "extra_content"}] == (
        sent["body"]["messages"][1]["tool_calls"]
    )


def test_validate_probe_checks_the_key_and_the_model(tmp_path, sim_server):
    """``validate --probe`` sends each Gemini backend the smallest generateContent call: ok
    with the right key, a failure naming Gemini's INVALID_ARGUMENT with a wrong one; the
    address it shows has no key in it."""
    sim = sim_server(api_keys=(KEY,))
    wrong = gemini(sim, id="wrong", credentials={"api_key_env": "RR_TEST_WRONG_KEY"})
    profile = write_profile(tmp_path / "p.toml", [gemini(sim), wrong])
    env = {**ENV, "RR_TEST_WRONG_KEY": "wrong-key-0123456789"}
    done = rrcli("validate", profile, "--probe", cwd=tmp_path, env=env)
    assert 1 == done.returncode
    probes = sorted(line for line in done.stdout.splitlines() if line.startswith("probe:"))
    assert probes[0].startswith("probe: g: ok")
    assert probes[1].startswith("probe: wrong: FAILED — http_400: HTTP 400 INVALID_ARGUMENT")
    assert ":generateContent]" in probes[0]
    assert KEY not in done.stdout + done.stderr
    assert [5, 5] == [r["body"]["generationConfig"]["maxOutputTokens"] for r in sim.received()]


def test_a_base_url_naming_the_api_version_is_refused(tmp_path):
    """A Gemini base_url ending with /v1beta (the path rrcli adds) is an error whose fix is the
    base_url to write; a base_url with a query keeps it after the method's path."""
    backend = {
        "id": "g",
        "provider": "gemini",
        "model": MODEL,
        "base_url": "https://generativelanguage.googleapis.com/v1beta",
        "credentials": {"api_key_env": "RR_TEST_GEMINI_KEY"},
    }
    profile = write_profile(tmp_path / "p.toml", [backend])
    done = rrcli("validate", profile, cwd=tmp_path, env=ENV)
    assert 1 == done.returncode
    assert 'write base_url = "https://generativelanguage.googleapis.com"' in done.stdout


def test_the_method_follows_the_model_and_a_query_stays_last():
    """The addresses a gemini backend posts to: the model (without a models/ prefix) and the
    method after base_url's path, ``alt=sse`` for a stream, base_url's own query kept."""
    from rrcli.config.profile import Backend, RetrySettings
    from rrcli.providers.base import Call
    from rrcli.providers.gemini import GeminiProvider

    backend = Backend(
        id="g", provider="gemini", model="models/gemini-2.5-flash", base_url="https://g.test/p?t=1"
    )
    provider = GeminiProvider(backend, KEY, retry=RetrySettings())
    base = "https://g.test/p/v1beta/models/gemini-2.5-flash"
    assert [
        f"{base}:generateContent?t=1",
        f"{base}:streamGenerateContent?t=1&alt=sse",
        f"{base}:embedContent?t=1",
        f"{base}:batchEmbedContents?t=1",
    ] == [
        provider.url_for(Call([])),
        provider.url_for(Call([], stream=True)),
        provider.url_for(Call([], endpoint="embeddings", input="a")),
        provider.url_for(Call([], endpoint="embeddings", input=["a", "b"])),
    ]


def test_exported_spans_name_gemini_as_opentelemetry_does(tmp_path, sim_server, otlp_receiver):  # noqa: F811
    """A Gemini call exported as an OTLP span carries ``gen_ai.provider.name`` ``gcp.gemini``,
    the GenAI conventions' name for Gemini's API."""
    sim = sim_server(api_keys=(KEY,))
    receiver = otlp_receiver()
    done, _, traces = run(tmp_path, [gemini(sim)], [{"id": "a", "prompt": "hi"}])
    assert 0 == done.returncode, done.stderr
    exported = rrcli("export", traces, "--otlp", receiver.url, cwd=tmp_path)
    assert 0 == exported.returncode, exported.stderr
    (call,) = [s for s in receiver.spans if "gen_ai.provider.name" in s.attributes]
    assert "gcp.gemini" == call.attributes["gen_ai.provider.name"]
