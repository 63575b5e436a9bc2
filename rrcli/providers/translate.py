"""The table between the two chat APIs, so a mixed pool serves every job on every backend.

A job is written in one API's shape, its *dialect*: an Anthropic Message Batches line speaks
``anthropic``, every other shape ``openai``. When the routed backend's API (the registry's
``dialect``) is the other one, its adapter sends ``to_anthropic`` / ``to_openai`` of the call:

==============================  ================================================================
OpenAI chat completions         Anthropic Messages
==============================  ================================================================
system / developer messages     ``system`` (texts joined by a blank line; blocks when a part has
                                ``cache_control``)
stop (text or list)             stop_sequences (a list)
max_completion_tokens,          max_tokens (``max_completion_tokens`` first; the adapter's 1024
max_tokens                      when neither); the way back gives ``max_tokens``
temperature, top_p              temperature, top_p
tools (function: name,          tools (name, description, input_schema)
description, parameters)
tool_choice auto / required /   tool_choice auto / any / none / {type: tool, name}
none / {function: {name}}
parallel_tool_calls: false      tool_choice.disable_parallel_tool_use: true
assistant tool_calls            tool_use blocks (``arguments`` JSON text ↔ ``input`` object)
tool messages                   tool_result blocks in one user message (consecutive ones merged;
                                on the way back a result's blocks become its text)
image_url parts (https or       image blocks (url source, or base64 source with media_type)
data: URL)
response_format json_schema     a tool with that schema, forced; its input is the answer
user / safety_identifier        metadata.user_id
service_tier auto / default     service_tier auto / standard_only
cache_control on parts, tools   kept toward Anthropic; removed everywhere toward OpenAI
reasoning_content (assistant)   dropped (a thinking block needs its signature); ``thinking``
                                blocks become ``reasoning_content`` on the way back
==============================  ================================================================

A field the table does not name passes unchanged: it is a field of the backend's own API (the
backend's ``params``, or a job written for it) or, if neither API has it, the router has already
kept the job away from this backend (``unexpressible``: what a job asks that the other API cannot
say, such as ``n`` = 2, ``logprobs``, ``seed`` or ``top_k``). A default that says nothing
(``n`` = 1, ``logprobs`` false, a penalty of 0, ``thinking`` disabled) is dropped. Content with no
counterpart (audio, files, documents, a tool call whose arguments are not JSON) raises
``UntranslatableError``: the job fails with that reason and nothing is sent.

Pure: no HTTP client, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from rrcli.providers import _to_anthropic, _to_openai
from rrcli.providers._to_anthropic import answer_name, to_anthropic
from rrcli.providers._to_openai import to_openai
from rrcli.providers.registry import info

if TYPE_CHECKING:
    from rrcli.providers.base import Call, Reply

__all__ = [
    "ANTHROPIC_FIELDS",
    "DIALECTS",
    "OPENAI_FIELDS",
    "answer_from_forced_tool",
    "dialect_of",
    "to_anthropic",
    "to_openai",
    "unexpressible",
]

DIALECTS = ("openai", "anthropic")
#: The chat completions request's fields (OpenAI's API reference).
OPENAI_FIELDS = frozenset(
    ["audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
     "max_completion_tokens", "max_tokens", "messages", "metadata", "modalities", "model", "n",
     "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
     "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier", "stop",
     "store", "stream", "stream_options", "temperature", "tool_choice", "tools", "top_logprobs",
     "top_p", "user", "verbosity", "web_search_options"]
)  # fmt: skip
#: The Messages request's fields (Anthropic's API reference).
ANTHROPIC_FIELDS = frozenset(
    ["container", "context_management", "max_tokens", "mcp_servers", "messages", "metadata",
     "model", "service_tier", "stop_sequences", "stream", "system", "temperature", "thinking",
     "tool_choice", "tools", "top_k", "top_p"]
)  # fmt: skip
_FIELDS = {"openai": OPENAI_FIELDS, "anthropic": ANTHROPIC_FIELDS}
_LIMITS = {"openai": _to_openai.EXPRESSIBLE, "anthropic": _to_anthropic.EXPRESSIBLE}
#: rrcli's own: the call says whether to stream and which model (the backend's)
_OWN = frozenset({"model", "messages", "stream", "stream_options"})


def dialect_of(kind: str) -> str:
    """The dialect of a job of shape ``kind`` (``records.jobs.Job.kind``)."""
    return "anthropic" if kind == "anthropic_batch" else "openai"


def unexpressible(provider: str, params: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of ``params``, written in the other API's shape, that the API of ``provider``
    (a registry name) cannot express; () for a provider that takes every job as written (sim).
    A field of the target API is expressible as it is; a null, rrcli's own fields and a
    default that says nothing are dropped, not refused."""
    target = info(provider).dialect
    if target is None:
        return ()
    limits, fields = _LIMITS[target], _FIELDS[target]
    names = []
    for key, value in params.items():
        if value is None or key in _OWN:
            continue
        check = limits.get(key)
        if (check is None and key not in fields) or (check is not None and not check(value)):
            names.append(key)
    return tuple(names)


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
    calls = getattr(reply, "tool_calls", None)  # the chat result's tool calls, when parsed
    if calls:
        kept = [c for c in calls if (c.get("function") or {}).get("name") != name]
        reply.tool_calls = kept or None  # type: ignore[attr-defined]
    return reply
