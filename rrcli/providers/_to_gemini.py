"""OpenAI-shaped requests as Gemini ``generateContent`` requests: the Gemini column of
``translate``'s table.

``EXPRESSIBLE`` says, for each chat completions field Gemini lacks or restricts, whether a value
can be said there; ``unsayable`` where the messages say what it cannot; ``to_gemini`` writes the
request. The rows: system and developer messages → ``systemInstruction``; user text, images and
audio (base64 data: URLs) and PDFs → ``text`` / ``inlineData`` parts; an assistant turn → a
``model`` turn of text and ``functionCall`` parts, each carrying the ``thoughtSignature`` its
tool call kept (``extra_content.google.thought_signature``, as Google's OpenAI-compatible
endpoint names it); tool messages → ``functionResponse`` parts, named by the call they answer;
tools → ``functionDeclarations`` (their JSON Schema as ``parametersJsonSchema``); tool_choice →
``toolConfig``; max_tokens / max_completion_tokens → ``maxOutputTokens``, temperature, top_p,
stop, n, seed and the penalties → ``generationConfig``; a json_object / json_schema
``response_format`` → ``responseMimeType`` with ``responseJsonSchema``; reasoning_effort →
``thinkingConfig.thinkingBudget``. Fields Gemini has no use for (user, metadata, store,
service_tier, prompt_cache_key, parallel_tool_calls) are dropped. A field of Gemini's own API
(a backend's ``params``: ``safetySettings``, ``topK``, ``thinkingConfig``...) passes into the
request or its ``generationConfig``.

Pure: no HTTP client, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from rrcli.errors import UntranslatableError
from rrcli.providers._to_openai import apply_rules, call_arguments, text_of
from rrcli.tokens import whole_tokens

__all__ = [
    "CONFIG_FIELDS",
    "EXPRESSIBLE",
    "REQUEST_FIELDS",
    "signature_of",
    "to_gemini",
    "unsayable",
    "with_signature",
]

_Rule = Callable[[dict[str, Any], str, Any], None]
_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)

#: ``GenerateContentRequest``'s fields besides ``contents`` (Gemini API reference)
REQUEST_FIELDS = frozenset(
    [
        "tools",
        "toolConfig",
        "safetySettings",
        "systemInstruction",
        "generationConfig",
        "cachedContent",
    ]
)
#: ``GenerationConfig``'s fields (Gemini API reference)
CONFIG_FIELDS = frozenset(
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
        "thinkingConfig",
        "mediaResolution",
    ]
)
#: the most candidates and stop sequences Gemini takes
MAX_CANDIDATES = 8
MAX_STOP = 5
#: reasoning_effort → thinking budget (tokens), as Google's OpenAI-compatible endpoint maps it
_BUDGETS = {"none": 0, "minimal": 1024, "low": 1024, "medium": 8192, "high": 24576}


def _always(value: object) -> bool:
    return True


def _function_tools(tools: object) -> bool:
    return isinstance(tools, list) and all(
        isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict)
        for t in tools
    )


def _response_format(value: object) -> bool:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "json_schema":
        return isinstance(value.get("json_schema"), dict)  # type: ignore[union-attr]
    return kind in ("text", "json_object")


def _stop(value: object) -> bool:
    stops = [value] if isinstance(value, str) else value
    return isinstance(stops, list) and len(stops) <= MAX_STOP


#: chat completions field → whether Gemini can express its value
EXPRESSIBLE: dict[str, Callable[[Any], bool]] = {
    "n": lambda v: type(v) is int and 1 <= v <= MAX_CANDIDATES,
    "logprobs": lambda v: v is False,
    "top_logprobs": lambda v: v == 0,
    "logit_bias": lambda v: v == {},
    "modalities": lambda v: v == ["text"],
    "store": lambda v: v is False,
    "reasoning_effort": lambda v: v in _BUDGETS,
    "verbosity": lambda v: v == "medium",
    "response_format": _response_format,
    "tools": _function_tools,
    "stop": _stop,
    "service_tier": lambda v: v in ("auto", "default"),
    **dict.fromkeys(
        [
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "top_p",
            "seed",
            "presence_penalty",
            "frequency_penalty",
            "tool_choice",
            "parallel_tool_calls",
            "user",
            "safety_identifier",
            "metadata",
            "prompt_cache_key",
        ],
        _always,
    ),
}


_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def unsayable(messages: list[dict[str, Any]]) -> tuple[str, ...]:
    """Where OpenAI-shaped ``messages`` say what a Gemini request cannot: no user turn (Gemini
    answers a conversation the user began), a role it has no turn for (``function``), a
    participant's ``name``, a user message with no
    text or media (Gemini refuses an empty part), a ``function_call``, an image or file that is
    no base64 data: URL (a URL or a file id names something Gemini cannot fetch), a tool call
    that is no function call."""
    found = []
    if not any(m.get("role") == "user" for m in messages):
        found.append("messages")
    for i, message in enumerate(messages):
        if message.get("role") not in _ROLES:
            found.append(f"messages[{i}].role")
        if message.get("name") is not None:
            found.append(f"messages[{i}].name")
        if message.get("role") == "user" and _empty(message.get("content")):
            found.append(f"messages[{i}].content")
        if message.get("function_call") is not None:
            found.append(f"messages[{i}].function_call")
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if _part(part) is None:
                found.append(f"messages[{i}].content[{j}]")
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            found.append(f"messages[{i}].tool_calls")
        for j, call in enumerate(calls if isinstance(calls, list) else ()):
            if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
                found.append(f"messages[{i}].tool_calls[{j}]")
    return tuple(found)


def _empty(content: Any) -> bool:
    """Content with no text and no part besides empty text."""
    if isinstance(content, str):
        return not content
    if isinstance(content, list):
        return all(
            isinstance(p, dict) and p.get("type") == "text" and not p.get("text") for p in content
        )
    return True


def to_gemini(messages: list[dict[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI-shaped request as a ``generateContent`` body (no model: it is in the URL)."""
    body = apply_rules(_RULES, params)
    config = body.pop("generationConfig", None)
    config = dict(config) if isinstance(config, dict) else {}
    for key in [k for k in body if k in CONFIG_FIELDS]:
        config[key] = body.pop(key)
    config.update(body.pop("_config", {}))
    system, contents = _contents(messages)
    body["contents"] = contents
    if system:
        body["systemInstruction"] = {"parts": system}
    if config:
        body["generationConfig"] = config
    return body


def _config(body: dict[str, Any], name: str, value: Any) -> None:
    body.setdefault("_config", {})[name] = value


def _renamed(name: str) -> _Rule:
    def rule(body: dict[str, Any], key: str, value: Any) -> None:
        _config(body, name, value)

    return rule


def _max_tokens(body: dict[str, Any], key: str, value: Any) -> None:
    """The larger of the two spellings, as a budget reserves them (``tokens.output_cap``)."""
    held = body.get("_config", {}).get("maxOutputTokens")
    if held is None or (whole_tokens(value) or 0) > (whole_tokens(held) or 0):
        _config(body, "maxOutputTokens", value)


def _stop_rule(body: dict[str, Any], key: str, value: Any) -> None:
    _config(body, "stopSequences", [value] if isinstance(value, str) else value)


def _n(body: dict[str, Any], key: str, value: Any) -> None:
    if value != 1:
        _config(body, "candidateCount", value)


def _format(body: dict[str, Any], key: str, value: Any) -> None:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "json_object":
        _config(body, "responseMimeType", "application/json")
    elif kind == "json_schema":
        _config(body, "responseMimeType", "application/json")
        schema = value["json_schema"].get("schema")
        if isinstance(schema, dict):
            _config(body, "responseJsonSchema", schema)


def _effort(body: dict[str, Any], key: str, value: Any) -> None:
    _config(body, "thinkingConfig", {"thinkingBudget": _BUDGETS.get(value, value)})


def _tools(body: dict[str, Any], key: str, tools: Any) -> None:
    declarations = []
    for tool in tools if isinstance(tools, list) else ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            continue  # the router keeps such a job away
        out: dict[str, Any] = {"name": function.get("name")}
        if function.get("description"):
            out["description"] = function["description"]
        if function.get("parameters"):
            out["parametersJsonSchema"] = function["parameters"]
        declarations.append(out)
    if declarations:
        body["tools"] = [{"functionDeclarations": declarations}]


_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}


def _tool_choice(body: dict[str, Any], key: str, choice: Any) -> None:
    if isinstance(choice, str) and choice in _MODES:
        config: dict[str, Any] = {"mode": _MODES[choice]}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        config = {"mode": "ANY", "allowedFunctionNames": [choice["function"].get("name")]}
    else:
        return
    body["toolConfig"] = {"functionCallingConfig": config}


def _drop(body: dict[str, Any], key: str, value: Any) -> None:
    """A field Gemini has no use for (an identifier, a hint, rrcli's own), or a default that
    says nothing: not sent."""


_RULES: dict[str, _Rule] = {
    "max_tokens": _max_tokens,
    "max_completion_tokens": _max_tokens,
    "temperature": _renamed("temperature"),
    "top_p": _renamed("topP"),
    "seed": _renamed("seed"),
    "presence_penalty": _renamed("presencePenalty"),
    "frequency_penalty": _renamed("frequencyPenalty"),
    "stop": _stop_rule,
    "n": _n,
    "response_format": _format,
    "reasoning_effort": _effort,
    "tools": _tools,
    "tool_choice": _tool_choice,
    **dict.fromkeys(
        (
            "parallel_tool_calls",
            "user",
            "safety_identifier",
            "metadata",
            "prompt_cache_key",
            "store",
            "service_tier",
            "logprobs",
            "top_logprobs",
            "logit_bias",
            "modalities",
            "verbosity",
            "stream",
            "stream_options",
            "model",
        ),
        _drop,
    ),
}


# --- messages -----------------------------------------------------------------------------


def _contents(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the system instruction's parts, the contents): system and developer messages gathered;
    consecutive tool messages as one user turn of functionResponse parts."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    names: dict[Any, Any] = {}  # tool call id → function name, from the assistant turns so far
    results: list[dict[str, Any]] | None = None
    for i, message in enumerate(messages):
        role, content, where = message.get("role"), message.get("content"), f"messages[{i}]"
        if role in ("system", "developer"):
            text = text_of(content, where)
            if text:
                system.append({"text": text})
        elif role == "tool":
            if results is None:
                results = []
                contents.append({"role": "user", "parts": results})
            results.append(_function_response(message, names, where))
        elif role == "assistant":
            results = None
            parts = _model_parts(message, names, where)
            if parts:
                contents.append({"role": "model", "parts": parts})
        elif role == "user":
            results = None
            parts = _parts(content, where)
            if not parts:
                raise UntranslatableError(
                    f"{where}: a user message with no text has no form in Gemini's API"
                )
            contents.append({"role": "user", "parts": parts})
        else:
            raise UntranslatableError(f"{where}: a {role} message has no form in Gemini's API")
    return system, contents


def _parts(content: Any, where: str) -> list[dict[str, Any]]:
    """Content as parts, empty text left out (Gemini refuses a part without data)."""
    if content is None or content == "":
        return []
    if not isinstance(content, list):
        return [{"text": str(content)}]
    out = []
    for j, part in enumerate(content):
        said = _part(part)
        if said is None:
            raise UntranslatableError(
                f"{where}.content[{j}]: Gemini takes text, and images, audio and files as base64 "
                "data: URLs only"
            )
        if said.get("text") != "":
            out.append(said)
    return out


def _part(part: Any) -> dict[str, Any] | None:
    """A content part as a Gemini part; None when it has no form there."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return {"text": str(part.get("text", ""))}
    if kind == "refusal":
        return {"text": str(part.get("refusal", ""))}
    if kind == "image_url":
        image = part.get("image_url")
        return _inline(image.get("url") if isinstance(image, dict) else image)
    if kind == "file":
        file = part.get("file")
        return _inline(file.get("file_data") if isinstance(file, dict) else None)
    if kind == "input_audio":
        audio = part.get("input_audio")
        if isinstance(audio, dict) and isinstance(audio.get("data"), str):
            mime = f"audio/{audio.get('format') or 'wav'}"
            return {"inlineData": {"mimeType": mime, "data": audio["data"]}}
    return None


def _inline(url: Any) -> dict[str, Any] | None:
    match = _DATA_URL.fullmatch(url) if isinstance(url, str) else None
    if match is None:
        return None
    return {"inlineData": {"mimeType": match[1], "data": match[2]}}


def signature_of(call: Mapping[str, Any]) -> str | None:
    """The thoughtSignature a tool call carries (``extra_content.google.thought_signature``)."""
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    value = google.get("thought_signature") if isinstance(google, dict) else None
    return value if isinstance(value, str) else None


def with_signature(call: dict[str, Any], signature: str | None) -> dict[str, Any]:
    """A tool call carrying ``signature``, so the next turn sends it back."""
    if signature:
        call["extra_content"] = {"google": {"thought_signature": signature}}
    return call


def _model_parts(message: dict[str, Any], names: dict[Any, Any], where: str) -> list[dict]:
    content, calls = message.get("content"), message.get("tool_calls")
    if message.get("function_call") is not None:
        raise UntranslatableError(f"{where}.function_call: use tool_calls for Gemini backends")
    if calls is not None and not isinstance(calls, list):
        raise UntranslatableError(f"{where}.tool_calls is not a list of tool calls")
    parts = []
    if isinstance(content, list):
        parts.extend(_parts(content, where))
    elif content:
        parts.append({"text": str(content)})
    elif isinstance(message.get("refusal"), str) and message["refusal"]:
        parts.append({"text": message["refusal"]})
    for j, call in enumerate(calls or ()):
        place = f"{where}.tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise UntranslatableError(f"{place} is not a function call")
        names[call.get("id")] = function.get("name")
        part: dict[str, Any] = {
            "functionCall": {
                "name": function.get("name"),
                "args": call_arguments(
                    function.get("arguments"),
                    place,
                    "Gemini needs the call's arguments as an object",
                ),
            }
        }
        signature = signature_of(call)
        if signature:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _function_response(message: dict[str, Any], names: dict[Any, Any], where: str) -> dict:
    """A tool message as a functionResponse part, named by the call it answers; its text as
    the response when it is a JSON object, else as ``{"result": text}``."""
    call_id = message.get("tool_call_id")
    if call_id not in names:
        raise UntranslatableError(
            f"{where}.tool_call_id {call_id!r} answers no tool call of an earlier assistant "
            "message — Gemini names a function's response by the function"
        )
    text = text_of(message.get("content"), where) if message.get("content") is not None else ""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = None
    response = value if isinstance(value, dict) else {"result": text}
    return {"functionResponse": {"name": names[call_id], "response": response}}
