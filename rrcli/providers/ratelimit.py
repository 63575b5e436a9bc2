"""What a server's headers say about time: how long to wait before retrying (``retry-after-ms``,
``Retry-After``), and when a spent rate-limit budget resets (OpenAI's ``x-ratelimit-*``,
Anthropic's ``anthropic-ratelimit-*``). Pure: the current time is passed in or read once.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from datetime import datetime

from rrcli.config.profile import MAX_SERVER_PAUSE

__all__ = [
    "MAX_PAUSE",
    "parse_duration",
    "rate_limit_pause",
    "retry_after_seconds",
    "server_delay",
]


def _bounded(seconds: float) -> float | None:
    """A server's delay within [0, MAX_PAUSE] (``inf`` and ``1e400`` are MAX_PAUSE); None for
    NaN, which says nothing."""
    if seconds != seconds:
        return None
    return min(MAX_PAUSE, max(0.0, seconds))


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The delay the server asked for: ``retry-after-ms``, else ``Retry-After`` (seconds or an
    HTTP date), within [0, MAX_PAUSE]; None when absent or unreadable. ``headers`` lookups must
    be case-insensitive (httpx2.Headers) or use lower-case keys."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return _bounded(float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return _bounded(float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return _bounded(when.timestamp() - (time.time() if now is None else now))


#: (remaining, reset) header pairs: OpenAI's resets are durations ("1s", "6m0s", "250ms"),
#: Anthropic's RFC 3339 times.
_OPENAI_LIMITS = tuple(
    (f"x-ratelimit-remaining-{k}", f"x-ratelimit-reset-{k}") for k in ("requests", "tokens")
)
_ANTHROPIC_LIMITS = tuple(
    (f"anthropic-ratelimit-{k}-remaining", f"anthropic-ratelimit-{k}-reset")
    for k in ("requests", "tokens", "input-tokens", "output-tokens")
)
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|h|m|s)")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
MAX_PAUSE = MAX_SERVER_PAUSE  # seconds: a reset further away is not believed, a delay is cut


def parse_duration(text: str) -> float | None:
    """Seconds in an OpenAI reset duration ("1s", "6m0s", "1h2m3.5s", "250ms"); None when the
    text is not one."""
    text = text.strip()
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def _reset_seconds(value: str, now: float) -> float | None:
    """A reset header's seconds from now: a duration, an RFC 3339 time, or plain seconds."""
    seconds = parse_duration(value)
    if seconds is not None:
        return seconds
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return when.timestamp() - now


def rate_limit_pause(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to hold a backend's new calls, from a response's rate-limit headers: the latest
    reset among the budgets (requests, tokens) whose remaining count is 0; None when every budget
    has some left, or the headers are absent or unreadable. ``now``: wall-clock seconds (for
    Anthropic's absolute reset times)."""
    now = time.time() if now is None else now
    pause: float | None = None
    for remaining, reset in (*_OPENAI_LIMITS, *_ANTHROPIC_LIMITS):
        left = headers.get(remaining)
        if left is None or left.strip() not in ("0", "0.0"):
            continue
        value = headers.get(reset)
        seconds = None if value is None else _reset_seconds(value, now)
        if seconds is not None and 0.0 < seconds <= MAX_PAUSE:
            pause = seconds if pause is None else max(pause, seconds)
    return pause


def server_delay(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The delay a failed answer asks for: its Retry-After, else the reset of a rate-limit
    budget its headers say is spent (as a success's headers pause the gate)."""
    delay = retry_after_seconds(headers, now)
    return rate_limit_pause(headers, now) if delay is None else delay
