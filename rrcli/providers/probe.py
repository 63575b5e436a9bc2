"""The smallest call that shows a backend can serve: what ``rrcli validate --probe`` sends to
each backend, and what the engine sends to a backend down to see whether it is back.

A chat of one short message and a few output tokens where the backend serves chat, else a tiny
input to the first endpoint it serves. It goes through the backend's own adapter, key and
address, so it meets what a call would: a key refused, an account out of quota, a model or a
path not found, a server not listening. (``GET /v1/models`` would cost nothing, but would
answer 200 for a model the server does not serve, and not every API has it.)
"""

from __future__ import annotations

from rrcli.config.profile import Backend
from rrcli.providers.base import Call

__all__ = ["PROBE_INPUTS", "PROBE_MESSAGES", "PROBE_TIMEOUT", "probe_call"]

PROBE_MESSAGES = [{"role": "user", "content": "Reply with the word ok."}]
#: what a probe sends to a backend that serves no chat: its first endpoint, a tiny input
PROBE_INPUTS = {
    "embeddings": ("ok", {}),
    "responses": ("Reply with the word ok.", {"max_output_tokens": 16}),
    "completions": ("ok", {"max_tokens": 5}),
    "moderations": ("ok", {}),
}
PROBE_TIMEOUT = 20.0  # seconds a probe waits at most, whatever the backend's timeout


def probe_call(backend: Backend) -> Call:
    """A tiny request to an endpoint ``backend`` serves: chat when it does, else its first."""
    if "chat" in backend.endpoints:
        return Call(PROBE_MESSAGES, {**backend.params, "max_tokens": 5})
    endpoint = backend.endpoints[0]
    value, params = PROBE_INPUTS[endpoint]
    return Call([], {**backend.params, **params}, endpoint=endpoint, input=value)
