"""What one batch may hold on each Batch API: the client sizes its parts by these and ``rrcli
sim`` refuses past them, so both read the same numbers.

OpenAI (and Azure OpenAI): 50,000 requests and 200 MB an input file. Anthropic's Message
Batches: 100,000 requests and 256 MB a batch. A megabyte here is 10**6 bytes, the smaller reading.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANTHROPIC_LIMITS", "OPENAI_LIMITS", "BatchLimits"]


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """The most ``requests`` and ``bytes`` (of the input file or request body) one batch takes."""

    requests: int
    bytes: int


OPENAI_LIMITS = BatchLimits(requests=50_000, bytes=200 * 10**6)
ANTHROPIC_LIMITS = BatchLimits(requests=100_000, bytes=256 * 10**6)
