"""The retry policy: when to retry, how long to wait, when to give up (SPEC §7)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from rrcli.config.profile import RetrySettings
from rrcli.errors import ProviderError
from rrcli.routing.retry import RetryPolicy, backoff_cap


def _error(transient: bool = True, retry_after: float | None = None) -> ProviderError:
    return ProviderError(
        "boom", type="http_503", transient=transient, status_code=503, retry_after=retry_after
    )


def _policy(seed: int = 0, **kw) -> RetryPolicy:
    return RetryPolicy(RetrySettings(**kw), random.Random(seed))


settings_st = st.builds(
    RetrySettings,
    max_retries=st.integers(0, 10),
    max_retry_time=st.floats(0.0, 1e4),
    backoff_initial=st.floats(0.0, 10.0),
    backoff_max=st.floats(0.0, 100.0),
    respect_retry_after=st.booleans(),
)


@given(
    settings=settings_st,
    retry=st.integers(-5, 10**9),
    elapsed=st.floats(0.0, 2e4),
    retry_after=st.none() | st.floats(0.0, 1e4),
    transient=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_delay_invariants(settings, retry, elapsed, retry_after, transient, seed):
    """For any settings and inputs the delay is None or a wait that ends within max_retry_time;
    None exactly when the error is not transient, the retries are spent, no time is left, or a
    server delay would end past the budget; a server delay is honoured as given (even above
    backoff_max) but cut to max_server_pause; otherwise the wait is within the clamped backoff.
    Huge retry numbers never overflow."""
    policy = RetryPolicy(settings, random.Random(seed))
    delay = policy.delay(retry, _error(transient, retry_after), elapsed)
    left = settings.max_retry_time - elapsed
    server = settings.respect_retry_after and retry_after is not None
    server_wait = min(retry_after, settings.max_server_pause) if server else None
    should_stop = (
        not transient
        or not 1 <= retry <= settings.max_retries
        or left <= 0
        or (server and server_wait > left)
    )
    assert should_stop == (delay is None)
    if delay is None:
        return
    assert 0.0 <= delay
    assert elapsed + delay <= settings.max_retry_time + 1e-9
    if server:
        assert server_wait == delay
    else:
        assert delay <= backoff_cap(retry, settings.backoff_initial, settings.backoff_max)


@given(retry=st.integers(1, 10**12))
def test_backoff_cap_doubles_then_clamps_without_overflow(retry):
    """The cap is initial × 2^(retry−1) until backoff_max, and stays finite for any retry."""
    cap = backoff_cap(retry, 0.5, 30.0)
    expected = 30.0 if retry > 6 else 0.5 * 2 ** (retry - 1)  # 0.5 × 2^6 = 32 > 30
    assert expected == cap


def test_full_jitter_spreads_over_zero_to_cap():
    """Retry 3 with backoff_initial 0.5 draws uniformly from [0, 2.0]: over many draws the
    smallest is near 0 and the largest near 2."""
    policy = _policy()
    draws = [policy.delay(3, _error(), 0.0) for _ in range(2000)]
    assert (True, True) == (min(draws) < 0.05, 1.95 < max(draws) <= 2.0)


def test_same_seed_same_delays():
    """Two policies with one seed draw the same waits."""
    a, b = _policy(7), _policy(7)
    assert [a.delay(i, _error(), 0.0) for i in (1, 2, 3)] == [
        b.delay(i, _error(), 0.0) for i in (1, 2, 3)
    ]


def test_server_delay_first_even_above_backoff_max():
    """A Retry-After of 45 s is honoured although backoff_max is 30 s; ignored (jitter instead)
    when respect_retry_after is off."""
    assert 45.0 == _policy().delay(1, _error(retry_after=45.0), 0.0)
    ignored = _policy(respect_retry_after=False).delay(1, _error(retry_after=45.0), 0.0)
    assert ignored is not None and ignored <= 0.5


def test_server_delay_past_the_budget_ends_the_call_now():
    """With 10 s of max_retry_time left, a Retry-After of 11 s ends the call; 10 s is fine."""
    policy = _policy(max_retry_time=120.0)
    assert [None, 10.0] == [
        policy.delay(1, _error(retry_after=11.0), 110.0),
        policy.delay(1, _error(retry_after=10.0), 110.0),
    ]


def test_jittered_wait_never_overruns_the_budget():
    """With 0.1 s left and a 30 s backoff cap, the wait is at most 0.1 s; with none left, None."""
    policy = _policy(max_retry_time=100.0, backoff_initial=30.0)
    waits = [policy.delay(1, _error(), 99.9) for _ in range(200)]
    assert [] == [w for w in waits if w is None or w > 0.1 + 1e-9]
    assert None is policy.delay(1, _error(), 100.0)


def test_retries_counted_and_non_transient_never_retried():
    """max_retries = 3: retries 1..3 get a wait, retry 4 does not; a non-transient error never."""
    policy = _policy(max_retries=3)
    assert [True, True, True, False] == [
        policy.delay(r, _error(), 0.0) is not None for r in (1, 2, 3, 4)
    ]
    assert None is policy.delay(1, _error(transient=False), 0.0)
