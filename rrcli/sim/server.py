"""The ``rrcli sim`` server: an HTTP app (starlette on uvicorn) over the behaviour model of
``rrcli.sim.behaviour``, speaking the wire formats of ``rrcli.sim.wire``.

Trying a profile should not cost money, and the tests and benchmarks need a server whose latency,
errors, rate limits and concurrency cap are known. It serves OpenAI ``/v1/chat/completions`` and
Anthropic ``/v1/messages`` (plain and SSE streaming, usage in both), ``/v1/models``, and
``/stats`` (``/stats/reset``) so tests can see what the server saw: requests, peak concurrency,
429s sent, assistant messages received in histories (and how many carried
``reasoning_content``), and requests per credential (by a short sha256 fingerprint of the key,
with the header it came in).

Tests force behaviour per backend with request headers (a profile's ``headers``):
``x-sim-status: CODE`` answers that status (with ``x-sim-error-type``, ``x-sim-error-code``,
``x-sim-error-message``); ``x-sim-response-headers: {JSON}`` adds headers to any answer, error or
success (a null value removes one); ``x-sim-ratelimit: requests=MS,tokens=MS`` makes a success say
those budgets are spent until MS from now, in the API's own headers (OpenAI
``x-ratelimit-remaining-requests: 0`` with ``x-ratelimit-reset-requests: 500ms``; Anthropic
``anthropic-ratelimit-requests-remaining: 0`` with an RFC 3339 ``...-reset``);
``x-sim-mode: a,b`` with ``cut-stream`` (end a stream halfway, without its end
marker), ``stream-error`` (an ``error`` event halfway through a 200 stream), ``pause-turn``
(Anthropic: stop with ``pause_turn`` halfway unless the last message is the assistant's, i.e. once
per turn), ``plain-json`` (answer a streaming request with one JSON body), ``reasoning`` (add
reasoning text / a thinking block). ``x-sim-times: N`` limits the forced status and modes to
the first N requests that carry the header (per server), so a retry of the same call succeeds.

Counters live on one event loop, so they need no locks. Per request the work is one JSON parse, a
few dict operations and one JSON encode: this is the server of the overhead benchmark.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import random
import socket
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, fields
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from rrcli.errors import UsageError
from rrcli.sim.behaviour import (
    ERROR,
    RATE_LIMITED,
    SimBehaviour,
    SimConfig,
    key_fingerprint,
    pacing,
)
from rrcli.sim.wire import AnthropicWire, OpenAIWire, Wire, override_headers
from rrcli.tokens import estimate_input_tokens

__all__ = ["build_app", "check_host", "listen", "serve", "uvicorn_server"]

_JSON = "application/json"
_SSE = "text/event-stream"


@dataclass(slots=True)
class _State:
    """What /stats reports; ``reset`` zeroes it but for the calls still in flight."""

    requests: int = 0
    streams: int = 0
    concurrency: int = 0
    peak_concurrency: int = 0
    rate_limited: int = 0
    assistant_messages: int = 0  # assistant messages received in request histories
    assistant_reasoning: int = 0  # ... of them carrying reasoning_content
    statuses: Counter[str] = field(default_factory=Counter)
    paths: Counter[str] = field(default_factory=Counter)
    credentials: Counter[str] = field(default_factory=Counter)

    def reset(self) -> None:
        fresh = _State(concurrency=self.concurrency, peak_concurrency=self.concurrency)
        for f in fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def snapshot(self) -> dict[str, Any]:
        values = ((f.name, getattr(self, f.name)) for f in fields(self))
        return {name: dict(v) if isinstance(v, Counter) else v for name, v in values}


class _SimAPI:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.state = _State()
        self.behaviour = SimBehaviour(config.settings, random.Random(config.seed))
        self.openai_wire = OpenAIWire()
        self.anthropic_wire = AnthropicWire()
        ms = config.settings.retry_after_ms
        self.retry_headers = {
            "retry-after-ms": str(round(ms)),
            "retry-after": str(max(1, math.ceil(ms / 1000.0))),
        }
        self.ids = 0
        self.marked = 0  # requests seen with x-sim-times

    async def openai(self, request: Request) -> Response:
        return await self.handle(request, self.openai_wire)

    async def anthropic(self, request: Request) -> Response:
        return await self.handle(request, self.anthropic_wire)

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
        return Response(orjson.dumps(self.state.snapshot()), media_type=_JSON)

    def error(
        self,
        wire: Wire,
        status: int,
        message: str,
        kind: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        self.state.statuses[str(status)] += 1
        if status in (429, 529):
            self.state.rate_limited += 1
        body = wire.error_body(status, kind, message, code)
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
        self.state.requests += 1
        self.state.paths[request.url.path] += 1
        self._count_credentials(headers)
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            return self.error(wire, 400, "the request body is not a JSON object")
        self._count_history(body.get("messages"))
        forced, modes = headers.get("x-sim-status"), headers.get("x-sim-mode", "")
        times = headers.get("x-sim-times")
        if times is not None:
            self.marked += 1
            if self.marked > int(times):  # the first N requests only; then behave normally
                forced, modes = None, ""
        if forced:
            return self.forced(wire, int(forced), headers)
        return self._refusal(wire, headers) or await self._answer(wire, body, modes, headers)

    def _refusal(self, wire: Wire, headers: Any) -> Response | None:
        """The error this request draws before any work (None: it is served)."""
        config = self.config
        if config.api_keys and wire.key(headers) not in config.api_keys:
            return self.error(
                wire, 401, "invalid API key", "authentication_error", "invalid_api_key"
            )
        if wire is self.anthropic_wire and "anthropic-version" not in headers:
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

    async def _answer(self, wire: Wire, body: dict, modes: str, headers: Any) -> Response:
        """A 200: one JSON body after the whole generation time, or a paced SSE stream."""
        state = self.state
        reply = self._reply(body, modes, wire)
        self.ids += 1
        reply["id"] = f"sim-{self.ids}"
        response_headers = {wire.request_id_header: reply["id"]}
        if "x-sim-ratelimit" in headers or "x-sim-response-headers" in headers:
            response_headers.update(wire.limit_headers(headers.get("x-sim-ratelimit", "")))
            override_headers(response_headers, headers)
        ttft, total = self.behaviour.timeline(len(reply["pieces"]))
        state.statuses["200"] += 1
        state.concurrency += 1
        state.peak_concurrency = max(state.peak_concurrency, state.concurrency)
        if body.get("stream") is not True or "plain-json" in modes:
            try:
                if total:
                    await asyncio.sleep(total)
            finally:
                state.concurrency -= 1
            return Response(
                orjson.dumps(wire.plain(reply)), media_type=_JSON, headers=response_headers
            )
        state.streams += 1
        stream = self._stream(wire, reply, ttft, total)
        return StreamingResponse(stream, media_type=_SSE, headers=response_headers)

    def _count_history(self, messages: Any) -> None:
        """What came back in the history: assistant turns, and those carrying reasoning."""
        if not isinstance(messages, list):
            return
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "assistant":
                self.state.assistant_messages += 1
                self.state.assistant_reasoning += "reasoning_content" in message

    def _count_credentials(self, headers: Any) -> None:
        seen = False
        bearer = headers.get("authorization")
        if bearer:
            self.state.credentials[
                "authorization:" + key_fingerprint(bearer.removeprefix("Bearer "))
            ] += 1
            seen = True
        api_key = headers.get("x-api-key")
        if api_key:
            self.state.credentials["x-api-key:" + key_fingerprint(api_key)] += 1
            seen = True
        if not seen:
            self.state.credentials["none"] += 1

    def _reply(self, body: dict[str, Any], modes: str, wire: Wire) -> dict[str, Any]:
        behaviour = self.behaviour
        messages = body.get("messages")
        messages = messages if isinstance(messages, list) else []
        pieces = behaviour.pieces(behaviour.variant(messages))
        finish = "stop"
        continuing = (
            bool(messages)
            and isinstance(messages[-1], dict)
            and messages[-1].get("role") == "assistant"
        )
        if wire is self.anthropic_wire and continuing:
            pieces = pieces[len(pieces) // 2 :]
        elif wire is self.anthropic_wire and (
            "pause-turn" in modes or behaviour.chance(self.config.pause_turn_rate)
        ):
            pieces, finish = pieces[: len(pieces) // 2], "pause_turn"
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        if isinstance(limit, int) and 0 < limit < len(pieces):
            pieces, finish = pieces[:limit], "length"
        reasoning = "sim reasoning: " + pieces[0] if "reasoning" in modes and pieces else None
        return {
            "body": body,
            "modes": modes,
            "model": self.config.model or body.get("model") or "sim-model",
            "pieces": pieces,
            "finish": finish,
            "input": estimate_input_tokens(messages),
            "reasoning": reasoning,
            "text_index": 1 if reasoning else 0,
            "cache": "cache" in modes,
        }

    async def _stream(
        self, wire: Wire, r: dict[str, Any], ttft: float, total: float
    ) -> AsyncIterator[bytes]:
        behaviour, config = self.behaviour, self.config
        failing = "stream-error" in r["modes"] or behaviour.chance(config.stream_error_rate)
        cutting = failing or "cut-stream" in r["modes"] or behaviour.chance(config.cut_stream_rate)
        pieces = r["pieces"]
        stop_at = len(pieces) // 2 if cutting else len(pieces) + 1
        try:
            yield wire.head(r)
            for delay, start, end in pacing(len(pieces), ttft, total):
                if delay:
                    await asyncio.sleep(delay)
                if start >= stop_at:
                    break
                chunk = wire.first(r) if start == 0 else b""
                yield chunk + wire.deltas(r, pieces[start : min(end, stop_at)])
                if end > stop_at:
                    break
            else:
                yield wire.tail(r)
                return
            if failing:
                yield wire.error_event()
        finally:
            self.state.concurrency -= 1


def build_app(config: SimConfig) -> Starlette:
    """The ASGI app of ``rrcli sim`` for ``config``."""
    api = _SimAPI(config)
    routes = [
        Route("/v1/chat/completions", api.openai, methods=["POST"]),
        Route("/chat/completions", api.openai, methods=["POST"]),
        Route("/v1/messages", api.anthropic, methods=["POST"]),
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/stats", api.stats, methods=["GET"]),
        Route("/stats/reset", api.reset, methods=["POST", "GET"]),
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
        f"rrcli sim listening on {url} — openai base_url {url}/v1, anthropic base_url {url}, "
        f"stats {url}/stats"
    )
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sock.close()
