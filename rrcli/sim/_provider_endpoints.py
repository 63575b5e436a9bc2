"""What the in-process ``sim`` provider answers on the endpoints besides chat.

Deterministic, as its chat answers are: an embedding is ``rrcli sim``'s unit vector of its input
(``dimensions`` long, 256 by default), a completion or a Responses answer is the words the chat
endpoint would say to the same text, a moderation flags nothing. Each Reply carries what the
HTTP adapter would read from a real answer (``providers.endpoints``), its body included.
"""

from __future__ import annotations

from itertools import count
from typing import Any

import orjson

from rrcli.providers.base import Call, Reply
from rrcli.registry import count_inputs
from rrcli.sim.behaviour import SimBehaviour
from rrcli.sim.endpoints import DEFAULT_DIMENSIONS, unit_vector
from rrcli.tokens import estimate_value_tokens

__all__ = ["endpoint_reply"]

_ids = count(1)


def _texts(value: object) -> list[str]:
    """One text per input (a token array or a list of parts: its JSON)."""
    if isinstance(value, list) and count_inputs(value) == len(value) and value:
        return [v if isinstance(v, str) else orjson.dumps(v).decode() for v in value]
    return [value if isinstance(value, str) else orjson.dumps(value).decode()]


def endpoint_reply(behaviour: SimBehaviour, call: Call, model: str) -> Reply:
    """The simulated answer to a non-chat ``call``."""
    texts = _texts(call.input)
    tokens = estimate_value_tokens(call.input)
    if call.endpoint == "embeddings":
        dimensions = call.params.get("dimensions")
        size = dimensions if isinstance(dimensions, int) and dimensions > 0 else DEFAULT_DIMENSIONS
        vectors = [unit_vector(t, size).tolist() for t in texts]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        body = {"object": "list", "data": data, "model": model, "usage": usage}
        return Reply("", None, tokens, None, model, body=body, embeddings=vectors, http_status=200)
    if call.endpoint == "moderations":
        results = [{"flagged": False, "categories": {}, "category_scores": {}} for _ in texts]
        body = {"id": f"modr-sim-{next(_ids)}", "model": model, "results": results}
        return Reply("", None, None, None, model, body=body, moderations=results, http_status=200)
    variant = behaviour.variant([{"role": "user", "content": texts[-1]}])
    text = behaviour.text(variant)
    out = len(behaviour.pieces(variant))
    if call.endpoint == "completions":
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}
        body = _completion(model, choice, tokens, out)
        return Reply(text, "stop", tokens, out, model, None, 200, body["id"], body=body)
    response_id = f"resp_sim{next(_ids)}"
    body = _response(response_id, model, text, tokens, out)
    return Reply(text, "stop", tokens, out, model, None, 200, body=body, response_id=response_id)


def _completion(model: str, choice: dict[str, Any], tokens: int, out: int) -> dict[str, Any]:
    usage = {"prompt_tokens": tokens, "completion_tokens": out, "total_tokens": tokens + out}
    return {
        "id": f"cmpl-sim{next(_ids)}",
        "object": "text_completion",
        "model": model,
        "choices": [choice],
        "usage": usage,
    }


def _response(response_id: str, model: str, text: str, tokens: int, out: int) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"type": "message", "role": "assistant", "status": "completed", "content": [part]}
    usage = {"input_tokens": tokens, "output_tokens": out, "total_tokens": tokens + out}
    return {
        "id": response_id,
        "object": "response",
        "status": "completed",
        "model": model,
        "output": [item],
        "usage": usage,
    }
