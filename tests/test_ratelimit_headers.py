"""Reading the servers' rate-limit headers into a pause (OpenAI durations, Anthropic times)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from rrcli.providers.ratelimit import parse_duration, rate_limit_pause

NOW = 1_800_000_000.0


@given(h=st.integers(0, 5), m=st.integers(0, 59), s=st.integers(0, 59), ms=st.integers(0, 999))
def test_openai_durations_read_back_to_their_seconds(h, m, s, ms):
    """Any duration written the way OpenAI writes them ("1h2m3s", "6m0s", "250ms") reads back
    to its number of seconds."""
    text = (
        (f"{h}h" if h else "") + (f"{m}m" if m or h else "") + f"{s}s" + (f"{ms}ms" if ms else "")
    )
    assert round(h * 3600 + m * 60 + s + ms / 1000, 6) == round(parse_duration(text), 6)


def test_durations_that_are_not_durations_are_refused():
    """Text that is not a duration (or has junk around one) is None, not a guess."""
    assert [None, None, None, 1.5, 0.25] == [
        parse_duration(t) for t in ("", "soon", "1s later", "1.5s", "250ms")
    ]


def test_pause_only_when_a_budget_is_spent_and_the_latest_reset_wins():
    """Remaining 0 pauses until its reset; a budget with some left does not; with requests and
    tokens both spent the later reset wins; Anthropic's reset is an RFC 3339 time."""
    later = datetime.fromtimestamp(NOW + 2.5, UTC).isoformat().replace("+00:00", "Z")
    cases = [
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"},
        {"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "1s"},
        {
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "250ms",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-tokens": "1s",
        },
        {"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": later},
        {"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": "x"},
        {},
    ]
    assert [360.0, None, 1.0, 2.5, None, None] == [rate_limit_pause(h, NOW) for h in cases]


def test_a_reset_in_the_past_does_not_pause():
    """An Anthropic reset time already past (clock skew, a slow response) is no pause."""
    earlier = datetime.fromtimestamp(NOW - 3, UTC).isoformat()
    headers = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": earlier,
    }
    assert None is rate_limit_pause(headers, NOW)
