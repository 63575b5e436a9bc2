"""What each deployment's attempts came to, counted as they end: the failed ones by error type,
those cancelled, the tokens their answers used, and how long each waited to be admitted.

An observer of every ``Attempt`` (engine/observers.py), read only through ``Engine.status()``
(``DeploymentStatus``); the attempts' outcomes (ok, retried, final errors) are the router's
counts, the money the cashier's. Error types are kept from a closed set (``http_<status>`` and
``providers.base.ERROR_TYPES``), any other a server named counted as ``other``, so a hostile
backend cannot grow the counts (or a metric's labels) without bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rrcli.providers.base import ERROR_TYPES

if TYPE_CHECKING:
    from rrcli.records.attempt import Attempt
    from rrcli.routing.lease import Lease

__all__ = ["WAITED_S", "Counts", "Tally", "known_error_type"]

#: an attempt admitted after at least this many seconds (routing, a slot, the rate budget) is
#: counted as one that waited; below it the admission took only the routing's own work
WAITED_S = 0.001


def known_error_type(kind: str) -> str:
    """``kind`` when it is one of the closed set of error types, else ``other``."""
    if kind in ERROR_TYPES:
        return kind
    if len(kind) == 8 and kind.startswith("http_") and kind[5:].isdigit():
        return kind
    return "other"


@dataclass(slots=True)
class Counts:
    """One deployment's counts: failed attempts by error type, attempts cancelled, the tokens
    of the answers (input, output, input read from the provider's prompt cache), the attempts
    that waited to be admitted and the seconds all attempts waited."""

    failures: dict[str, int] = field(default_factory=dict)
    cancelled: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    waits: int = 0
    waited_s: float = 0.0


class Tally:
    """Each deployment's ``Counts``, by deployment id (made at its first attempt)."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[str, Counts] = {}

    def observe(self, attempt: Attempt, lease: Lease) -> None:
        counts = self.counts.get(attempt.backend.id)
        if counts is None:
            counts = self.counts[attempt.backend.id] = Counts()
        if attempt.queue_s >= WAITED_S:
            counts.waits += 1
        counts.waited_s += attempt.queue_s
        reply, error = attempt.reply, attempt.error
        if reply is not None:
            counts.input_tokens += reply.input_tokens or 0
            counts.output_tokens += reply.output_tokens or 0
            counts.cached_input_tokens += reply.cached_input_tokens or 0
        elif attempt.decision == "cancelled":
            counts.cancelled += 1
        elif error is not None:
            kind = known_error_type(error.type)
            counts.failures[kind] = counts.failures.get(kind, 0) + 1
