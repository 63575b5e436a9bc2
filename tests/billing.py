"""A test server that bills as a provider does: every token it reads or writes is billed, whether
or not its answer reports it.

A starlette app (the sim's stack, uvicorn on a free loopback port) speaking OpenAI chat
completions and completions and Anthropic Messages. It keeps a ledger of what it billed
(``server.billed()``: input and output tokens, calls), so a test compares what rrcli spent with
what the provider would charge. How it bills is the worst a provider may do within the rules:
input at one token a character of text (a tokenizer can do no worse), ``IMAGE_TOKENS`` an image
whatever its URL's length, ``FILE_TOKENS`` a file whatever its id's length, tool definitions
as their JSON text; output as many tokens as the model writes (``writes``, cut at the
largest cap the request spells) for each of ``n`` (and ``best_of``) answers of each prompt.
``Billing`` says how it misbehaves: no usage in its answers, streams cut after ``cut_after``
generated tokens, an Anthropic ``pause_turn`` before every final answer.
With ``prompt_cache`` its Anthropic answers cache the system text as Anthropic's prompt cache
does: the first request with a system text writes it (``cache_creation_input_tokens``), later
ones read it (``cache_read_input_tokens``), each billed at its own price.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rrcli.sim.server import listen

IMAGE_TOKENS = 1_100  # what a provider bills one image, however short its URL
FILE_TOKENS = 20 * 2_600  # what it bills a file (a PDF of 20 pages), however short its id
GPT_4O = {"input": 2.5, "output": 10.0}  # USD per million tokens


@dataclass
class Billing:
    """How the server answers: ``writes`` tokens an answer when nothing cuts it shorter;
    ``usage``: whether answers report usage; ``cut_after``: streams break after that many
    generated tokens; ``pause``: Anthropic answers pause (``pause_turn``) once per turn;
    ``latency_s`` before each answer; ``fail_every``: that many chat requests, one answers 503."""

    writes: int = 5
    usage: bool = True
    cut_after: int | None = None
    pause: bool = False
    latency_s: float = 0.005
    fail_every: int = 0  # every so many chat requests answer 503 (billed nothing)
    prompt_cache: bool = False  # Anthropic answers cache the system text (read, written)


@dataclass
class Ledger:
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    cache_read: int = 0  # of the input tokens, those read from the prompt cache
    cache_written: int = 0  # and those written to it
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bill(self, given: int, made: int, read: int = 0, written: int = 0) -> None:
        with self.lock:
            self.input_tokens += given
            self.output_tokens += made
            self.cache_read += read
            self.cache_written += written
            self.calls += 1

    def usd(self, price: dict[str, float] = GPT_4O) -> float:
        """What the tokens billed cost at ``price`` (USD per million; cache reads at its
        ``cached_input``, writes at its ``cache_write``, each the input price when absent)."""
        fresh = self.input_tokens - self.cache_read - self.cache_written
        cached = self.cache_read * price.get("cached_input", price["input"])
        written = self.cache_written * price.get("cache_write", price["input"])
        return (
            fresh * price["input"] + cached + written + self.output_tokens * price["output"]
        ) / 1e6


def _text_tokens(value: Any) -> int:
    """Input tokens of a request part at one a character; an image IMAGE_TOKENS, a file
    FILE_TOKENS."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_text_tokens(v) for v in value)
    if isinstance(value, dict):
        if value.get("type") in ("image_url", "image", "input_image"):
            return IMAGE_TOKENS
        if value.get("type") in ("file", "input_file", "document"):
            return FILE_TOKENS
        return sum(_text_tokens(v) for k, v in value.items() if k in ("content", "text"))
    return 0


def _count(value: Any) -> int:
    try:
        return max(1, int(float(value)))
    except (TypeError, ValueError):
        return 1


def _input(body: dict[str, Any]) -> int:
    given = _text_tokens(body.get("messages")) + _text_tokens(body.get("prompt"))
    given += _text_tokens(body.get("system"))
    if body.get("tools"):
        given += len(orjson.dumps(body["tools"]))
    return given


def _writes(body: dict[str, Any], billing: Billing) -> int:
    """Output tokens of one answer: ``writes``, cut at the LARGEST cap the body spells
    (``max_tokens``, ``max_completion_tokens``: a server may read either, SGLang reads the
    second first); any other field (``max_output_tokens`` on chat) it ignores, as an
    OpenAI-compatible server ignores fields it does not know."""
    caps = [body.get(word) for word in ("max_tokens", "max_completion_tokens")]
    said = [int(float(cap)) for cap in caps if cap is not None]
    return min([*said, billing.writes])


def _prompts(body: dict[str, Any]) -> int:
    """How many prompts a completions body holds: each of a list is answered."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and not all(isinstance(t, int) for t in prompt):
        return len(prompt)
    return 1


class BillingServer:
    """The app running in a background thread; ``openai_url`` and ``url`` (Anthropic) are its
    base URLs; ``billed()`` the ledger; ``billing`` may be changed while it runs."""

    def __init__(self, billing: Billing) -> None:
        self.billing = billing
        self.ledger = Ledger()
        self.requests: list[dict[str, Any]] = []
        self._cached: set[bytes] = set()  # the system texts the prompt cache holds
        routes = [
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/v1/messages", self._messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
        ]
        import uvicorn

        self._sock = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.openai_url = self.url + "/v1"
        config = uvicorn.Config(Starlette(routes=routes), log_level="error", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the billing server did not start")
            time.sleep(0.002)

    def billed(self, price: dict[str, float] = GPT_4O) -> float:
        """USD billed so far at ``price`` (gpt-4o's unless told)."""
        return self.ledger.usd(price)

    async def _body(self, request: Request) -> dict[str, Any]:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        await asyncio.sleep(self.billing.latency_s)
        return body

    async def _chat(self, request: Request) -> Response:
        body = await self._body(request)
        every = self.billing.fail_every
        if every and len(self.requests) % every == 0:
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        given, made = _input(body), _writes(body, self.billing) * _count(body.get("n"))
        text = "w " * made
        usage = {"prompt_tokens": given, "completion_tokens": made, "total_tokens": given + made}
        if body.get("stream"):
            return self._stream(given, made, text, usage)
        self.ledger.bill(given, made)
        message = {"role": "assistant", "content": text}
        answer: dict[str, Any] = {
            "id": "c1", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }  # fmt: skip
        if self.billing.usage:
            answer["usage"] = usage
        return JSONResponse(answer)

    def _stream(self, given: int, made: int, text: str, usage: dict[str, int]) -> Response:
        cut = self.billing.cut_after
        billing, ledger = self.billing, self.ledger

        async def chunks() -> Any:
            if cut is not None and cut < made:
                ledger.bill(given, cut)
                yield _sse({"choices": [{"index": 0, "delta": {"content": "w " * cut}}]})
                await asyncio.sleep(0.01)
                raise ConnectionResetError("cut")  # the connection drops mid-stream
            ledger.bill(given, made)
            yield _sse({"choices": [{"index": 0, "delta": {"content": text}}]})
            yield _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if billing.usage:
                yield _sse({"choices": [], "usage": usage})
            yield b"data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def _completions(self, request: Request) -> Response:
        body = await self._body(request)
        answers = _count(body.get("n")) * _count(body.get("best_of")) * _prompts(body)
        given, made = _input(body), _writes(body, self.billing) * answers
        self.ledger.bill(given, made)
        answer: dict[str, Any] = {
            "id": "t1", "object": "text_completion", "model": body.get("model"),
            "choices": [{"index": 0, "text": "w " * made, "finish_reason": "stop"}],
        }  # fmt: skip
        if self.billing.usage:
            answer["usage"] = {"prompt_tokens": given, "completion_tokens": made}
        return JSONResponse(answer)

    async def _messages(self, request: Request) -> Response:
        body = await self._body(request)
        given, made = _input(body), _writes(body, self.billing)
        read, written = self._cache(body)
        self.ledger.bill(given, made, read, written)
        last = (body.get("messages") or [{}])[-1]
        paused = self.billing.pause and last.get("role") != "assistant"
        answer = {
            "id": "m1", "type": "message", "role": "assistant", "model": body.get("model"),
            "content": [{"type": "text", "text": "w " * made}],
            "stop_reason": "pause_turn" if paused else "end_turn",
            "usage": {"input_tokens": given - read - written, "output_tokens": made,
                      "cache_read_input_tokens": read, "cache_creation_input_tokens": written},
        }  # fmt: skip
        return JSONResponse(answer)

    async def _count_tokens(self, request: Request) -> Response:
        """Anthropic's token count: the input as it would bill it, billing nothing."""
        body = await self._body(request)
        return JSONResponse({"input_tokens": _input(body)})

    def _cache(self, body: dict[str, Any]) -> tuple[int, int]:
        """(input tokens read from the prompt cache, written to it): with ``prompt_cache``, a
        request's system text is written by the first request with it, read by later ones."""
        system = body.get("system")
        if not self.billing.prompt_cache or not system:
            return 0, 0
        key, tokens = orjson.dumps(system), _text_tokens(system)
        with self.ledger.lock:
            if key in self._cached:
                return tokens, 0
            self._cached.add(key)
        return 0, tokens

    def stop(self) -> None:
        self._server.should_exit = self._server.force_exit = True
        self._thread.join(10.0)
        self._sock.close()


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


@pytest.fixture
def billing_server() -> Iterator[Callable[..., BillingServer]]:
    """A factory of billing servers: ``server = billing_server(writes=40_000, usage=False)``."""
    running: list[BillingServer] = []

    def start(**settings: Any) -> BillingServer:
        server = BillingServer(Billing(**settings))
        running.append(server)
        return server

    yield start
    for server in running:
        server.stop()
