"""How long to wait before retrying a failed attempt, or whether to give up.

The policy is one pure function of the retry number, the error and the time spent so far, shaped
after stamina's ``_compute_backoff``: an explicit "retry on what" (the error's own ``transient``,
decided where the error was made), a retry count and a total time budget, and a clamped
exponential backoff with full jitter that cannot overflow however large the retry number.

A server-given delay (``retry-after-ms`` / ``Retry-After``) wins when ``respect_retry_after``,
even above ``backoff_max``: the server knows when it will take calls again; but never beyond
``max_server_pause`` (a server cannot hold a call forever). A server delay that would end past
``max_retry_time`` ends the call now. The jittered backoff is drawn from
[0, min(cap, time left)], so it never overruns the budget and the call ends only when no time is
left. All times are seconds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from rrcli.config.profile import RetrySettings
from rrcli.errors import ProviderError

__all__ = ["RetryPolicy", "backoff_cap"]

# 2.0 ** 64 is far past any backoff_max / backoff_initial ratio and far from float overflow.
_MAX_EXPONENT = 64


def backoff_cap(retry: int, initial: float, maximum: float) -> float:
    """The upper bound of the jittered wait before retry number ``retry`` (1-based):
    min(maximum, initial × 2^(retry−1)), clamped so huge retry numbers cannot overflow."""
    exponent = min(max(retry - 1, 0), _MAX_EXPONENT)
    return max(0.0, min(maximum, initial * 2.0**exponent))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``delay(retry, error, elapsed)``: seconds to wait before retry number ``retry``, or None."""

    settings: RetrySettings
    rng: random.Random

    def is_transient(self, error: ProviderError) -> bool:
        """Whether another attempt on the same backend may succeed (the error decides)."""
        return error.transient

    def delay(self, retry: int, error: ProviderError, elapsed: float) -> float | None:
        """The wait before retry number ``retry`` (1-based) after ``error``, ``elapsed`` seconds
        after the first attempt started; None when the call must end now: the error is not
        transient, ``max_retries`` are spent, or no time is left in ``max_retry_time``."""
        s = self.settings
        if not self.is_transient(error) or retry < 1 or retry > s.max_retries:
            return None
        left = s.max_retry_time - max(0.0, elapsed)
        if left <= 0:
            return None
        if s.respect_retry_after and error.retry_after is not None:
            wait = min(max(0.0, error.retry_after), s.max_server_pause)
            return wait if wait <= left else None
        cap = backoff_cap(retry, s.backoff_initial, s.backoff_max)
        return self.rng.uniform(0.0, min(cap, left))
