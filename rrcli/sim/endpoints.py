"""The OpenAI endpoints besides chat that ``rrcli sim`` answers: ``/v1/embeddings``,
``/v1/completions`` and ``/v1/moderations``.

Embeddings: one vector per input (a string, a list of strings, a token array or a list of them),
in input order; a deterministic unit vector from a hash of the input (SHAKE-256, so the same input
has the same vector on every server and run), ``dimensions`` long (256 by default), its values
float32 so that ``encoding_format: "base64"`` (little-endian float32) decodes to exactly the
floats of the JSON form. Completions: a ``text_completion`` with ``n`` choices a prompt, the same
words the chat endpoint would say, plain or streamed. Moderations: one result a string input,
nothing flagged, small deterministic scores. Requests without their input answer 400.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
import time
import zlib
from array import array
from typing import Any

import orjson

from rrcli.errors import InvalidSimRequest
from rrcli.sim.behaviour import VARIANTS
from rrcli.sim.openai_chat import FINGERPRINT, openai_usage
from rrcli.sim.replies import text_tokens
from rrcli.sim.wire import OpenAIFamily, sse

__all__ = ["CompletionsWire", "EmbeddingsWire", "ModerationsWire", "unit_vector"]

DEFAULT_DIMENSIONS = 256
_CATEGORIES = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/instructions",
    "self-harm/intent",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)
_IMAGE_CATEGORIES = frozenset(
    (
        "self-harm",
        "self-harm/instructions",
        "self-harm/intent",
        "sexual",
        "violence",
        "violence/graphic",
    )
)


def inputs(value: Any, name: str) -> list[tuple[str, int]]:
    """A request's inputs as (text, tokens): a string, a token array, or a non-empty list of
    either (a token array's text is its JSON). Raises InvalidSimRequest for anything else."""
    if isinstance(value, str) and value:
        return [(value, text_tokens(value))]
    if _tokens(value):
        return [(orjson.dumps(value).decode(), len(value))]
    if isinstance(value, list) and value and all(isinstance(v, str) or _tokens(v) for v in value):
        return [p for v in value for p in inputs(v, name)]
    if value is None:
        raise InvalidSimRequest(
            f"Missing required parameter: '{name}'.", name, "missing_required_parameter"
        )
    message = f"'{name}' must be a non-empty string, a token array or a list of them"
    raise InvalidSimRequest(message, name, "invalid_value")


def _tokens(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int for v in value)


def unit_vector(text: str, dimensions: int) -> array:
    """The embedding of ``text``: a float32 unit vector from its SHAKE-256 hash."""
    raw = hashlib.shake_256(text.encode()).digest(2 * dimensions)
    ints = struct.unpack(f"<{dimensions}h", raw)
    norm = math.sqrt(sum(v * v for v in ints)) or 1.0
    return array("f", [v / norm for v in ints])


class EmbeddingsWire(OpenAIFamily):
    """``/v1/embeddings``: never streamed."""

    streams = False

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        texts = inputs(body.get("input"), "input")
        dimensions = body.get("dimensions", DEFAULT_DIMENSIONS)
        if type(dimensions) is not int or not 0 < dimensions <= 65_536:
            raise InvalidSimRequest(
                "'dimensions' must be a positive integer", "dimensions", "invalid_value"
            )
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise InvalidSimRequest("'encoding_format' must be float or base64", "encoding_format")
        return {
            "id": sim.next_id("emb-sim"),
            "model": sim.config.model or body.get("model") or "sim-embedding",
            "texts": texts,
            "dimensions": dimensions,
            "base64": encoding == "base64",
            "missing": "missing-vector" in modes,
            "length": 0,
        }

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        data = []
        texts = r["texts"][:-1] if r["missing"] else r["texts"]
        for index, (text, _) in enumerate(texts):
            vector = unit_vector(text, r["dimensions"])
            if r["base64"]:
                encoded = base64.b64encode(_little_endian(vector)).decode()
                data.append({"object": "embedding", "index": index, "embedding": encoded})
            else:
                data.append({"object": "embedding", "index": index, "embedding": vector.tolist()})
        tokens = sum(t for _, t in r["texts"])
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"object": "list", "data": data, "model": r["model"], "usage": usage}


def _little_endian(vector: array) -> bytes:
    if struct.pack("=h", 1) != struct.pack("<h", 1):
        vector = array("f", vector)
        vector.byteswap()
    return vector.tobytes()


class CompletionsWire(OpenAIFamily):
    """``/v1/completions``: ``n`` choices for each prompt, index ``prompt * n + j``."""

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        prompts = inputs(body.get("prompt"), "prompt")
        n = body.get("n", 1)
        n = n if type(n) is int and 0 < n <= 128 else 1
        limit = body.get("max_tokens")
        choices = []
        for text, _ in prompts:
            crc = zlib.crc32(text.encode())
            for j in range(n):
                pieces = sim.behaviour.pieces((crc + j) % VARIANTS)
                finish = "stop"
                if type(limit) is int and 0 < limit < len(pieces):
                    pieces, finish = pieces[:limit], "length"
                choices.append({"index": len(choices), "pieces": pieces, "finish": finish})
        return {
            "id": sim.next_id("cmpl-sim"),
            "created": int(time.time()),
            "model": sim.config.model or body.get("model") or "sim-model",
            "body": body,
            "choices": choices,
            "length": max(len(c["pieces"]) for c in choices),
            "input": (total := sum(t for _, t in prompts)),
            "output": sum(len(c["pieces"]) for c in choices),
            "reasoning_tokens": 0,
            "cache": "cache" in modes,
            "cached": total // 2 if "cache" in modes else 0,
        }

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        choices = [_text(c["index"], "".join(c["pieces"]), c["finish"]) for c in r["choices"]]
        return {**self._head(r, choices), "usage": openai_usage(r)}

    def deltas(self, r: dict[str, Any], start: int, end: int) -> bytes:
        out = []
        for position in range(start, end):
            for c in r["choices"]:
                if position < len(c["pieces"]):
                    out.append(sse(self._head(r, [_text(c["index"], c["pieces"][position])])))
        return b"".join(out)

    def tail(self, r: dict[str, Any]) -> bytes:
        out = b"".join(
            sse(self._head(r, [_text(c["index"], "", c["finish"])])) for c in r["choices"]
        )
        options = r["body"].get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            out += sse({**self._head(r, []), "usage": openai_usage(r)})
        return out + b"data: [DONE]\n\n"

    def _head(self, r: dict[str, Any], choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": r["id"],
            "object": "text_completion",
            "created": r["created"],
            "model": r["model"],
            "system_fingerprint": FINGERPRINT,
            "choices": choices,
        }


def _text(index: int, text: str, finish: str | None = None) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}


class ModerationsWire(OpenAIFamily):
    """``/v1/moderations``: one result a string input (a list of parts is one input)."""

    streams = False

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        value = body.get("input")
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            texts = [orjson.dumps(value).decode()]  # a multimodal input: text and image parts
        else:
            texts = [text for text, _ in inputs(value, "input")]
        return {
            "id": sim.next_id("modr-sim"),
            "model": sim.config.model or body.get("model") or "omni-moderation-latest",
            "texts": texts,
            "length": 0,
        }

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        return {"id": r["id"], "model": r["model"], "results": [_moderation(t) for t in r["texts"]]}


def _moderation(text: str) -> dict[str, Any]:
    crc = zlib.crc32(text.encode())
    scores = {c: ((crc + 7919 * i) % 1000) / 1e6 for i, c in enumerate(_CATEGORIES)}
    applied = {c: ["text", "image"] if c in _IMAGE_CATEGORIES else ["text"] for c in _CATEGORIES}
    return {
        "flagged": False,
        "categories": dict.fromkeys(_CATEGORIES, False),
        "category_scores": scores,
        "category_applied_input_types": applied,
    }
