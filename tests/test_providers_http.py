"""The openai and anthropic providers over real loopback sockets, against ``rrcli sim``."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import orjson
import pytest
from hostile import Canned, chat, error

from rrcli.config.profile import Backend, RetrySettings
from rrcli.errors import (
    ProviderError,
    RedirectError,
    StatusError,
    StreamBrokenError,
    TimeoutError_,
    TransportError,
)
from rrcli.providers import make_provider
from rrcli.providers.base import Call, Reply
from rrcli.sim.behaviour import key_fingerprint

RETRY = RetrySettings()
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
PROVIDERS = ["openai", "anthropic"]


def backend(server, provider: str, **fields: object) -> Backend:
    url = server.openai_url if provider == "openai" else server.url
    return Backend(
        id=f"{provider}-1",
        provider=provider,
        base_url=url,
        model="m",
        **{"allow_private": True, **fields},
    )


def send(b: Backend, call: Call, key: str | None = "sk-test", on_text=None) -> Reply:
    """One attempt through a fresh provider, closed afterwards."""

    async def go() -> Reply:
        provider = make_provider(b, key, retry=RETRY, seed=None)
        try:
            return await provider.send(call, on_text)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def failure(b: Backend, call: Call, key: str | None = "sk-test") -> ProviderError:
    with pytest.raises(ProviderError) as info:
        send(b, call, key)
    return info.value


@pytest.mark.parametrize("provider", PROVIDERS)
def test_plain_and_streamed_give_the_same_output_and_usage(sim_server, provider: str) -> None:
    """A streamed call assembles the same text and token counts as a plain one, and calls
    on_text with pieces that join to the output."""
    server = sim_server(output_tokens=12)
    b = backend(server, provider)
    plain = send(b, Call(MESSAGES))
    pieces: list[str] = []
    streamed = send(b, Call(MESSAGES, stream=True), on_text=pieces.append)
    fields = ("output", "input_tokens", "output_tokens", "finish_reason", "response_model")
    assert [getattr(plain, f) for f in fields] == [getattr(streamed, f) for f in fields]
    assert 12 == plain.output_tokens
    assert plain.output == "".join(pieces)
    assert 1 == server.stats()["streams"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_ttft_is_the_time_to_the_first_text_chunk(sim_server, provider: str) -> None:
    """ttft_ms measures the first chunk carrying text: never under the server's 60 ms, and no
    later than that text reached on_text, with more text still to come (a loaded machine delays
    the chunk and its measure alike; one taken at the headers or at the stream's end is out)."""
    server = sim_server(ttft_ms=60, latency_ms=200, output_tokens=10)
    texts: list[float] = []  # when each piece of text reached on_text

    async def go() -> tuple[Reply, float]:
        client = make_provider(backend(server, provider), "sk-test", retry=RETRY, seed=None)
        try:
            started = time.perf_counter()  # the providers' clock
            reply = await client.send(
                Call(MESSAGES, stream=True), lambda _: texts.append(time.perf_counter())
            )
            return reply, started
        finally:
            await client.aclose()

    reply, started = asyncio.run(go())
    first_text_ms = (texts[0] - started) * 1000.0
    assert reply.ttft_ms is not None and len(texts) > 1
    assert 55 <= reply.ttft_ms <= first_text_ms


@pytest.mark.parametrize(
    ("provider", "status"), [("openai", "429"), ("anthropic", "429"), ("anthropic", "529")]
)
def test_rate_limits_are_transient_with_the_servers_delay(sim_server, provider, status) -> None:
    """429 and Anthropic's 529 overloaded_error are transient, rate limited, and carry the
    server's retry-after-ms as seconds."""
    server = sim_server(retry_after_ms=1500)
    error = failure(backend(server, provider, headers={"x-sim-status": status}), Call(MESSAGES))
    assert (f"http_{status}", True, True, 1.5) == (
        error.type,
        error.transient,
        error.rate_limited,
        error.retry_after,
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_wrong_key_gets_401_and_is_not_retried(sim_server, provider: str) -> None:
    """A server that refuses the key answers 401: not transient, and the key is in no message."""
    server = sim_server(api_keys=("sk-good",))
    error = failure(backend(server, provider), Call(MESSAGES), key="sk-wrong-key")
    assert ("http_401", False, 401) == (error.type, error.transient, error.status_code)
    assert "sk-wrong-key" not in str(error)
    assert 200 == send(backend(server, provider), Call(MESSAGES), key="sk-good").http_status


def test_insufficient_quota_is_not_transient(sim_server) -> None:
    """OpenAI's 429 insufficient_quota is money, not load: never retried."""
    server = sim_server()
    headers = {"x-sim-status": "429", "x-sim-error-code": "insufficient_quota"}
    error = failure(backend(server, "openai", headers=headers), Call(MESSAGES))
    assert ("insufficient_quota", False, False) == (error.type, error.transient, error.rate_limited)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_context_too_long_is_not_transient(sim_server, provider: str) -> None:
    """A 400 saying the prompt is too long fails at once as context_length_exceeded."""
    server = sim_server()
    headers = {"x-sim-status": "400", "x-sim-error-message": "prompt is too long: 9 > 8"}
    error = failure(backend(server, provider, headers=headers), Call(MESSAGES))
    assert ("context_length_exceeded", False) == (error.type, error.transient)
    assert "prompt is too long" in error.message


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_redirect_is_not_followed(sim_server, provider: str) -> None:
    """A 307 is a RedirectError naming its target; the client sends no second request."""
    server = sim_server()
    error = failure(backend(server, provider, headers={"x-sim-status": "307"}), Call(MESSAGES))
    assert isinstance(error, RedirectError)
    assert "http://127.0.0.1:9/moved" in error.message
    assert 1 == server.stats()["requests"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_cut_stream_is_a_transient_stream_broken_error(sim_server, provider: str) -> None:
    """A stream that ends halfway, without its end marker, is StreamBrokenError (transient)."""
    server = sim_server()
    b = backend(server, provider, headers={"x-sim-mode": "cut-stream"})
    error = failure(b, Call(MESSAGES, stream=True))
    assert isinstance(error, StreamBrokenError)
    assert ("stream_broken", True) == (error.type, error.transient)


@pytest.mark.parametrize(
    ("provider", "kind"), [("openai", "server_error"), ("anthropic", "overloaded_error")]
)
def test_an_error_event_inside_a_200_stream(sim_server, provider: str, kind: str) -> None:
    """An ``error`` event in the middle of a 200 stream fails the attempt, transient."""
    server = sim_server()
    b = backend(server, provider, headers={"x-sim-mode": "stream-error"})
    error = failure(b, Call(MESSAGES, stream=True))
    assert (kind, True) == (error.type, error.transient)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_plain_json_answer_to_a_stream_request_is_accepted(sim_server, provider: str) -> None:
    """A gateway answering a streaming request with one JSON body gives the whole response."""
    server = sim_server(output_tokens=5)
    expected = send(backend(server, provider), Call(MESSAGES)).output
    b = backend(server, provider, headers={"x-sim-mode": "plain-json"})
    assert expected == send(b, Call(MESSAGES, stream=True)).output


@pytest.mark.parametrize("stream", [False, True])
def test_pause_turn_returns_a_continuation_that_finishes_the_turn(sim_server, stream) -> None:
    """An Anthropic pause_turn stop returns the assistant message to append; sending it back
    finishes the turn, and the two outputs join to the whole answer."""
    server = sim_server(output_tokens=10)
    whole = send(backend(server, "anthropic"), Call(MESSAGES)).output
    b = backend(server, "anthropic", headers={"x-sim-mode": "pause-turn"})
    first = send(b, Call(MESSAGES, stream=stream))
    assert ("pause_turn", "assistant") == (first.finish_reason, first.continuation["role"])
    second = send(b, Call([*MESSAGES, first.continuation], stream=stream))
    assert ("stop", None) == (second.finish_reason, second.continuation)
    assert whole == first.output + second.output


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_text_is_kept(sim_server, provider: str, stream: bool) -> None:
    """Reasoning (OpenAI reasoning_content, Anthropic thinking blocks) lands in
    reasoning_content, plain or streamed, and never in the output."""
    server = sim_server(output_tokens=4)
    b = backend(server, provider, headers={"x-sim-mode": "reasoning"})
    reply = send(b, Call(MESSAGES, stream=stream))
    assert reply.reasoning_content.startswith("sim reasoning: ")
    assert "sim reasoning" not in reply.output


def test_anthropic_input_tokens_include_the_cache(sim_server) -> None:
    """Anthropic input tokens = input + cache creation + cache read, plain and streamed."""
    server = sim_server()
    expected = send(backend(server, "anthropic"), Call(MESSAGES)).input_tokens
    b = backend(server, "anthropic", headers={"x-sim-mode": "cache"})
    assert [expected, expected] == [
        send(b, Call(MESSAGES)).input_tokens,
        send(b, Call(MESSAGES, stream=True)).input_tokens,
    ]


def test_each_backend_sends_only_its_own_key_in_its_own_header(sim_server) -> None:
    """Two backends of one server, each with its key: the server sees key A only as a Bearer
    token and key B only as x-api-key, once each; a backend with auth none sends no key."""
    server = sim_server()
    send(backend(server, "openai"), Call(MESSAGES), key="key-A")
    send(backend(server, "anthropic"), Call(MESSAGES), key="key-B")
    send(backend(server, "openai"), Call(MESSAGES), key=None)
    expected = {
        "authorization:" + key_fingerprint("key-A"): 1,
        "x-api-key:" + key_fingerprint("key-B"): 1,
        "none": 1,
    }
    assert expected == server.stats()["credentials"]


def test_backend_headers_are_sent_and_the_params_reach_the_server(sim_server) -> None:
    """The call's params shape the request: max_tokens = 3 gives 3 tokens and ``length``."""
    server = sim_server(output_tokens=10)
    reply = send(backend(server, "openai"), Call(MESSAGES, params={"max_tokens": 3}))
    assert (3, "length") == (reply.output_tokens, reply.finish_reason)


def test_connection_refused_is_a_transient_transport_error() -> None:
    """Nothing listening: a TransportError, transient, with no response."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    b = Backend(
        id="x", provider="openai", base_url=f"http://127.0.0.1:{port}/v1", allow_private=True
    )
    error = failure(b, Call(MESSAGES))
    assert isinstance(error, TransportError)
    assert ("connect_error", True) == (error.type, error.transient)


def test_a_slow_server_times_out(sim_server) -> None:
    """An answer slower than the backend's timeout is TimeoutError_, transient."""
    server = sim_server(latency_ms=1000)
    error = failure(backend(server, "openai", timeout=0.2), Call(MESSAGES))
    assert isinstance(error, TimeoutError_)
    assert error.transient


def test_the_server_cap_answers_429_above_it_and_reports_its_peak(sim_server) -> None:
    """With --cap 2 and 5 concurrent calls the server never runs more than 2 at once: the
    others get a transient 429, and /stats reports peak 2 and the 429s sent."""
    server = sim_server(cap=2, latency_ms=150)
    b = backend(server, "openai", max_concurrency=5)

    async def go():
        provider = make_provider(b, "k", retry=RETRY, seed=None)
        try:
            calls = [provider.send(Call(MESSAGES)) for _ in range(5)]
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await provider.aclose()

    results = asyncio.run(go())
    limited = [r for r in results if isinstance(r, StatusError)]
    stats = server.stats()
    assert (2, 3, 3) == (stats["peak_concurrency"], len(limited), stats["rate_limited"])
    assert all(e.transient and e.rate_limited for e in limited)


def test_calls_that_fail_or_are_cancelled_give_their_connections_back(hostile_server) -> None:
    """A backend of 2 connections, and 6 calls of each way a call can end badly, one after
    another: a 500 (plain and streamed), a stream cut before its end marker, a call cancelled
    while it waits for the answer's head, and one cancelled mid-stream. Then 8 calls at once all
    answer ok, on 2 connections at most (a connection kept by a call that ended badly would leave
    them waiting past the pool timeout)."""
    release = threading.Event()
    event = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    first = b"data: " + orjson.dumps(event) + b"\n\n"

    def answer(request) -> Canned:
        kind = request.json()["messages"][-1]["content"]
        sse = {"content-type": "text/event-stream"}
        return {
            "500": lambda: error(500),
            "cut": lambda: Canned(200, sse, chunks=[first]),
            "head": lambda: chat(hold=release),
            "body": lambda: Canned(200, sse, chunks=[first, first], gap=60),
        }.get(kind, chat)()

    server = hostile_server(answer)
    b = Backend(id="h", provider="openai", base_url=server.openai_url, model="m",
                allow_private=True, max_concurrency=2, timeout=5.0)  # fmt: skip

    opened: list[int] = []  # connections the server saw opened before and after the 8 calls

    async def go() -> list[Reply]:
        provider = make_provider(b, "sk-test", retry=RETRY, seed=None)
        try:
            for _ in range(6):
                for kind, stream in (("500", False), ("500", True), ("cut", True)):
                    with pytest.raises(ProviderError):
                        await provider.send(
                            Call([{"role": "user", "content": kind}], stream=stream)
                        )
                for kind in ("head", "body"):
                    started = asyncio.Event()
                    call = Call([{"role": "user", "content": kind}], stream=kind == "body")
                    task = asyncio.ensure_future(provider.send(call, lambda _, s=started: s.set()))
                    sent = len(server.requests) + 1  # the server has the call from then on
                    while not task.done() and (
                        len(server.requests) < sent or (kind == "body" and not started.is_set())
                    ):
                        await asyncio.sleep(0.005)
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
            ok = Call([{"role": "user", "content": "ok"}])
            opened.append(server.connections)
            replies = await asyncio.gather(*(provider.send(ok) for _ in range(8)))
            opened.append(server.connections)
            return replies
        finally:
            release.set()
            await provider.aclose()

    replies = asyncio.run(go())
    assert ["ok"] * 8 == [r.output for r in replies]
    assert opened[1] - opened[0] <= 2
