"""Whole JSON lines out (records/_jsonl.py): the one encoder of result and trace records."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rrcli.records._jsonl import dumps_line

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)


@given(st.dictionaries(st.text(), json_values, max_size=4))
def test_any_record_is_one_line_that_reads_back_the_same(record):
    """Any JSON record (integers of any size included; JSON has no infinity) encodes as one line
    ending in a newline that decodes to the same record."""
    line = dumps_line(record)
    assert 1 == line.count(b"\n") and line.endswith(b"\n")
    assert record == json.loads(line)


def test_a_record_orjson_cannot_encode_for_another_reason_still_raises():
    """Only integers beyond 64 bits take the fallback; other unencodable records raise."""
    with pytest.raises(TypeError):
        dumps_line({1: "not a str key"})
