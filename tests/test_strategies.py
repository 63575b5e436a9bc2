"""The six strategies as pure choices over a snapshot of the eligible backends (SPEC §6)."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from rrcli.config.profile import Backend, Profile
from rrcli.routing.strategies import (
    Candidate,
    Fastest,
    FirstAvailable,
    LeastLoaded,
    Random,
    RoundRobin,
    Weighted,
    make_strategy,
)


def _pool(n: int, **fields) -> list[Candidate]:
    return [Candidate(i, cap=4, **fields) for i in range(n)]


def test_round_robin_order_and_wrap():
    """Decision k goes to backend k mod 3: 0 1 2 0 1 2 0."""
    rr = RoundRobin(3)
    assert [0, 1, 2, 0, 1, 2, 0] == [rr.choose(_pool(3)) for _ in range(7)]


def test_round_robin_rotate_every():
    """rotate_every = 2: two decisions per backend before the rotation advances."""
    rr = RoundRobin(3, rotate_every=2)
    assert [0, 0, 1, 1, 2, 2, 0, 0] == [rr.choose(_pool(3)) for _ in range(8)]


def test_round_robin_skips_to_the_next_candidate_in_profile_order():
    """When the backend whose turn it is is not a candidate (excluded), the next one after it
    in profile order serves, wrapping around."""
    rr = RoundRobin(3)
    without_b = [Candidate(0), Candidate(2)]
    picks = [without_b[rr.choose(without_b)].position for _ in range(3)]
    assert [0, 2, 2] == picks


@given(weights=st.lists(st.integers(0, 6), min_size=1, max_size=6).filter(any))
def test_weighted_shares_are_exact_over_each_cycle(weights):
    """Over each cycle of sum(weights) decisions every backend is chosen exactly `weight` times;
    weight 0 is never admitted as a candidate."""
    backends = [Backend(f"b{i}", weight=w) for i, w in enumerate(weights)]
    strategy = Weighted()
    candidates = [
        Candidate(i, weight=b.weight) for i, b in enumerate(backends) if strategy.admits(b)
    ]
    cycle = sum(weights)
    for _ in range(2):
        counts = Counter(candidates[strategy.choose(candidates)].position for _ in range(cycle))
        assert {i: w for i, w in enumerate(weights) if w} == dict(counts)


def test_weighted_is_smooth():
    """Weights 5, 1, 1 interleave as nginx does: a a b a c a a."""
    strategy = Weighted()
    candidates = [Candidate(0, weight=5), Candidate(1, weight=1), Candidate(2, weight=1)]
    assert [0, 0, 1, 0, 2, 0, 0] == [strategy.choose(candidates) for _ in range(7)]


def test_random_is_repeatable_with_a_seed_and_roughly_uniform():
    """Two Random strategies with one seed choose alike; over 3,000 picks each of 3 backends
    gets between 900 and 1,100."""
    a, b = Random(random.Random(3)), Random(random.Random(3))
    picks_a = [a.choose(_pool(3)) for _ in range(3000)]
    assert picks_a == [b.choose(_pool(3)) for _ in range(3000)]
    assert [True] * 3 == [900 <= n <= 1100 for n in Counter(picks_a).values()]


def test_least_loaded_picks_the_lowest_occupancy():
    """Occupancy is (in flight + queued) / cap: 1/2 beats 3/4, and 0/1 beats both."""
    strategy = LeastLoaded()
    candidates = [
        Candidate(0, in_flight=3, cap=4),
        Candidate(1, in_flight=1, cap=2),
        Candidate(2, in_flight=0, cap=1),
    ]
    assert 2 == strategy.choose(candidates)
    assert 1 == strategy.choose(candidates[:2])


def test_least_loaded_ties_rotate():
    """Equal loads take turns instead of always going to the first (LiteLLM #37622)."""
    strategy = LeastLoaded()
    assert [0, 1, 2, 0, 1, 2] == [strategy.choose(_pool(3)) for _ in range(6)]


def test_fastest_tries_unsampled_first_then_shortest_expected_delay():
    """A backend with no latency sample is chosen first; then (in flight + 1) / cap × EWMA:
    (1/4) × 400 = 100 beats (3/4) × 200 = 150."""
    strategy = Fastest()
    candidates = [
        Candidate(0, in_flight=2, cap=4, ewma_latency_ms=200.0),
        Candidate(1, in_flight=0, cap=4, ewma_latency_ms=400.0),
        Candidate(2, in_flight=3, cap=4, ewma_latency_ms=None),
    ]
    assert 2 == strategy.choose(candidates)
    assert 1 == strategy.choose(candidates[:2])


def test_first_available_order_is_a_seeded_shuffle():
    """first_available tries every candidate once, in an order that the seed repeats."""
    a, b = FirstAvailable(random.Random(1)), FirstAvailable(random.Random(1))
    orders = [a.order(_pool(4)) for _ in range(5)]
    assert orders == [b.order(_pool(4)) for _ in range(5)]
    assert [[0, 1, 2, 3]] * 5 == [sorted(o) for o in orders]
    assert 1 < len({tuple(o) for o in orders})


def test_make_strategy_builds_the_named_one():
    """Each of the six profile names builds its strategy."""
    names = ["round_robin", "random", "weighted", "least_loaded", "first_available", "fastest"]
    built = [
        make_strategy(Profile(strategy=n, backends=(Backend("a"),)), random.Random(0)).name
        for n in names
    ]
    assert names == built
