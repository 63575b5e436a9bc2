"""A field's values in a block → a numpy column: the fast ways give what the plain reading of
each value gives."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rrcli.stats.values import codes, floats

NAMES = st.sampled_from(["a", "b", "cc", "", "é"])


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(NAMES, st.just(0)),
    st.lists(NAMES, max_size=20) | NAMES.flatmap(lambda v: st.lists(st.just(v), max_size=20)),
    st.booleans(),
)
def test_codes_name_each_value_by_its_entry_in_the_table(known, values, copies):
    """Every value's code is its table entry; the entries there before keep their codes; new
    values get new codes, one each. Also for a block of one value only, held as one string
    object or as equal copies."""
    table = {value: code for code, value in enumerate(known)}
    before = dict(table)
    if copies:
        values = ["".join(list(v)) for v in values]  # equal strings, not one object
    got = codes(table, values)
    assert np.int32 == got.dtype
    assert [table[v] for v in values] == got.tolist()
    assert before == {k: table[k] for k in before}
    assert sorted(table.values()) == list(range(len(table)))
    assert set(table) == set(before) | set(values)


@given(st.lists(st.none() | st.floats(allow_nan=False) | st.integers(-(2**1100), 2**1100)))
def test_floats_are_each_value_as_a_float_and_none_as_nan(values):
    """None is NaN; an int past any float is infinity of its sign; any other value is
    float(value)."""

    def one(v):
        if v is None:
            return math.nan
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf

    np.testing.assert_array_equal(np.array([one(v) for v in values], float), floats(values))
