"""The ``rrcli sim`` server: an HTTP app (starlette on uvicorn) over the behaviour model of
``rrcli.sim.behaviour``, answering each endpoint in its wire format (``rrcli.sim.wire`` and the
modules it names).

Trying a profile should not cost money, and the tests and benchmarks need a server whose latency,
errors, rate limits and concurrency cap are known. It serves OpenAI ``/v1/chat/completions``,
``/v1/embeddings``, ``/v1/responses``, ``/v1/completions`` and ``/v1/moderations``, Anthropic
``/v1/messages``, Azure OpenAI's paths (``rrcli.sim.azure``), Gemini's
``/v1beta/models/{model}:generateContent`` (and ``/v1/...``) and its other methods
(``rrcli.sim.gemini``), Vertex AI's Gemini and Claude paths (``rrcli.sim.vertex``, with an
OAuth token endpoint at ``/token``) and Bedrock's Converse (``/model/{model}/converse``,
``-stream`` in event-stream frames: ``rrcli.sim.bedrock_converse``), plain and streaming where
the API streams; any other path (one without ``/v1`` included, as OpenAI and vLLM answer it) is a
404 in the error shape of the API the request speaks. The Batch APIs (OpenAI's files and
batches, Anthropic's Message Batches) are ``rrcli.sim.batches``'. ``/v1/models``;
``/stats`` (``/stats/reset``, which also empties the prefix cache) so tests can see what the
server saw: requests, peak concurrency,
429s sent, assistant messages received in histories (and how many carried
``reasoning_content``), and requests per credential (by a short sha256 fingerprint of the key,
with the header it came in); ``/requests``, the last requests themselves (``rrcli.sim.received``).

Tests force behaviour per backend with request headers (a profile's ``headers``), on every
endpoint: ``x-sim-status: CODE`` answers that status (with ``x-sim-error-type``,
``x-sim-error-code``, ``x-sim-error-message``); ``x-sim-response-headers: {JSON}`` adds headers
to any answer, error or success (a null value removes one); ``x-sim-ratelimit:
requests=MS,tokens=MS`` makes a success say those budgets are spent until MS from now, in the
API's own headers (OpenAI ``x-ratelimit-remaining-requests: 0`` with
``x-ratelimit-reset-requests: 500ms``; Anthropic ``anthropic-ratelimit-requests-remaining: 0``
with an RFC 3339 ``...-reset``); ``x-sim-mode: a,b`` with ``cut-stream`` (end a stream halfway,
without its end marker), ``stream-error`` (an ``error`` event halfway through a 200 stream),
``pause-turn`` (Anthropic: stop with ``pause_turn`` halfway unless the last message is the
assistant's, i.e. once per turn), ``plain-json`` (answer a streaming request with one JSON body),
``reasoning`` (add reasoning text / a thinking block), ``cache`` (half the input counted as cached
tokens), and replies a client must refuse: ``bad-arguments`` (a tool call's arguments are not
JSON), ``missing-vector`` (embeddings: one vector fewer than inputs), ``empty-output``
(Responses: no output item). With a prefix cache (``--prefix-cache-tokens``), a chat request's
prompt is matched block by block against the prompts the server read before and the text replies
it wrote after them (an LRU of 16-token blocks), its held tokens reported as cached
(``prompt_tokens_details.cached_tokens``, Anthropic's ``cache_read_input_tokens``) and the rest
prefilled at ``--prefill-ms-per-token`` before the first token. ``x-sim-times: N`` limits the
forced status and modes to the first N requests that carry the header (per server), so a retry
of the same call succeeds.

Counters live on one event loop, so they need no locks. Per request the work is one JSON parse, a
few dict operations and one JSON encode: this is the server of the overhead benchmark.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import os
import random
import socket
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from rrcli.errors import InvalidSimRequest, UsageError
from rrcli.sim.anthropic_messages import AnthropicWire
from rrcli.sim.azure import azure_routes
from rrcli.sim.batches import BatchStore, batch_routes
from rrcli.sim.bedrock_converse import BedrockWire
from rrcli.sim.behaviour import (
    ERROR,
    RATE_LIMITED,
    SimBehaviour,
    SimConfig,
    pacing,
    prompt_of,
)
from rrcli.sim.endpoints import CompletionsWire, EmbeddingsWire, ModerationsWire
from rrcli.sim.gemini import GeminiEmbedWire, GeminiFamily, GeminiWire
from rrcli.sim.openai_chat import OpenAIChatWire
from rrcli.sim.responses import ResponseIds, ResponsesWire
from rrcli.sim.seen import Counters, Received
from rrcli.sim.vertex import issue_token, vertex_routes
from rrcli.sim.wire import AnthropicFamily, OpenAIFamily, Wire, override_headers

__all__ = ["build_app", "check_host", "listen", "serve", "uvicorn_server"]

_JSON = "application/json"
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
OPENAI_FAMILY, ANTHROPIC_FAMILY, GEMINI_FAMILY = OpenAIFamily(), AnthropicFamily(), GeminiFamily()
_OPENAI = {
    "chat/completions": OpenAIChatWire(),
    "embeddings": EmbeddingsWire(),
    "responses": ResponsesWire(),
    "completions": CompletionsWire(),
    "moderations": ModerationsWire(),
}
_GEMINI = {
    "generateContent": GeminiWire(stream=False),
    "streamGenerateContent": GeminiWire(stream=True),
    "embedContent": GeminiEmbedWire(batch=False),
    "batchEmbedContents": GeminiEmbedWire(batch=True),
}
#: every API path and the wire that answers it
ENDPOINTS = [
    *((f"/v1/{name}", wire) for name, wire in _OPENAI.items()),
    ("/v1/messages", AnthropicWire()),
    ("/model/{model}/converse", BedrockWire()),
    ("/model/{model}/converse-stream", BedrockWire()),
    *azure_routes(_OPENAI),
    *(
        (f"/{version}/models/{{model}}:{method}", wire)
        for version in ("v1beta", "v1")  # the SDK's default is v1, rrcli's v1beta
        for method, wire in _GEMINI.items()
    ),
    *vertex_routes(),
]


class _SimAPI:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.state = Counters()
        self.received = Received()
        self.behaviour = SimBehaviour(config.settings, random.Random(config.seed))
        self.responses = ResponseIds()
        ms = config.settings.retry_after_ms
        self.retry_headers = {
            "retry-after-ms": str(round(ms)),
            "retry-after": str(max(1, math.ceil(ms / 1000.0))),
        }
        self.ids = 0
        # a Responses id names its server too, as a real one is unique across accounts: an id
        # created here is unknown to every other server (previous_response_id is refused there)
        self.tag = os.urandom(4).hex()
        self.marked = 0  # requests seen with x-sim-times

    def next_id(self, prefix: str) -> str:
        """A new id for a reply (``prefix`` names its kind: ``chatcmpl-sim``, ``msg_sim``...)."""
        self.ids += 1
        return f"{prefix}{self.ids:08d}"

    def endpoint(self, wire: Wire) -> Any:
        """The route handler answering with ``wire``."""

        async def answer(request: Request) -> Response:
            return await self.handle(request, wire)

        return answer

    async def models(self, request: Request) -> Response:
        model = self.config.model or "sim-model"
        data = {
            "object": "list",
            "data": [{"id": model, "object": "model", "owned_by": "rrcli-sim"}],
        }
        return Response(orjson.dumps(data), media_type=_JSON)

    async def stats(self, request: Request) -> Response:
        return Response(orjson.dumps(self.state.snapshot()), media_type=_JSON)

    async def reset(self, request: Request) -> Response:
        self.state.reset()
        self.received.clear()
        self.behaviour.forget()
        return Response(orjson.dumps(self.state.snapshot()), media_type=_JSON)

    async def token(self, request: Request) -> Response:
        """Vertex AI's OAuth token endpoint, for google-auth's service-account flow."""
        raw = await request.body()
        self._receive(request, raw)
        status, body = issue_token(raw, self.config.api_keys)
        return Response(orjson.dumps(body), status_code=status, media_type=_JSON)

    async def requests(self, request: Request) -> Response:
        query = request.query_params
        since = query.get("since", "0")
        seen = self.received.read(query.get("path"), int(since) if since.isdigit() else 0)
        return Response(orjson.dumps(seen), media_type=_JSON)

    async def not_found(self, request: Request) -> Response:
        """Any other path: a 404 in Anthropic's shape for a request that says it speaks
        Anthropic (an ``anthropic-version`` header, a ``/v1/messages/...`` path), in Gemini's for
        one that speaks Gemini (an ``x-goog-api-key`` header, a ``/v1beta/`` path), else
        OpenAI's."""
        path = request.url.path
        self._receive(request, await request.body())
        if "x-goog-api-key" in request.headers or path.startswith("/v1beta/"):
            return self.error(GEMINI_FAMILY, 404, f"Method not found: {path}")
        anthropic = "anthropic-version" in request.headers or path.startswith("/v1/messages/")
        wire = ANTHROPIC_FAMILY if anthropic else OPENAI_FAMILY
        message = "Not found" if anthropic else f"Invalid URL ({request.method} {path})"
        return self.error(wire, 404, message)

    def _receive(self, request: Request, raw: bytes) -> None:
        scope = request.scope  # its path: request.url would build a URL object a request
        self.state.requests += 1
        self.state.paths[scope["path"]] += 1
        query = scope.get("query_string", b"")
        self.received.add(scope["method"], scope["path"], scope["headers"], raw, query)

    def error(
        self,
        wire: Wire,
        status: int,
        message: str,
        kind: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ) -> Response:
        self.state.statuses[str(status)] += 1
        if status in (429, 529):
            self.state.rate_limited += 1
        body, headers = wire.error_response(status, kind, message, code, param, headers)
        return Response(body, status_code=status, media_type=_JSON, headers=headers)

    def forced(self, wire: Wire, status: int, headers: Any) -> Response:
        extra = dict(self.retry_headers) if status in (429, 503, 529) else {}
        if 300 <= status < 400:
            extra["location"] = "http://127.0.0.1:9/moved"
        override_headers(extra, headers)
        message = headers.get("x-sim-error-message") or f"simulated HTTP {status}"
        kind, code = headers.get("x-sim-error-type"), headers.get("x-sim-error-code")
        return self.error(wire, status, message, kind, code, extra)

    async def handle(self, request: Request, wire: Wire) -> Response:
        """One API request: count it, then answer what the headers force, a refusal (key,
        version, cap, a drawn error), or a reply."""
        headers = request.headers
        raw = await request.body()
        self._receive(request, raw)
        self.state.count_credentials(headers)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            return self.error(wire, 400, "the request body is not a JSON object")
        self.state.count_history(body.get("messages"))
        forced, modes = headers.get("x-sim-status"), headers.get("x-sim-mode", "")
        times = headers.get("x-sim-times")
        if times is not None:
            self.marked += 1
            if self.marked > int(times):  # the first N requests only; then behave normally
                forced, modes = None, ""
        refused = wire.refusal(request.query_params)
        if refused is not None:
            return self.error(wire, refused[0], refused[1], code=refused[2])
        if forced:
            return self.forced(wire, int(forced), headers)
        streamed = wire.streamed(request.scope["path"], body)
        refusal = self._refusal(wire, request, raw)
        return refusal or await self._answer(wire, body, modes, headers, streamed)

    def _refusal(self, wire: Wire, request: Request, raw: bytes) -> Response | None:
        """The error this request draws before any work (None: it is served)."""
        config, headers = self.config, request.headers
        if config.api_keys:
            scope = request.scope
            query = scope.get("query_string", b"")
            target = scope.get("raw_path") or scope["path"].encode()
            target += b"?" + query if query else b""
            url = f"http://{headers.get('host', '')}{target.decode('latin-1')}"
            denied = wire.refused(scope["method"], url, headers, raw, config.api_keys)
            if denied is not None:
                status, kind, message = denied
                code = "invalid_api_key" if status == 401 else None
                return self.error(wire, status, message, kind, code)
        if wire.request_id_header == "request-id" and "anthropic-version" not in headers:
            return self.error(wire, 400, "anthropic-version: header is required")
        if config.cap is not None and self.state.concurrency >= config.cap:
            message = f"concurrency cap {config.cap} reached"
            return self.error(wire, 429, message, headers=self.retry_headers)
        outcome = self.behaviour.outcome()
        if outcome == ERROR:
            return self.error(wire, 500, "simulated server error")
        if outcome == RATE_LIMITED:
            return self.error(wire, 429, "simulated rate limit", headers=self.retry_headers)
        return None

    async def _answer(
        self, wire: Wire, body: dict, modes: str, headers: Any, streamed: bool
    ) -> Response:
        """A 200: one JSON body after the whole generation time, or a paced SSE stream (a 400
        for a request the endpoint refuses)."""
        state = self.state
        try:
            reply = wire.reply(self, body, modes)
        except InvalidSimRequest as exc:
            return self.error(wire, 400, exc.message, code=exc.code, param=exc.param)
        response_headers = {wire.request_id_header: reply["id"]}
        if "x-sim-ratelimit" in headers or "x-sim-response-headers" in headers:
            response_headers.update(wire.limit_headers(headers.get("x-sim-ratelimit", "")))
            override_headers(response_headers, headers)
        ttft, total = self.behaviour.timeline(reply["length"], self._prefill(reply, body))
        state.statuses["200"] += 1
        state.concurrency += 1
        state.peak_concurrency = max(state.peak_concurrency, state.concurrency)
        if not streamed or "plain-json" in modes or not wire.streams:
            try:
                if total:
                    await asyncio.sleep(total)
            finally:
                state.concurrency -= 1
            return Response(
                orjson.dumps(wire.plain(reply)), media_type=_JSON, headers=response_headers
            )
        state.streams += 1
        stream = self._stream(wire, reply, modes, ttft, total)
        return StreamingResponse(
            stream, media_type=wire.stream_media_type, headers=response_headers
        )

    def _prefill(self, reply: dict[str, Any], body: dict[str, Any]) -> int:
        """Input tokens of a chat reply's prompt that the prefix cache did not hold (0 without
        a cache: no prefill time), its cached count set on the reply; a text reply (its first
        choice) is held after its prompt."""
        if self.behaviour.prefix is None or "cached" not in reply or "messages" not in body:
            return 0
        text = "".join(reply["pieces"]) if reply["tool"] is None else None
        reply["cached"] = self.behaviour.cached(prompt_of(body), reply["input"], text)
        return reply["input"] - reply["cached"]

    async def _stream(
        self, wire: Wire, r: dict[str, Any], modes: str, ttft: float, total: float
    ) -> AsyncIterator[bytes]:
        behaviour, config = self.behaviour, self.config
        failing = "stream-error" in modes or behaviour.chance(config.stream_error_rate)
        cutting = failing or "cut-stream" in modes or behaviour.chance(config.cut_stream_rate)
        length = r["length"]
        stop_at = length // 2 if cutting else length + 1
        try:
            yield wire.head(r)
            for delay, start, end in pacing(length, ttft, total):
                if delay:
                    await asyncio.sleep(delay)
                if start >= stop_at:
                    break
                chunk = wire.first(r) if start == 0 else b""
                yield chunk + wire.deltas(r, start, min(end, stop_at))
                if end > stop_at:
                    break
            else:
                yield wire.tail(r)
                return
            if failing:
                yield wire.error_event(r)
        finally:
            self.state.concurrency -= 1


def build_app(config: SimConfig) -> Starlette:
    """The ASGI app of ``rrcli sim`` for ``config``."""
    api = _SimAPI(config)
    routes = [Route(path, api.endpoint(wire), methods=["POST"]) for path, wire in ENDPOINTS]
    families = (OPENAI_FAMILY, ANTHROPIC_FAMILY)
    routes += batch_routes(BatchStore(api, _OPENAI, AnthropicWire(), families))
    routes += [
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/token", api.token, methods=["POST"]),
        Route("/stats", api.stats, methods=["GET"]),
        Route("/stats/reset", api.reset, methods=["POST", "GET"]),
        Route("/requests", api.requests, methods=["GET"]),
        Route("/{path:path}", api.not_found, methods=_METHODS),
    ]
    return Starlette(routes=routes)


def check_host(host: str, *, explicit: bool) -> None:
    """Refuse a non-loopback address unless the user named it: a test server with no auth
    should not face a network by accident."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not explicit:
        raise UsageError(
            f"refusing to listen on {host}, which is not a loopback address — "
            "pass --host explicitly to serve the network"
        )


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (port 0: a free one) and already listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say they are TCP; without
    # it every response waits ~40 ms for the client's delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(4096)  # connections queue from now on, even before the server loop runs
    return sock


def uvicorn_server(config: SimConfig) -> Any:
    """The uvicorn server of ``build_app(config)``, to run on a socket from ``listen``."""
    import uvicorn

    app = build_app(config)
    return uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            http="h11",
            loop="asyncio",
            lifespan="off",
            timeout_keep_alive=60,
            backlog=4096,
        )
    )


def serve(config: SimConfig, host: str, port: int, *, echo: Any = print) -> None:
    """Run the server in the foreground until interrupted; ``echo`` the URL once listening."""
    sock = listen(host, port)
    url = f"http://{host}:{sock.getsockname()[1]}"
    server = uvicorn_server(config)
    echo(
        f"rrcli sim listening on {url} — openai base_url {url}/v1, anthropic, azure and gemini "
        f"base_url {url}, stats {url}/stats"
    )
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sock.close()
