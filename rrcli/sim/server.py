"""The ``rrcli sim`` HTTP app (starlette): the wire formats over the behaviour
model of ``rrcli.sim.behaviour``.

Kept apart from ``sim.py`` so the in-process provider never imports starlette. Each API's wire
format is a small dialect (error bodies, plain bodies, SSE events); one handler applies the
behaviour (forced statuses, keys, the cap, drawn errors, timing, cut or failing streams). Counters
live on one event loop, so they need no locks. Per request the work is one JSON parse, a few dict
operations and one JSON encode: this is the server of the overhead benchmark.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from rrcli.sim.behaviour import (
    ERROR,
    RATE_LIMITED,
    SimBehaviour,
    SimConfig,
    key_fingerprint,
    pacing,
)
from rrcli.tokens import estimate_input_tokens

__all__ = ["build_app"]

_JSON = "application/json"
_SSE = "text/event-stream"


def _sse(data: object, event: str | None = None) -> bytes:
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def _override(extra: dict[str, str], headers: Any) -> None:
    """Apply ``x-sim-response-headers: {JSON}`` to a response's headers (null removes one)."""
    override = headers.get("x-sim-response-headers")
    if override:
        for name, value in orjson.loads(override).items():
            if value is None:
                extra.pop(name.lower(), None)
            else:
                extra[name.lower()] = str(value)


def _exhausted(spec: str) -> dict[str, float]:
    """``x-sim-ratelimit: requests=500,tokens=250`` → the budgets to report as spent, each with
    its reset in seconds."""
    out: dict[str, float] = {}
    for item in spec.split(","):
        kind, _, ms = item.partition("=")
        if kind.strip() in ("requests", "tokens") and ms.strip():
            out[kind.strip()] = float(ms) / 1000.0
    return out


class _OpenAI:
    """The chat-completions wire format."""

    request_id_header = "x-request-id"
    _types: ClassVar[dict[int, str]] = {
        400: "invalid_request_error",
        401: "invalid_request_error",
        429: "requests",
    }

    def key(self, headers: Any) -> str | None:
        value = headers.get("authorization", "")
        return value[7:] if value.startswith("Bearer ") else None

    def limit_headers(self, spec: str) -> dict[str, str]:
        """Rate-limit headers saying the budgets in ``spec`` are spent (resets as durations)."""
        out = {}
        for kind, seconds in _exhausted(spec).items():
            out[f"x-ratelimit-remaining-{kind}"] = "0"
            out[f"x-ratelimit-reset-{kind}"] = f"{round(seconds * 1000)}ms"
        return out

    def error_body(self, status: int, kind: str | None, message: str, code: str | None) -> bytes:
        kind = kind or self._types.get(status, "server_error")
        return orjson.dumps(
            {"error": {"message": message, "type": kind, "param": None, "code": code}}
        )

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(r["pieces"])}
        if r["reasoning"]:
            message["reasoning_content"] = r["reasoning"]
        return {
            "id": r["id"],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": r["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": r["finish"]}],
            "usage": _openai_usage(r),
        }

    def head(self, r: dict[str, Any]) -> bytes:
        return _sse(self._chunk(r, {"role": "assistant", "content": ""}, None))

    def first(self, r: dict[str, Any]) -> bytes:
        if not r["reasoning"]:
            return b""
        return _sse(self._chunk(r, {"reasoning_content": r["reasoning"]}, None))

    def deltas(self, r: dict[str, Any], pieces: tuple[str, ...]) -> bytes:
        prefix = b"data: " + orjson.dumps(self._chunk(r, {"content": ""}, None))
        cut = prefix.index(b'"content":""') + len(b'"content":')
        before, after = prefix[:cut], prefix[cut + 2 :] + b"\n\n"
        return b"".join(before + orjson.dumps(p) + after for p in pieces)

    def tail(self, r: dict[str, Any]) -> bytes:
        out = _sse(self._chunk(r, {}, r["finish"]))
        options = r["body"].get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            usage_chunk = self._chunk(r, {}, None)
            usage_chunk["choices"] = []
            usage_chunk["usage"] = _openai_usage(r)
            out += _sse(usage_chunk)
        return out + b"data: [DONE]\n\n"

    def error_event(self) -> bytes:
        return _sse({"error": {"message": "simulated failure mid-stream", "type": "server_error"}})

    def _chunk(self, r: dict[str, Any], delta: dict[str, Any], finish: str | None) -> dict:
        return {
            "id": r["id"],
            "object": "chat.completion.chunk",
            "model": r["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }


def _openai_usage(r: dict[str, Any]) -> dict[str, int]:
    n = len(r["pieces"])
    return {"prompt_tokens": r["input"], "completion_tokens": n, "total_tokens": r["input"] + n}


class _Anthropic:
    """The Messages wire format."""

    request_id_header = "request-id"
    _types: ClassVar[dict[int, str]] = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }
    _stops: ClassVar[dict[str, str]] = {
        "stop": "end_turn",
        "length": "max_tokens",
        "pause_turn": "pause_turn",
    }

    def key(self, headers: Any) -> str | None:
        return headers.get("x-api-key")

    def limit_headers(self, spec: str) -> dict[str, str]:
        """Rate-limit headers saying the budgets in ``spec`` are spent (resets in RFC 3339)."""
        out = {}
        for kind, seconds in _exhausted(spec).items():
            when = datetime.fromtimestamp(time.time() + seconds, UTC)
            out[f"anthropic-ratelimit-{kind}-remaining"] = "0"
            out[f"anthropic-ratelimit-{kind}-reset"] = when.isoformat(
                timespec="milliseconds"
            ).replace("+00:00", "Z")
        return out

    def error_body(self, status: int, kind: str | None, message: str, code: str | None) -> bytes:
        kind = kind or self._types.get(status, "api_error")
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})

    def _usage(self, r: dict[str, Any], output: int) -> dict[str, int]:
        total = r["input"]
        cached = total // 2 if r["cache"] else 0
        return {
            "input_tokens": total - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": output,
        }

    def _content(self, r: dict[str, Any]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if r["reasoning"]:
            blocks.append({"type": "thinking", "thinking": r["reasoning"], "signature": "sim"})
        blocks.append({"type": "text", "text": "".join(r["pieces"])})
        return blocks

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": r["id"],
            "type": "message",
            "role": "assistant",
            "model": r["model"],
            "content": self._content(r),
            "stop_reason": self._stops[r["finish"]],
            "stop_sequence": None,
            "usage": self._usage(r, len(r["pieces"])),
        }

    def head(self, r: dict[str, Any]) -> bytes:
        message = {**self.plain(r), "content": [], "stop_reason": None}
        message["usage"] = self._usage(r, 1)
        return _sse({"type": "message_start", "message": message}, "message_start") + _sse(
            {"type": "ping"}, "ping"
        )

    def first(self, r: dict[str, Any]) -> bytes:
        out = b""
        if r["reasoning"]:
            out += _sse(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": ""},
                },
                "content_block_start",
            )
            delta = {"type": "thinking_delta", "thinking": r["reasoning"]}
            out += _sse(
                {"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta"
            )
            delta = {"type": "signature_delta", "signature": "sim"}
            out += _sse(
                {"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta"
            )
            out += _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
        block = {
            "type": "content_block_start",
            "index": r["text_index"],
            "content_block": {"type": "text", "text": ""},
        }
        return out + _sse(block, "content_block_start")

    def deltas(self, r: dict[str, Any], pieces: tuple[str, ...]) -> bytes:
        index = r["text_index"]
        return b"".join(
            _sse(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": p},
                },
                "content_block_delta",
            )
            for p in pieces
        )

    def tail(self, r: dict[str, Any]) -> bytes:
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": self._stops[r["finish"]], "stop_sequence": None},
        }
        delta["usage"] = {"output_tokens": len(r["pieces"])}
        return (
            _sse({"type": "content_block_stop", "index": r["text_index"]}, "content_block_stop")
            + _sse(delta, "message_delta")
            + _sse({"type": "message_stop"}, "message_stop")
        )

    def error_event(self) -> bytes:
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return _sse(error, "error")


class _State:
    """What /stats reports."""

    def __init__(self) -> None:
        self.concurrency = 0
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.streams = 0
        self.peak = self.concurrency
        self.rate_limited = 0
        self.assistant_messages = 0  # assistant messages received in request histories
        self.assistant_reasoning = 0  # ... of them carrying reasoning_content
        self.statuses: Counter[str] = Counter()
        self.paths: Counter[str] = Counter()
        self.credentials: Counter[str] = Counter()

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "streams": self.streams,
            "concurrency": self.concurrency,
            "peak_concurrency": self.peak,
            "rate_limited": self.rate_limited,
            "assistant_messages": self.assistant_messages,
            "assistant_reasoning": self.assistant_reasoning,
            "statuses": dict(self.statuses),
            "paths": dict(self.paths),
            "credentials": dict(self.credentials),
        }


class _SimAPI:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.state = _State()
        self.behaviour = SimBehaviour(config.settings, random.Random(config.seed))
        self.openai_dialect = _OpenAI()
        self.anthropic_dialect = _Anthropic()
        ms = config.settings.retry_after_ms
        self.retry_headers = {
            "retry-after-ms": str(round(ms)),
            "retry-after": str(max(1, math.ceil(ms / 1000.0))),
        }
        self.ids = 0
        self.marked = 0  # requests seen with x-sim-times

    async def openai(self, request: Request) -> Response:
        return await self.handle(request, self.openai_dialect)

    async def anthropic(self, request: Request) -> Response:
        return await self.handle(request, self.anthropic_dialect)

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
        dialect: Any,
        status: int,
        message: str,
        kind: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        self.state.statuses[str(status)] += 1
        if status in (429, 529):
            self.state.rate_limited += 1
        body = dialect.error_body(status, kind, message, code)
        return Response(body, status_code=status, media_type=_JSON, headers=headers)

    def forced(self, dialect: Any, status: int, headers: Any) -> Response:
        extra = dict(self.retry_headers) if status in (429, 503, 529) else {}
        if 300 <= status < 400:
            extra["location"] = "http://127.0.0.1:9/moved"
        _override(extra, headers)
        message = headers.get("x-sim-error-message") or f"simulated HTTP {status}"
        kind, code = headers.get("x-sim-error-type"), headers.get("x-sim-error-code")
        return self.error(dialect, status, message, kind, code, extra)

    async def handle(self, request: Request, dialect: Any) -> Response:
        state, config, behaviour = self.state, self.config, self.behaviour
        headers = request.headers
        state.requests += 1
        state.paths[request.url.path] += 1
        key = dialect.key(headers)
        self._count_credentials(headers)
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            return self.error(dialect, 400, "the request body is not a JSON object")
        self._count_history(body.get("messages"))
        forced, modes = headers.get("x-sim-status"), headers.get("x-sim-mode", "")
        times = headers.get("x-sim-times")
        if times is not None:
            self.marked += 1
            if self.marked > int(times):  # the first N requests only; then behave normally
                forced, modes = None, ""
        if forced:
            return self.forced(dialect, int(forced), headers)
        if config.api_keys and key not in config.api_keys:
            return self.error(
                dialect, 401, "invalid API key", "authentication_error", "invalid_api_key"
            )
        if dialect is self.anthropic_dialect and "anthropic-version" not in headers:
            return self.error(dialect, 400, "anthropic-version: header is required")
        if config.cap is not None and state.concurrency >= config.cap:
            message = f"concurrency cap {config.cap} reached"
            return self.error(dialect, 429, message, headers=self.retry_headers)
        outcome = behaviour.outcome()
        if outcome == ERROR:
            return self.error(dialect, 500, "simulated server error")
        if outcome == RATE_LIMITED:
            return self.error(dialect, 429, "simulated rate limit", headers=self.retry_headers)
        reply = self._reply(body, modes, dialect)
        self.ids += 1
        reply["id"] = f"sim-{self.ids}"
        response_headers = {dialect.request_id_header: reply["id"]}
        if "x-sim-ratelimit" in headers or "x-sim-response-headers" in headers:
            response_headers.update(dialect.limit_headers(headers.get("x-sim-ratelimit", "")))
            _override(response_headers, headers)
        ttft, total = behaviour.timeline(len(reply["pieces"]))
        state.statuses["200"] += 1
        state.concurrency += 1
        state.peak = max(state.peak, state.concurrency)
        if body.get("stream") is not True or "plain-json" in reply["modes"]:
            try:
                if total:
                    await asyncio.sleep(total)
            finally:
                state.concurrency -= 1
            return Response(
                orjson.dumps(dialect.plain(reply)), media_type=_JSON, headers=response_headers
            )
        state.streams += 1
        stream = self._stream(dialect, reply, ttft, total)
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

    def _reply(self, body: dict[str, Any], modes: str, dialect: Any) -> dict[str, Any]:
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
        if dialect is self.anthropic_dialect and continuing:
            pieces = pieces[len(pieces) // 2 :]
        elif dialect is self.anthropic_dialect and (
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
        self, dialect: Any, r: dict[str, Any], ttft: float, total: float
    ) -> AsyncIterator[bytes]:
        behaviour, config = self.behaviour, self.config
        failing = "stream-error" in r["modes"] or behaviour.chance(config.stream_error_rate)
        cutting = failing or "cut-stream" in r["modes"] or behaviour.chance(config.cut_stream_rate)
        pieces = r["pieces"]
        stop_at = len(pieces) // 2 if cutting else len(pieces) + 1
        try:
            yield dialect.head(r)
            for delay, start, end in pacing(len(pieces), ttft, total):
                if delay:
                    await asyncio.sleep(delay)
                if start >= stop_at:
                    break
                chunk = dialect.first(r) if start == 0 else b""
                yield chunk + dialect.deltas(r, pieces[start : min(end, stop_at)])
                if end > stop_at:
                    break
            else:
                yield dialect.tail(r)
                return
            if failing:
                yield dialect.error_event()
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
