"""The values of one field in a block of trace records → a numpy column, fast.

Why it exists apart from columns.py: each of these turns a list of Python values (what msgspec
decoded, one a record) into an array in as few passes over the list as there can be — a million
lines hold fifteen million such values, and a pass costs tens of nanoseconds a value.
"""

from __future__ import annotations

import math

import numpy as np

from rrcli.records.traceschema import parse_rfc3339

__all__ = ["codes", "floats", "timestamps"]


def floats(values: list[float | int | None]) -> np.ndarray:
    """``values`` as floats, NaN for None (numpy reads None as NaN into a float array),
    infinity for an integer past any float."""
    try:
        return np.fromiter(values, float, len(values))
    except OverflowError:
        return np.array(list(map(_float, values)))


def _float(value: float | None) -> float:
    """``value`` as a float (NaN for None, infinity of its sign for an integer past any float)."""
    try:
        return math.nan if value is None else float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def timestamps(values: list[str]) -> np.ndarray:
    """Epoch ms of each RFC 3339 string, NaN where it is not one. Canonical
    ``YYYY-MM-DDTHH:MM:SS.mmmZ`` strings parse vectorised (joined into one buffer of 24 bytes
    and a newline each: as many newlines as values, each 25th byte one, means every value is
    24 characters long); others one by one."""
    n = len(values)
    try:
        joined = "\n".join(values).encode("ascii") + b"\n"
    except UnicodeEncodeError:
        joined = b""
    if len(joined) == 25 * n and joined.count(b"\n") == n:
        view = np.frombuffer(joined, np.uint8).reshape(-1, 25)
        marks = (view[:, 10] == 84) & (view[:, 19] == 46) & (view[:, 23] == 90)  # T . Z
        if marks.all() and (view[:, 24] == 10).all():
            try:
                raw = np.frombuffer(joined, "S25").astype("S23")
                return raw.astype("datetime64[ms]").astype(np.int64) * 1.0
            except ValueError:
                pass
    return np.array([parse_rfc3339(v) for v in values], dtype=float) * 1000.0


def codes(table: dict, values: list) -> np.ndarray:
    """Small integer codes for ``values``, growing ``table`` (value → code) with new ones. A
    block naming one value only (one run, one model) is counted, not looked up value by value:
    the decoder hands back one string object for a name it knows, which ``count`` matches by
    identity."""
    first = values[0] if values else None
    if values and values[-1] is first and values.count(first) == len(values):
        return np.full(len(values), table.setdefault(first, len(table)), np.int32)
    try:  # a block seldom names a value the blocks before it did not
        return np.fromiter(map(table.__getitem__, values), np.int32, len(values))
    except KeyError:
        for value in set(values) - table.keys():
            table[value] = len(table)
    return np.fromiter(map(table.__getitem__, values), np.int32, len(values))
