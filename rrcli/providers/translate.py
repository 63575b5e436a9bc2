"""The table between the two chat APIs, so a mixed pool serves every job on every backend.

A job is written in one API's shape, its *dialect*: an Anthropic Message Batches line speaks
``anthropic``, every other shape ``openai``. When the routed backend's API (the registry's
``dialect``) is the other one, its adapter sends ``to_anthropic`` / ``to_openai`` of the call.
The rows (system, stop, max tokens, tools and tool_choice, tool calls and results, images, a
json_schema ``response_format`` as a forced tool, ``cache_control``, the user) are written once,
as the rules of ``_to_anthropic`` and ``_to_openai``; README.md ("Mixed pools") and
rrcli-jobs(5) show them as a table.

``unexpressible`` names what a job asks that the other API cannot say (``n`` = 2, ``logprobs``,
``seed`` toward Anthropic; ``top_k``, ``thinking`` toward OpenAI; a field neither API has): the
router never sends such a job to that backend. So a field the table does not name passes
unchanged at send time: it is a field of the backend's own API (its ``params``, or a job written
for it). A null, or a default that says nothing (``n`` = 1, ``logprobs`` false, a penalty of 0,
``thinking`` disabled), is dropped. Parts with no Anthropic block (audio, a file that is no base64
PDF) route a job away from Anthropic backends as fields do (``_anthropic_sayable.unsayable``);
content with no counterpart that no routing can avoid (a tool call whose arguments are not a
JSON object, a document toward OpenAI) raises ``UntranslatableError``: the job fails with that
reason and nothing is sent.

Pure: no HTTP client, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from rrcli.errors import UntranslatableError
from rrcli.providers import _anthropic_sayable, _to_gemini, _to_openai
from rrcli.providers._to_anthropic import answer_name, to_anthropic
from rrcli.providers._to_gemini import to_gemini
from rrcli.providers._to_openai import to_openai
from rrcli.registry import api_dialect

if TYPE_CHECKING:
    from rrcli.providers.base import Call, Reply

__all__ = [
    "ANTHROPIC_FIELDS",
    "DIALECTS",
    "OPENAI_FIELDS",
    "answer_from_forced_tool",
    "dialect_of",
    "to_anthropic",
    "to_gemini",
    "to_openai",
    "unexpressible",
]

DIALECTS = ("openai", "anthropic")
#: The chat completions request's fields (OpenAI's API reference).
OPENAI_FIELDS = frozenset(
    [
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "messages",
        "metadata",
        "modalities",
        "model",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    ]
)
#: The Messages request's fields (Anthropic's API reference).
ANTHROPIC_FIELDS = frozenset(
    [
        "container",
        "context_management",
        "max_tokens",
        "mcp_servers",
        "messages",
        "metadata",
        "model",
        "service_tier",
        "stop_sequences",
        "stream",
        "system",
        "temperature",
        "thinking",
        "tool_choice",
        "tools",
        "top_k",
        "top_p",
    ]
)
#: Gemini's own fields a backend's params may set: the request's and its generationConfig's
GEMINI_FIELDS = _to_gemini.REQUEST_FIELDS | _to_gemini.CONFIG_FIELDS
_FIELDS = {"openai": OPENAI_FIELDS, "anthropic": ANTHROPIC_FIELDS, "gemini": GEMINI_FIELDS}
_LIMITS = {
    "openai": _to_openai.EXPRESSIBLE,
    "anthropic": _anthropic_sayable.EXPRESSIBLE,
    "gemini": _to_gemini.EXPRESSIBLE,
}
#: rrcli's own: the call says whether to stream and which model (the backend's)
_OWN = frozenset({"model", "messages", "stream", "stream_options"})


def dialect_of(kind: str) -> str:
    """The dialect of a job of shape ``kind`` (``records.jobs.Job.kind``)."""
    return "anthropic" if kind == "anthropic_batch" else "openai"


def unexpressible(
    provider: str,
    params: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]] = (),
    dialect: str | None = None,
    *,
    model: str = "",
) -> tuple[str, ...]:
    """The names of ``params`` (and the places of ``messages``: ``messages[0].name``), written
    in the other API's shape, that the API of ``provider`` (a registry name) cannot express; ()
    for a provider that takes every job as written (sim). A field of the target API is
    expressible as it is; a null, rrcli's own fields and a default that says nothing are
    dropped, not refused. ``dialect``: the job's (the other API's when not given); it matters
    for a provider of a third API (gemini), which takes both. ``model``: the backend's, where
    it decides the API (a Claude model on Vertex AI speaks Anthropic's)."""
    target = api_dialect(provider, model)
    if target is None:
        return ()
    if target == "gemini":
        return _gemini_unexpressible(params, messages, dialect)
    names = list(_unexpressible_params(target, params))
    if target == "anthropic" and messages:
        names.extend(_anthropic_sayable.unsayable(messages))
    return tuple(names)


def _gemini_unexpressible(
    params: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], dialect: str | None
) -> tuple[str, ...]:
    """What Gemini cannot say of a job: an Anthropic-shaped one is sent by way of the OpenAI
    shape (``to_openai``), so what that cannot say, then what Gemini cannot say of the result."""
    if dialect == "anthropic":
        names = _unexpressible_params("openai", params)
        if names:
            return tuple(names)
        try:
            body = to_openai(list(messages), params)
        except UntranslatableError:
            return ()  # the job fails with the reason at send time, as on OpenAI backends
        messages = body.pop("messages")
        params = body
    names = _unexpressible_params("gemini", params)
    names.extend(_to_gemini.unsayable(list(messages)) if messages else ())
    return tuple(names)


def _unexpressible_params(target: str, params: Mapping[str, Any]) -> list[str]:
    limits, fields = _LIMITS[target], _FIELDS[target]
    names = []
    for key, value in params.items():
        if value is None or key in _OWN:
            continue
        check = limits.get(key)
        if (check is None and key not in fields) or (check is not None and not check(value)):
            names.append(key)
    return names


def answer_from_forced_tool(reply: Reply, call: Call) -> Reply:
    """The reply to an OpenAI-shaped call with a json_schema ``response_format``, as OpenAI
    gives it: the answer tool's input as the output JSON text, finish reason ``stop``, that
    tool's call not among the tool calls. Any other reply is returned as it is."""
    name = answer_name(call.params) if call.dialect != "anthropic" else None
    content = (reply.body or {}).get("content") if name else None
    answers = [
        b
        for b in (content if isinstance(content, list) else ())
        if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") == name
    ]
    if not answers:
        return reply
    reply.output = orjson.dumps(answers[0].get("input") or {}).decode()
    reply.finish_reason = "stop"
    if reply.tool_calls:
        kept = [c for c in reply.tool_calls if (c.get("function") or {}).get("name") != name]
        reply.tool_calls = kept or None
    return reply
