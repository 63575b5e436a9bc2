"""The Gemini API as ``rrcli sim`` answers it: ``/v1beta/models/{model}:generateContent``,
``:streamGenerateContent?alt=sse``, ``:embedContent`` and ``:batchEmbedContents``.

The key travels in ``x-goog-api-key``; an invalid one is a 400 ``INVALID_ARGUMENT`` whose
``ErrorInfo`` says ``API_KEY_INVALID``, as Gemini answers it. Errors are ``{"error": {"code",
"message", "status", "details"}}``; a 429 is ``RESOURCE_EXHAUSTED`` with its wait in a
``RetryInfo`` detail (``retryDelay``), no Retry-After header. A request body is checked as
strictly as the API's proto parser checks it: a field it does not have is a 400 (``Unknown name
"x" at 'generation_config': Cannot find field.``), in either spelling the API reads (camelCase
or snake_case).

Replies: a ``model`` turn of text (a ``thought`` part first with the ``reasoning`` mode or
``thinkingConfig.includeThoughts``), or a ``functionCall`` part carrying a ``thoughtSignature``
(a thinking model's); ``usageMetadata`` with ``cachedContentTokenCount`` (``cache`` mode) and
``thoughtsTokenCount``. The ``signatures`` mode refuses, as Gemini 3 does, a history whose
function calls of the current turn do not carry the signature the sim gave them. Modes
``safety-prompt`` (``promptFeedback.blockReason``, no candidate) and ``safety-answer``
(finishReason ``SAFETY``) trigger the safety filter. A stream is ``data: {chunk}`` events with
CRLF line ends and no end marker: the last chunk carries the finishReason and the usage.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from rrcli.errors import InvalidSimRequest
from rrcli.sim.endpoints import DEFAULT_DIMENSIONS, unit_vector
from rrcli.sim.replies import chat_reply
from rrcli.sim.wire import Wire

__all__ = ["GeminiEmbedWire", "GeminiFamily", "GeminiWire"]

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_FINISH = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP"}
_SAFETY = [
    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True},
    {"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"},
]

# --- the request schema: each object's fields (None: a value not looked into) ---------------

_ANY = None
_THINKING = {"includeThoughts": _ANY, "thinkingBudget": _ANY, "thinkingLevel": _ANY}
_CONFIG = {
    **dict.fromkeys(
        [
            "stopSequences",
            "responseMimeType",
            "responseSchema",
            "responseJsonSchema",
            "responseModalities",
            "candidateCount",
            "maxOutputTokens",
            "temperature",
            "topP",
            "topK",
            "seed",
            "presencePenalty",
            "frequencyPenalty",
            "responseLogprobs",
            "logprobs",
            "enableEnhancedCivicAnswers",
            "speechConfig",
            "mediaResolution",
        ],
        _ANY,
    ),
    "thinkingConfig": _THINKING,
}
_PART = {
    "text": _ANY,
    "inlineData": {"mimeType": _ANY, "data": _ANY},
    "fileData": {"mimeType": _ANY, "fileUri": _ANY},
    "functionCall": {"id": _ANY, "name": _ANY, "args": _ANY},
    "functionResponse": {
        "id": _ANY,
        "name": _ANY,
        "response": _ANY,
        "willContinue": _ANY,
        "scheduling": _ANY,
        "parts": _ANY,
    },
    "executableCode": _ANY,
    "codeExecutionResult": _ANY,
    "thought": _ANY,
    "thoughtSignature": _ANY,
    "videoMetadata": _ANY,
    "partMetadata": _ANY,
    "mediaResolution": _ANY,
}
_CONTENT = {"role": _ANY, "parts": [_PART]}
_DECLARATION = {
    "name": _ANY,
    "description": _ANY,
    "behavior": _ANY,
    "parameters": _ANY,
    "parametersJsonSchema": _ANY,
    "response": _ANY,
    "responseJsonSchema": _ANY,
}
_TOOL = {
    "functionDeclarations": [_DECLARATION],
    **dict.fromkeys(
        [
            "googleSearchRetrieval",
            "codeExecution",
            "googleSearch",
            "computerUse",
            "urlContext",
            "fileSearch",
            "googleMaps",
        ],
        _ANY,
    ),
}
GENERATE = {
    "model": _ANY,
    "contents": [_CONTENT],
    "tools": [_TOOL],
    "toolConfig": {
        "functionCallingConfig": {"mode": _ANY, "allowedFunctionNames": _ANY},
        "retrievalConfig": _ANY,
    },
    "safetySettings": [{"category": _ANY, "threshold": _ANY, "method": _ANY}],
    "systemInstruction": _CONTENT,
    "generationConfig": _CONFIG,
    "cachedContent": _ANY,
}
_EMBED = {
    "model": _ANY,
    "content": _CONTENT,
    "taskType": _ANY,
    "title": _ANY,
    "outputDimensionality": _ANY,
}
BATCH_EMBED = {"requests": [_EMBED]}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def strict(value: Any, schema: Any, where: str = "") -> Any:
    """``value`` with its field names in camelCase; InvalidSimRequest naming the first field
    ``schema`` does not have, in the words of the API's JSON parser."""
    if schema is None:
        return value
    if isinstance(schema, list):
        if not isinstance(value, list):
            raise _invalid(f"Invalid value at '{where}', expected a list")
        return [strict(item, schema[0], where) for item in value]
    if not isinstance(value, dict):
        raise _invalid(f"Invalid value at '{where}', expected an object")
    out = {}
    for name, item in value.items():
        key = _camel(name)
        if key not in schema:
            at = f" at '{where}'" if where else ""
            raise _invalid(
                f'Invalid JSON payload received. Unknown name "{name}"{at}: Cannot find field.'
            )
        inner = f"{where}.{_snake(key)}" if where else _snake(key)
        out[key] = strict(item, schema[key], inner)
    return out


_DATA = ("text", "inlineData", "fileData", "functionCall", "functionResponse")
_CODE = ("executableCode", "codeExecutionResult")


def check_parts(contents: list[Any], where: str = "contents") -> None:
    """Each content has parts, each part one data field (an empty text is none: proto3 reads
    it as unset), as the API's validation requires."""
    for i, content in enumerate(contents):
        parts = content.get("parts") if isinstance(content, dict) else None
        if not parts:
            raise _invalid(
                f"* GenerateContentRequest.{where}[{i}].parts: contents.parts must not be empty."
            )
        for j, part in enumerate(parts):
            said = [k for k in (*_DATA, *_CODE) if part.get(k) not in (None, "")]
            if len(said) != 1:
                raise _invalid(
                    f"* GenerateContentRequest.{where}[{i}].parts[{j}].data: required oneof "
                    "field 'data' must have one initialized field"
                )


def _invalid(message: str) -> InvalidSimRequest:
    return InvalidSimRequest(message)


# --- the wire ------------------------------------------------------------------------------


class GeminiFamily(Wire):
    """What every Gemini method shares: ``x-goog-api-key`` and Google's error document."""

    request_id_header = "x-goog-request-id"
    bad_key = (400, "API_KEY_INVALID")

    def key(self, headers: Any) -> str | None:
        return headers.get("x-goog-api-key")

    def limit_headers(self, spec: str) -> dict[str, str]:
        return {}  # Gemini's answers say nothing of the budgets left

    def error_type(self, status: int) -> str:
        return _STATUS.get(status, "UNKNOWN")

    def error(self, kind: str, message: str, code: str | None, param: str | None) -> dict:
        return {"error": {"message": message, "status": kind}}

    def error_response(
        self,
        status: int,
        kind: str | None,
        message: str,
        code: str | None,
        param: str | None,
        headers: dict[str, str] | None,
    ) -> tuple[bytes, dict[str, str] | None]:
        """Google's error document: a bad key as ``INVALID_ARGUMENT`` with ``ErrorInfo``, a
        429's wait as ``RetryInfo`` instead of the Retry-After headers."""
        error: dict[str, Any] = {"code": status, "message": message}
        details: list[dict[str, Any]] = []
        if kind == "API_KEY_INVALID":
            error["message"] = "API key not valid. Please pass a valid API key."
            reason = {"reason": "API_KEY_INVALID", "domain": "googleapis.com"}
            details.append({"@type": "type.googleapis.com/google.rpc.ErrorInfo", **reason})
            kind = None
        error["status"] = kind or self.error_type(status)
        headers = dict(headers or {})
        wait = headers.pop("retry-after-ms", None)
        headers.pop("retry-after", None)
        if status == 429 and wait is not None:
            delay = f"{int(wait) / 1000:g}s"
            retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
            details.append(retry)
        if details:
            error["details"] = details
        return orjson.dumps({"error": error}), headers

    def error_event(self, r: dict[str, Any]) -> bytes:
        error = {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
        return _event({"error": error})


def _event(data: object) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\r\n\r\n"


class GeminiWire(GeminiFamily):
    """``generateContent``, or ``streamGenerateContent`` (``stream``)."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream

    def streamed(self, path: str, body: dict[str, Any]) -> bool:
        return self.stream

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        body = strict(body, GENERATE)
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise _invalid("* GenerateContentRequest.contents: contents is not specified")
        check_parts(contents)
        system = body.get("systemInstruction")
        if system is not None:
            check_parts([system], "system_instruction")
        config = body.get("generationConfig") or {}
        if (config.get("thinkingConfig") or {}).get("includeThoughts"):
            modes += ",reasoning"
        if "signatures" in modes:
            _check_signatures(contents)
        r = chat_reply(sim, _chat_body(body), modes, anthropic=False)
        r["id"] = sim.next_id("sim-gemini-")
        r["model"] = sim.config.model or "gemini-sim"
        r["safety"] = next((m for m in ("safety-prompt", "safety-answer") if m in modes), None)
        if r["safety"] == "safety-prompt":
            r["length"] = 0
        return r

    def _usage(self, r: dict[str, Any], final: bool) -> dict[str, Any]:
        usage: dict[str, Any] = {"promptTokenCount": r["input"]}
        if r["cached"]:
            usage["cachedContentTokenCount"] = r["cached"]
        if not final:
            usage["totalTokenCount"] = r["input"]
            return usage
        thoughts = r["reasoning_tokens"]
        answer = r["output"] - thoughts
        usage["candidatesTokenCount"] = answer
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        usage["totalTokenCount"] = r["input"] + answer + thoughts
        return usage

    def _top(self, r: dict[str, Any], final: bool) -> dict[str, Any]:
        return {
            "usageMetadata": self._usage(r, final),
            "modelVersion": r["model"],
            "responseId": r["id"],
        }

    def _candidate(self, r: dict[str, Any], choice: dict[str, Any], parts: list) -> dict:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
        if r["safety"] == "safety-answer":
            return {"finishReason": "SAFETY", "index": choice["index"], "safetyRatings": _SAFETY}
        candidate["finishReason"] = _FINISH.get(choice["finish"], "STOP")
        candidate["index"] = choice["index"]
        return candidate

    def _parts(self, r: dict[str, Any], choice: dict[str, Any], thought: bool) -> list[dict]:
        parts: list[dict[str, Any]] = []
        if thought and r["reasoning"]:
            parts.append({"text": r["reasoning"], "thought": True})
        tool = choice["tool"]
        if tool is not None:
            call = {"name": tool["name"], "args": tool["input"]}
            parts.append({"functionCall": call, "thoughtSignature": signature(tool["name"])})
        else:
            parts.append({"text": "".join(choice["pieces"])})
        return parts

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        if r["safety"] == "safety-prompt":
            return _prompt_blocked(r, self._usage(r, False))
        candidates = [
            self._candidate(r, c, self._parts(r, c, c["index"] == 0)) for c in r["choices"]
        ]
        return {"candidates": candidates, **self._top(r, True)}

    def first(self, r: dict[str, Any]) -> bytes:
        if r["safety"] == "safety-prompt" or not r["reasoning"]:
            return b""
        parts = [{"text": r["reasoning"], "thought": True}]
        candidate = {"content": {"parts": parts, "role": "model"}, "index": 0}
        return _event({"candidates": [candidate], **self._top(r, False)})

    def deltas(self, r: dict[str, Any], start: int, end: int) -> bytes:
        if r["tool"] is not None or r["safety"] is not None or start >= end:
            return b""  # a function call comes whole, in the last chunk
        parts = [{"text": "".join(r["pieces"][start:end])}]
        candidate = {"content": {"parts": parts, "role": "model"}, "index": 0}
        return _event({"candidates": [candidate], **self._top(r, False)})

    def tail(self, r: dict[str, Any]) -> bytes:
        if r["safety"] == "safety-prompt":
            return _event(_prompt_blocked(r, self._usage(r, False)))
        candidates = []
        for choice in r["choices"]:
            if choice["index"] == 0 and choice["tool"] is None:
                parts = [{"text": ""}]  # its text came in the deltas
            else:
                parts = self._parts(r, choice, False)
            candidates.append(self._candidate(r, choice, parts))
        return _event({"candidates": candidates, **self._top(r, True)})


def _prompt_blocked(r: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    feedback = {"blockReason": "SAFETY", "safetyRatings": _SAFETY}
    return {"promptFeedback": feedback, "usageMetadata": usage, "modelVersion": r["model"]}


def signature(name: str) -> str:
    """The thoughtSignature the sim gives a call of ``name`` (base64, as Gemini's are)."""
    return base64.b64encode(f"sim-thought:{name}".encode()).decode()


def _check_signatures(contents: list[Any]) -> None:
    """Gemini 3's rule: each function call of the current turn (the model turns after the last
    user text) carries the signature it came with."""
    start = 0
    for i, content in enumerate(contents):
        parts = content.get("parts") or []
        if content.get("role") == "user" and any("text" in p for p in parts):
            start = i + 1
    for i, content in enumerate(contents[start:], start):
        for j, part in enumerate(content.get("parts") or ()):
            call = part.get("functionCall")
            if call is not None and part.get("thoughtSignature") != signature(call.get("name")):
                raise _invalid(
                    f"Function call is missing a thought_signature in functionCall parts. "
                    f"Additional data, function call `default_api:{call.get('name')}` , "
                    f"position {j + 1}. Please refer to https://ai.google.dev/gemini-api/docs/"
                    f"thought-signatures for more details. (contents[{i}])"
                )


def _chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """The request as ``replies.chat_reply`` reads a chat completions one."""
    messages: list[dict[str, Any]] = []
    for content in body["contents"]:
        parts = content.get("parts") or []
        if any("functionResponse" in p for p in parts):
            messages.append({"role": "tool", "content": ""})
            continue
        text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
        role = "assistant" if content.get("role") == "model" else "user"
        messages.append({"role": role, "content": text})
    out: dict[str, Any] = {"messages": messages}
    tools = [
        {"type": "function", "function": _function(d)}
        for tool in body.get("tools") or ()
        for d in tool.get("functionDeclarations") or ()
    ]
    if tools:
        out["tools"] = tools
    calling = (body.get("toolConfig") or {}).get("functionCallingConfig") or {}
    mode, allowed = calling.get("mode"), calling.get("allowedFunctionNames")
    if mode == "NONE":
        out["tool_choice"] = "none"
    elif mode == "ANY" and allowed:
        out["tool_choice"] = {"type": "function", "function": {"name": allowed[0]}}
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") == "application/json":
        schema = config.get("responseJsonSchema") or _lowered(config.get("responseSchema"))
        out["response_format"] = (
            {"type": "json_schema", "json_schema": {"schema": schema}}
            if schema
            else {"type": "json_object"}
        )
    if "maxOutputTokens" in config:
        out["max_tokens"] = config["maxOutputTokens"]
    if "candidateCount" in config:
        out["n"] = config["candidateCount"]
    return out


def _function(declaration: dict[str, Any]) -> dict[str, Any]:
    schema = declaration.get("parametersJsonSchema") or _lowered(declaration.get("parameters"))
    return {"name": declaration.get("name"), "parameters": schema or {"type": "object"}}


def _lowered(schema: Any) -> Any:
    """An OpenAPI-style schema (``"type": "OBJECT"``) as JSON Schema spells its types."""
    if isinstance(schema, dict):
        return {
            k: v.lower() if k == "type" and isinstance(v, str) else _lowered(v)
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_lowered(v) for v in schema]
    return schema


class GeminiEmbedWire(GeminiFamily):
    """``embedContent`` (one content), or ``batchEmbedContents`` (``batch``): never streamed."""

    streams = False

    def __init__(self, batch: bool) -> None:
        self.batch = batch

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        body = strict(body, BATCH_EMBED if self.batch else _EMBED)
        requests = body.get("requests") if self.batch else [body]
        if not isinstance(requests, list) or not requests:
            raise _invalid("* BatchEmbedContentsRequest.requests: requests is not specified")
        texts = []
        dimensions = DEFAULT_DIMENSIONS
        for request in requests:
            parts = (request.get("content") or {}).get("parts") or []
            if not parts:
                raise _invalid("* EmbedContentRequest.content: contents is not specified")
            texts.append("".join(str(p.get("text", "")) for p in parts))
            dimensions = request.get("outputDimensionality") or dimensions
        embed_id = sim.next_id("sim-embed-")
        return {"id": embed_id, "texts": texts, "dimensions": dimensions, "length": 0}

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        vectors = [{"values": unit_vector(t, r["dimensions"]).tolist()} for t in r["texts"]]
        if self.batch:
            return {"embeddings": vectors}
        return {"embedding": vectors[0]}
