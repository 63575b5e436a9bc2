"""The life of a simulated batch, apart from either API's spelling (``rrcli.sim.batches``).

A batch's lines are answered when it is created (each as the sim answers the same live call);
time then decides what of it shows. With a processing time ``D`` (``batch_delay_ms``) a batch
is ``validating`` for its first tenth, ``in_progress`` while its lines are done one after the
other (evenly) until nine tenths, then ``finalizing``, and ended at ``D``. A window ``W``
(``batch_window_ms``, 24 h by default) shorter than ``D`` ends it at ``W``: the lines not done by
then are expired. A cancel ends it at once: the lines not done are cancelled. A share of the lines
(``batch_failure_rate``) fail as a live call fails (a 500), drawn when the batch is created.

All times are seconds on the server's batch clock (the wall clock plus what ``POST
/sim/batches/advance`` added, so a test sees a batch move without waiting).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["COMPLETED", "SimBatch", "SimLine", "progress"]

COMPLETED, EXPIRED, CANCELLED, FAILED = "completed", "expired", "cancelled", "failed"
#: the phases of a batch still running, by the share of its processing time reached
_VALIDATING_UNTIL, _FINALIZING_FROM = 0.1, 0.9


@dataclass(slots=True, eq=False)
class SimLine:
    """One line and its answer: ``status`` 200 with the reply's body, or an error status with
    the API's error body; ``tokens`` the input tokens it enqueues."""

    custom_id: str
    status: int
    body: dict[str, Any]
    tokens: int


@dataclass(slots=True, eq=False)
class SimBatch:
    """One batch on the server; ``api`` is ``openai`` (Azure too) or ``anthropic``."""

    id: str
    api: str
    key: str | None
    created: float
    lines: list[SimLine]
    endpoint: str = ""
    input_file_id: str | None = None
    metadata: dict[str, Any] | None = None
    errors: list[dict[str, Any]] | None = None  # refused as a whole (OpenAI: status failed)
    cancelled: float | None = None  # when a cancel was asked
    ended: float | None = None  # when it ended, once it has
    outcome: str = ""  # completed, expired, cancelled or failed, once ended
    done: int = 0  # lines answered when it ended
    files: dict[str, str] = field(default_factory=dict)  # output / error file ids (OpenAI)

    @property
    def tokens(self) -> int:
        return sum(line.tokens for line in self.lines)


def _done(count: int, elapsed: float, delay: float) -> int:
    """Lines answered ``elapsed`` seconds into a processing time of ``delay``."""
    if delay <= 0:
        return count
    share = (elapsed / delay - _VALIDATING_UNTIL) / (_FINALIZING_FROM - _VALIDATING_UNTIL)
    return max(0, min(count, math.floor(count * share)))


def progress(batch: SimBatch, now: float, delay: float, window: float) -> tuple[str, int]:
    """(status, lines answered) of ``batch`` at ``now``; a batch whose end has come is ended
    here (``ended``, ``outcome``, ``done`` set) and says its outcome from then on. Status is
    OpenAI's word: validating, in_progress, finalizing, or the outcome."""
    if batch.ended is not None:
        return batch.outcome, batch.done
    count = len(batch.lines)
    if batch.errors is not None:
        batch.ended, batch.outcome, batch.done = batch.created, FAILED, 0
        return FAILED, 0
    end, outcome = batch.created + min(delay, window), COMPLETED if delay <= window else EXPIRED
    if batch.cancelled is not None and batch.cancelled < end:
        end, outcome = batch.cancelled, CANCELLED
    if now >= end:
        batch.ended, batch.outcome = end, outcome
        batch.done = count if outcome == COMPLETED else _done(count, end - batch.created, delay)
        return outcome, batch.done
    elapsed = now - batch.created
    if elapsed < _VALIDATING_UNTIL * delay:
        return "validating", 0
    status = "in_progress" if elapsed < _FINALIZING_FROM * delay else "finalizing"
    return status, _done(count, elapsed, delay)
