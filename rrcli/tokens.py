"""The one token estimate: what a request may cost before its reply says what it did cost.

rpm/tpm reservations, ``--dry-run`` and the simulated backend's usage all count this way: about
four characters a token (as rough tokenizers count) plus a few tokens of framing per message; a
non-text content (parts, images) counts as its JSON text. No tokenizer: a reservation is corrected
by the reply's usage, and a plan is an estimate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

__all__ = [
    "MAX_USAGE_TOKENS",
    "estimate_call_tokens",
    "estimate_input_tokens",
    "plausible_call_tokens",
]

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4  # role and framing around each message
MAX_USAGE_TOKENS = 1 << 32  # a usage count this large is no call's: the reply's count is unknown
REPLY_ALLOWANCE = 16_384  # tokens: an output without a cap, images priced beyond their JSON text


def estimate_input_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Input tokens of ``messages``: at least 1."""
    chars = 0
    for message in messages:
        content = message.get("content")
        if type(content) is str:
            chars += len(content)
        elif content is not None:
            chars += len(orjson.dumps(content, default=str))
    return chars // CHARS_PER_TOKEN + TOKENS_PER_MESSAGE * len(messages) or 1


def estimate_call_tokens(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> int:
    """Tokens a call may cost, input and the output cap (``max_tokens`` or
    ``max_completion_tokens``; 0 when neither is set)."""
    out = params.get("max_tokens") or params.get("max_completion_tokens") or 0
    return estimate_input_tokens(messages) + (out if isinstance(out, int) else 0)


def plausible_call_tokens(estimate: int, tpm: int | None = None) -> int:
    """The most a call estimated at ``estimate`` tokens (``estimate_call_tokens``) can have cost,
    whatever its reply claims: one token per character of its messages (the estimate counts
    four), its output cap, and REPLY_ALLOWANCE; never more than the backend's whole ``tpm``
    (a provider enforcing that limit serves no larger request), never less than the estimate."""
    most = CHARS_PER_TOKEN * estimate + REPLY_ALLOWANCE
    if tpm is not None:
        most = min(most, tpm)
    return max(estimate, most)
