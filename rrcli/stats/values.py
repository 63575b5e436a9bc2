"""The values of one field in a block of trace records → a numpy column, fast.

Why it exists apart from columns.py: each of these turns a list of Python values (what msgspec
decoded, one a record) into an array in as few passes over the list as there can be — a million
lines hold fifteen million such values, and a pass costs tens of nanoseconds a value.
"""

from __future__ import annotations

import functools
import math
import struct

import numpy as np

from rrcli.records.traceschema import parse_rfc3339

__all__ = ["codes", "flags", "floats", "small_codes", "timestamps"]

_KINDS = {"d": np.float64, "?": np.bool_}


def floats(values: list[float | int | None]) -> np.ndarray:
    """``values`` as floats, NaN for None, infinity for an integer past any float. Packed as C
    doubles in one call where no value is None (a third of the cost of numpy reading each
    value); a field null in every record of a block (a trace without prices or a prompt cache)
    is counted; any other block goes through numpy, which reads None as NaN."""
    n = len(values)
    if n and values[0] is None and values.count(None) == n:
        return np.full(n, math.nan)
    try:
        return _packed("d", values)
    except (struct.error, OverflowError):  # a None, or an integer past any float
        pass
    try:
        return np.fromiter(values, float, n)
    except OverflowError:
        return np.array(list(map(_float, values)))


def flags(values: list[bool | None]) -> np.ndarray:
    """``values`` as booleans, None false (packed by truth in one call)."""
    return _packed("?", values)


def _packed(kind: str, values: list) -> np.ndarray:
    """``values`` packed as the C type ``kind`` (a struct format letter), as a writable array."""
    packer = _packer(kind, len(values))
    buffer = bytearray(packer.size)
    packer.pack_into(buffer, 0, *values)
    return np.frombuffer(buffer, _KINDS[kind])


@functools.lru_cache(maxsize=256)  # a block's length, give or take a few lines
def _packer(kind: str, n: int) -> struct.Struct:
    return struct.Struct(f"={n}{kind}")


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
        return _looked_up(table, values)
    except KeyError:
        for value in set(values) - table.keys():
            table[value] = len(table)
    return _looked_up(table, values)


def _looked_up(table: dict, values: list) -> np.ndarray:
    """Each value's code in ``table``. Up to 256 codes, each is looked up as one character and
    the characters joined into bytes (fewer steps a value than numpy packing each code)."""
    if len(table) > 256:
        return np.fromiter(map(table.__getitem__, values), np.int32, len(values))
    return small_codes({value: chr(code) for value, code in table.items()}, values).astype(np.int32)


def small_codes(chars: dict, values: list) -> np.ndarray:
    """Each value's code, ``chars`` mapping every value to the character of its code (0-255)."""
    return np.frombuffer(bytearray("".join(map(chars.__getitem__, values)), "latin-1"), np.uint8)
