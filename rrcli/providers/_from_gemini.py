"""Gemini's answers as rrcli's: a ``GenerateContentResponse`` (plain, or folded from a
``streamGenerateContent?alt=sse`` stream) as a Reply, and Gemini's error documents as rrcli's
errors.

A reply: text parts joined (``thought`` parts as ``reasoning_content``), ``functionCall`` parts
as OpenAI-shaped tool calls that keep the part's ``thoughtSignature``
(``_to_gemini.with_signature``), finish reasons in OpenAI's words, usage from ``usageMetadata``
(input: ``promptTokenCount`` + ``toolUsePromptTokenCount``; output: ``candidatesTokenCount`` +
``thoughtsTokenCount``, reasoning tokens billed as output as OpenAI counts them;
``cachedContentTokenCount`` as cached input). A prompt blocked (``promptFeedback.blockReason``)
or an answer stopped by a filter (finishReason ``SAFETY``, ``RECITATION``,
``PROHIBITED_CONTENT``...) is a ``content_filter`` error naming the reason and the category,
never retried: the same request meets the same filter.

Errors: ``{"error": {"code", "message", "status", "details"}}``. A ``RetryInfo`` detail's
``retryDelay`` is the wait before the retry (Gemini sends no Retry-After); an invalid API key
(``API_KEY_INVALID``, a 400) is the backend's fault, as a 401 or 403 is.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import orjson

from rrcli.errors import ProviderError, StatusError
from rrcli.providers._http import checked_tool_call, invalid_answer, parse_event_json, token_sum
from rrcli.providers._sse import SSEEvent
from rrcli.providers._to_gemini import with_signature
from rrcli.providers.base import MESSAGE_LIMIT, Reply, error_body, redact

__all__ = ["GeminiStream", "gemini_reply", "gemini_status_error", "stream_chunk_error"]

#: finishReason → OpenAI's finish reason
_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}
#: finish reasons that mean a filter stopped the answer
_BLOCKED = frozenset(
    {"SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "IMAGE_SAFETY", "LANGUAGE"}
)
#: Gemini's error statuses that another attempt may cure
_TRANSIENT = frozenset({"UNAVAILABLE", "RESOURCE_EXHAUSTED", "INTERNAL", "DEADLINE_EXCEEDED"})
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_ids = itertools.count()
_RUN = os.urandom(3).hex()  # tool call ids unique across processes writing one session


def gemini_reply(data: dict[str, Any], key: str | None) -> Reply:
    """A ``GenerateContentResponse`` → Reply; ``content_filter`` for a blocked prompt or answer,
    ``invalid_response`` for a body with no candidate."""
    feedback = data.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    if reason:
        raise _blocked(f"the prompt was blocked (blockReason {reason})", feedback, data, key)
    candidates = data.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        raise invalid_answer("no candidates in the body", data, key)
    choices = [_choice(c, i, data, key) for i, c in enumerate(candidates)]
    usage = data.get("usageMetadata") or {}
    first = choices[0]
    cached = usage.get("cachedContentTokenCount")
    thoughts = usage.get("thoughtsTokenCount")
    return Reply(
        output=first["output"],
        finish_reason=first["finish_reason"],
        input_tokens=token_sum(usage, "promptTokenCount", "toolUsePromptTokenCount"),
        output_tokens=token_sum(usage, "candidatesTokenCount", "thoughtsTokenCount"),
        response_model=data.get("modelVersion"),
        reasoning_content=first.pop("reasoning") or None,
        request_id=data.get("responseId"),
        body=data,
        tool_calls=first["tool_calls"],
        choices=[{k: v for k, v in c.items() if k != "reasoning"} for c in choices]
        if len(choices) > 1
        else None,
        cached_input_tokens=cached if type(cached) is int else None,
        reasoning_tokens=thoughts if type(thoughts) is int else None,
    )


def _choice(candidate: Any, index: int, data: dict[str, Any], key: str | None) -> dict[str, Any]:
    if not isinstance(candidate, dict):
        raise invalid_answer(f"candidates[{index}] is not an object", data, key)
    finish = candidate.get("finishReason")
    if finish in _BLOCKED:
        raise _blocked(f"the answer was stopped (finishReason {finish})", candidate, data, key)
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] | None = None
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        call = part.get("functionCall")
        if isinstance(call, dict):
            calls = calls or []
            calls.append(_tool_call(call, part.get("thoughtSignature"), data, key))
        elif isinstance(part.get("text"), str):
            (thoughts if part.get("thought") else texts).append(part["text"])
    if not texts and calls is None and finish not in _FINISH:
        raise invalid_answer(f"candidates[{index}] has no text and no call ({finish})", data, key)
    reason = "tool_calls" if calls else _FINISH.get(finish, str(finish).lower())
    return {
        "output": "".join(texts),
        "finish_reason": reason,
        "tool_calls": calls,
        "reasoning": "".join(thoughts),
    }


def _tool_call(call: dict[str, Any], signature: Any, data: object, key: str | None) -> dict:
    """A functionCall part as a tool call: its own id when it has one, else a new one."""
    call_id = call.get("id") or f"call_{_RUN}{next(_ids):06d}"
    args = call.get("args")
    raw = "{}" if args is None else args
    raw = orjson.dumps(raw).decode() if isinstance(raw, dict) else raw
    made = checked_tool_call(
        call_id, call.get("name"), raw, "a functionCall's args are not an object", data, key
    )
    return with_signature(made, signature if isinstance(signature, str) else None)


def _blocked(what: str, where: dict[str, Any], data: dict[str, Any], key: str | None) -> Exception:
    """A filter's refusal, naming the categories it rated as probable."""
    ratings = where.get("safetyRatings")
    flagged = [
        f"{r.get('category')}: {r.get('probability')}"
        for r in (ratings if isinstance(ratings, list) else ())
        if isinstance(r, dict) and (r.get("blocked") or r.get("probability") in ("MEDIUM", "HIGH"))
    ]
    detail = f" ({', '.join(flagged)})" if flagged else ""
    return ProviderError(
        f"content filtered: Gemini {what}{detail} — another attempt meets the same filter; "
        "change the prompt or the backend's safetySettings",
        type="content_filter",
        transient=False,
        status_code=200,
        body=error_body(orjson.dumps(data), key),
    )


class GeminiStream:
    """Folds ``streamGenerateContent?alt=sse`` chunks into the response they add up to: each
    candidate's parts appended (consecutive text of one kind joined), the last finishReason,
    usage and ids kept. The stream has no end marker: it is whole once a finishReason (or a
    prompt block) came."""

    __slots__ = ("_key", "candidates", "done", "top")

    def __init__(self, key: str | None) -> None:
        self._key = key
        self.done = False
        self.top: dict[str, Any] = {}
        self.candidates: dict[int, dict[str, Any]] = {}

    def add(self, event: SSEEvent) -> str | None:
        data = parse_event_json(event)
        if data.get("error"):
            raise stream_chunk_error(data["error"], self._key, event.data)
        for name in ("usageMetadata", "modelVersion", "responseId", "promptFeedback"):
            if name in data:
                self.top[name] = data[name]
        feedback = data.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            self.done = True
        said: str | None = None
        for candidate in data.get("candidates") or ():
            if isinstance(candidate, dict):
                piece = self._candidate(candidate)
                if piece is not None:
                    said = (said or "") + piece
        return said

    def _candidate(self, candidate: dict[str, Any]) -> str | None:
        index = candidate.get("index", 0)
        held = self.candidates.setdefault(index, {"index": index, "content": {"parts": []}})
        for name, value in candidate.items():
            if name not in ("content", "index"):
                held[name] = value
        if candidate.get("finishReason"):
            self.done = True
        content = candidate.get("content")
        parts = held["content"]["parts"]
        said: str | None = None
        for part in (content.get("parts") if isinstance(content, dict) else None) or ():
            if not isinstance(part, dict):
                continue
            text = part.get("text")
            last = parts[-1] if parts else None
            if isinstance(text, str) and "functionCall" not in part:
                said = (said or "") + ("" if part.get("thought") else text)
                if (
                    last is not None
                    and isinstance(last.get("text"), str)
                    and bool(last.get("thought")) == bool(part.get("thought"))
                ):
                    last["text"] += text
                    if "thoughtSignature" in part:
                        last["thoughtSignature"] = part["thoughtSignature"]
                    continue
            elif "functionCall" in part:
                said = said or ""
            parts.append(dict(part))
        return said

    def reply(self) -> Reply:
        body = {**self.top, "candidates": [self.candidates[i] for i in sorted(self.candidates)]}
        return gemini_reply(body, self._key)


def _google_error(body: bytes | Any) -> dict[str, Any]:
    try:
        data = orjson.loads(body) if isinstance(body, bytes | bytearray) else body
    except orjson.JSONDecodeError:
        return {}
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else {}


def _details(error: dict[str, Any], kind: str) -> dict[str, Any]:
    for detail in error.get("details") or ():
        if isinstance(detail, dict) and detail.get("@type") == kind:
            return detail
    return {}


def _delay(error: dict[str, Any]) -> float | None:
    """RetryInfo's ``retryDelay`` (``"1.5s"``) in seconds."""
    text = _details(error, _RETRY_INFO).get("retryDelay")
    if not isinstance(text, str) or not text.endswith("s"):
        return None
    try:
        seconds = float(text[:-1])
    except ValueError:
        return None
    return seconds if 0 <= seconds < 86_400 else None


def gemini_status_error(error: ProviderError, content: bytes, key: str | None) -> ProviderError:
    """``error`` (``base.error_from_status``'s, by the status) read with what Gemini's error
    document adds: its status name in the message, RetryInfo's delay, an invalid key as the
    backend's fault."""
    google = _google_error(content)
    status = google.get("status")
    if not isinstance(status, str):
        return error
    message = redact(str(google.get("message") or ""), key)[:MESSAGE_LIMIT]
    bad_key = _details(google, _ERROR_INFO).get("reason") == "API_KEY_INVALID"
    delay = _delay(google)
    transient = error.transient and not bad_key
    return StatusError(
        f"HTTP {error.status_code} {redact(status, key)[:40]}: {message}",
        type=error.type,
        transient=transient,
        status_code=error.status_code,
        retry_after=delay if delay is not None and transient else error.retry_after,
        rate_limited=error.rate_limited,
        body=error.body,
        backend_down=error.backend_down or bad_key,
    )


def stream_chunk_error(error: object, key: str | None, data: str) -> ProviderError:
    """An ``error`` object inside a 200 stream: transient when its status is one another attempt
    may cure (``UNAVAILABLE``, ``RESOURCE_EXHAUSTED``...)."""
    google = error if isinstance(error, dict) else {}
    status = google.get("status")
    status = status if isinstance(status, str) else "stream_error"
    message = redact(str(google.get("message") or ""), key)[:MESSAGE_LIMIT]
    return ProviderError(
        f"error event in the stream: {redact(status, key)[:40]}: {message}",
        type="stream_error",
        transient=status in _TRANSIENT,
        rate_limited=status == "RESOURCE_EXHAUSTED",
        retry_after=_delay(google),
        body=error_body(data, key),
    )
