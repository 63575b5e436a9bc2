"""The per-group numbers computed for all groups at once equal each group's own computation:
``numpy.percentile`` bit for bit, and a brute-force sweep for peak in flight and busy time."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rrcli.stats.grouped import FEW_GROUPS, group_percentiles, group_sweep

WHICH = (0, 50, 95, 99, 100)


@st.composite
def grouped_values(draw: st.DrawFn) -> tuple[int, np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 6))
    size = draw(st.integers(0, 40))
    codes = draw(st.lists(st.integers(0, n - 1), min_size=size, max_size=size))
    values = draw(
        st.lists(
            st.floats(-1e6, 1e6, allow_nan=False) | st.integers(0, 30).map(float),
            min_size=size,
            max_size=size,
        )
    )
    return n, np.array(codes, np.int32), np.array(values, float)


@settings(max_examples=200, deadline=None)
@given(grouped_values())
def test_group_percentiles_equal_numpy_percentile_of_each_group(case):
    """Each group's row is numpy.percentile of its values, exactly; a group with none is NaN."""
    n, codes, values = case
    actual = group_percentiles(codes, values, n, WHICH)
    for g in range(n):
        mine = values[codes == g]
        expected = np.percentile(mine, WHICH) if len(mine) else np.full(len(WHICH), np.nan)
        np.testing.assert_array_equal(expected, actual[g])


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(
                st.tuples(st.integers(0, n - 1), st.integers(0, 30), st.integers(0, 10)),
                max_size=30,
            ),
        )
    ),
    st.sampled_from([1.0, 0.25]),
)
def test_group_sweep_equals_a_brute_force_sweep_of_each_group(case, unit):
    """Per group: the most half-open intervals covering one instant, and the length of their
    union; in whole milliseconds (a trace's own timestamps) and in fractions of one."""
    n, calls = case
    codes = np.array([g for g, _, _ in calls], np.int32)
    t0 = np.array([s * unit for _, s, _ in calls])
    t1 = np.array([(s + d) * unit for _, s, d in calls])
    peak, busy = group_sweep(codes, t0, t1, n)
    for g in range(n):
        spans = [(s, s + d) for c, s, d in calls if c == g]
        expected_peak = max((sum(a <= t < b for a, b in spans) for t, _ in spans), default=0)
        covered = {x for a, b in spans for x in range(a, b)}  # integer times: unit cells
        assert (expected_peak, len(covered) * unit) == (int(peak[g]), float(busy[g]))


def test_more_groups_than_few_give_the_same_numbers_as_each_group_alone():
    """Past FEW_GROUPS groups (one whole-array sort instead of a sort per group) every group's
    percentiles are still numpy.percentile of its values, and its sweep a brute-force one."""
    rng = np.random.default_rng(7)
    n = FEW_GROUPS + 50
    codes = rng.integers(0, n, 20 * n).astype(np.int32)
    values = rng.integers(0, 40, len(codes)).astype(float)
    t0 = rng.integers(0, 30, len(codes)).astype(float)
    t1 = t0 + rng.integers(0, 10, len(codes))
    percentiles = group_percentiles(codes, values, n, WHICH)
    peak, busy = group_sweep(codes, t0, t1, n)
    for g in range(n):
        mine = codes == g
        spans = list(zip(t0[mine].astype(int).tolist(), t1[mine].astype(int).tolist(), strict=True))
        expected_peak = max((sum(a <= t < b for a, b in spans) for t, _ in spans), default=0)
        covered = {x for a, b in spans for x in range(a, b)}
        np.testing.assert_array_equal(np.percentile(values[mine], WHICH), percentiles[g])
        assert (expected_peak, float(len(covered))) == (int(peak[g]), float(busy[g]))


def test_whole_milliseconds_too_far_apart_for_one_key_give_the_brute_force_sweep():
    """Whole-millisecond times spanning more than the integer key holds for the groups (ranked
    among all the times instead) give each group the peak and busy time a brute-force sweep of
    its calls gives."""
    far = 2.0**51
    codes = np.array([0, 0, 1, 1, 1, 2048, 2048, 2048], np.int32)
    t0 = np.array([-far, far, 5.0, 8.0, far, 3.0, 4.0, 4.0])
    t1 = np.array([10.0 - far, far + 4, 9.0, 12.0, far + 1, 5.0, 6.0, 7.0])
    peak, busy = group_sweep(codes, t0, t1, 2049)
    expected = ([1, 2, 3], [14.0, 8.0, 4.0])
    assert expected == (peak[[0, 1, 2048]].tolist(), busy[[0, 1, 2048]].tolist())
