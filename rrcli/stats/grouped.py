"""The per-group numbers of ``rrcli stats`` for every group at once.

Why it exists: a trace may name 50,000 deployments (or models, or runs). Summarising each group
with its own numpy calls cost about 0.3 ms a group, fixed overhead that dwarfed the work (45 s
for 50,000 one-call groups). Here each number is computed for all groups in a few whole-array
operations: calls are sorted once by (group, value), and a group is a slice of the sorted
arrays. Sorting is most of the cost. For a percentile, with up to FEW_GROUPS groups (the usual
three deployments, and the total, one group) calls are put in group order by a radix sort of
their small codes and each group's slice is only partitioned at the ranks it needs, several
times faster than one sort on two keys; more groups take the whole-array sort. Peak in flight
and busy time take one sort of integer events that hold the group and the time at once, for
any number of groups. Every function takes ``codes`` (the group of each call, 0 to ``n`` − 1)
and returns one entry per group. All times are milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from math import isnan
from typing import Any

import numpy as np

from rrcli.stats.columns import CACHED, Columns

__all__ = ["FEW_GROUPS", "group_percentiles", "group_rows", "group_sums", "group_sweep"]

FEW_GROUPS = 256  # up to this many groups with calls, each group is sorted on its own


def group_sums(codes: np.ndarray, n: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Per group, the count of its calls, or the sum of ``weights`` over them."""
    if n == 1 and weights is None:  # the total: nothing to count by group
        return np.array([len(codes)])
    return np.bincount(codes, weights, minlength=n)[:n]


def _counts(codes: np.ndarray, n: int, where: np.ndarray) -> np.ndarray:
    """Per group, the count of its calls where ``where`` is true (one group: no codes read)."""
    if n == 1:
        return np.array([np.count_nonzero(where)])
    return group_sums(codes[where], n)


def group_percentiles(
    codes: np.ndarray, values: np.ndarray, n: int, which: tuple[int, ...]
) -> np.ndarray:
    """Per group (rows) the ``which`` percentiles (columns) of its ``values``, NaN for a group
    with none: numpy's default linear method (type 7), computed as ``numpy.percentile`` does
    (the same virtual index, and the same interpolation from the nearer side), so each value is
    bit for bit the one ``numpy.percentile`` gives the group alone."""
    out = np.full((n, len(which)), np.nan)
    if not len(values):
        return out
    counts = group_sums(codes, n).astype(np.int64)
    offsets = np.cumsum(counts) - counts
    some = counts > 0
    size, start = counts[some], offsets[some]
    picks = []  # per percentile: each group's lower and upper rank, and the weight between
    for q in np.true_divide(which, 100):
        virtual = (size - 1) * q
        below = np.floor(virtual)
        last = virtual >= size - 1  # numpy takes the last value here
        lower = np.where(last, size - 1, below).astype(np.int64)
        upper = np.where(last, size - 1, below + 1).astype(np.int64)
        picks.append((lower, upper, virtual - np.where(last, -1, below)))
    ranks = np.stack([rank for lower, upper, _ in picks for rank in (lower, upper)], axis=1)
    ordered = _ranked_in_groups(codes, values, counts, offsets, ranks)
    for column, (lower, upper, gamma) in enumerate(picks):
        a, b = ordered[start + lower], ordered[start + upper]
        diff = b - a
        out[some, column] = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
    return out


def group_sweep(
    codes: np.ndarray, t0: np.ndarray, t1: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the peak of calls in flight and the busy time (the length of the union of its
    calls' intervals), the intervals half-open [t0, t1) with t0 <= t1: one sort of events, for
    any number of groups and any times.

    Each end and start is one integer event ``(group × width + tick) × 2``, plus 1 for a start
    (``_ticks``: the times as integers in their order). Sorted, the events run group by group,
    each group's in time order, and at one time ends come before starts: a call that ends then
    is gone when one that starts then comes in. After each event the calls in flight are the
    running sum of +1 a start, −1 an end (each group's sum ends at 0, so earlier groups add
    nothing); a group's peak is its largest. A group is idle from an event after which that sum
    is not above 0 to its next event; its busy time is the span from its first event to its last
    less those gaps, summed in time order.
    """
    peak, busy = np.zeros(n, np.int64), np.zeros(n)
    calls = len(t0)
    if not calls:
        return peak, busy
    events, width, time_of = _ticks(t0, t1, n)
    if n > 1:
        group = codes.astype(np.int64) * width
        events[:calls] += group
        events[calls:] += group
        del group
    events <<= 1
    events[calls:] += 1
    events.sort(kind="stable")  # timsort: a trace is written about in time order
    step = (events & 1).astype(np.int8)
    step *= 2
    step -= 1  # +1 a start, -1 an end
    in_flight = np.cumsum(step, dtype=np.int32)
    del step
    counts = 2 * group_sums(codes, n).astype(np.int64)
    some = counts > 0
    last = np.cumsum(counts)[some] - 1
    first = last - counts[some] + 1
    peak[some] = np.maximum.reduceat(in_flight, first)
    idle = in_flight <= 0
    idle[last] = False  # a group's last event: no gap follows it in the group
    after = np.flatnonzero(idle)
    del idle, in_flight
    events >>= 1  # group × width + tick
    owner, tick = np.divmod(events[after], width)
    gaps = time_of(events[after + 1] % width) - time_of(tick)
    busy[some] = time_of(events[last] % width) - time_of(events[first] % width)
    busy -= group_sums(owner, n, gaps)
    return peak, busy


def _ticks(
    t0: np.ndarray, t1: np.ndarray, n: int
) -> tuple[np.ndarray, int, Callable[[np.ndarray], np.ndarray]]:
    """The calls' ends then their starts as integer ticks in the order of their times (equal
    times, equal ticks), every tick below ``width``, and the time of a tick. Whole milliseconds
    (a trace's canonical form) are their own ticks, counted from the earliest; other times, or
    too wide a span for ``n`` groups of ticks in 62 bits, are ranked among all the times."""
    if _whole(t0) and _whole(t1):
        lo = float(t0.min())
        width = int(float(t1.max()) - lo) + 1
        if n * width < 2**61:
            calls = len(t0)
            ticks = np.empty(2 * calls, np.int64)
            np.subtract(t1, lo, out=ticks[:calls], casting="unsafe")
            np.subtract(t0, lo, out=ticks[calls:], casting="unsafe")
            return ticks, width, lambda tick: tick + lo
    times, ranks = np.unique(np.concatenate((t1, t0)), return_inverse=True)
    return ranks.astype(np.int64, copy=False), len(times), times.__getitem__


def _in_group_order(codes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Indices that put calls in group order, each group's calls in their own order (a stable
    radix sort of the codes as 16-bit integers when they fit)."""
    if len(counts) == 1:
        return np.arange(len(codes))
    small = codes.astype(np.int16) if len(counts) <= np.iinfo(np.int16).max else codes
    return np.argsort(small, kind="stable")


def _slices(counts: np.ndarray, offsets: np.ndarray) -> list[tuple[int, int, int]]:
    """(group, first row, end row) of each group with calls, in group order."""
    some = np.flatnonzero(counts)
    return list(
        zip(some.tolist(), offsets[some].tolist(), (offsets + counts)[some].tolist(), strict=True)
    )


def _ranked_in_groups(
    codes: np.ndarray,
    values: np.ndarray,
    counts: np.ndarray,
    offsets: np.ndarray,
    ranks: np.ndarray,
) -> np.ndarray:
    """``values`` in group order, where each group's value at each of its ``ranks`` (a row per
    group with calls) is the one ``values[np.lexsort((values, codes))]`` has there: with few
    groups each group's slice is partitioned at its ranks (what ``numpy.percentile`` does, a
    fraction of a sort), else all are sorted by group, then value."""
    if np.count_nonzero(counts) > FEW_GROUPS:
        return values[np.lexsort((values, codes))]
    ordered = values[_in_group_order(codes, counts)]
    for row, (_, a, b) in enumerate(_slices(counts, offsets)):
        ordered[a:b].partition(np.unique(ranks[row]))
    return ordered


def _whole(times: np.ndarray) -> bool:
    """Whether every time is a whole millisecond well inside int64 (a trace's canonical form)."""
    return bool(np.array_equal(np.floor(times), times) and (np.abs(times) < 2.0**52).all())


def group_rows(
    c: Columns,
    codes: np.ndarray,
    n: int,
    price_in: np.ndarray,
    price_out: np.ndarray,
    total: int,
    *,
    empty: bool = False,
    price_cached: np.ndarray | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """(code, its summary fields) of each of the ``n`` groups that has calls (with ``empty``,
    of every group), each number computed for all groups at once. ``price_in``/``price_out``:
    USD per million tokens of each call, NaN when unpriced; ``price_cached`` the same for its
    cached input (None: as input); ``total``: the calls a share is of. Answers from the response
    cache count in ``cached`` and nowhere else."""
    price_cached = price_in if price_cached is None else price_cached
    from_cache = c.outcome == CACHED
    cached = _counts(codes, n, from_cache)
    if cached.any():
        kept = ~from_cache
        c, codes, price_in, price_out = c.take(kept), codes[kept], price_in[kept], price_out[kept]
        price_cached = price_cached[kept]
    ok = c.outcome == 0
    timed = ok & ~np.isnan(c.latency)
    with_ttft = ok & ~np.isnan(c.ttft)
    streamed = with_ttft & c.stream & ~np.isnan(c.latency) & (c.tokens_out > 1)
    tpot = (c.latency[streamed] - c.ttft[streamed]) / (c.tokens_out[streamed] - 1)
    calls = group_sums(codes, n)
    tokens = (np.nan_to_num(c.tokens_in), np.nan_to_num(c.tokens_out))
    peak, busy = group_sweep(codes, c.t0, c.t1, n)
    columns = {
        "calls": calls,
        "ok": _counts(codes, n, ok),
        "retried": _counts(codes, n, c.outcome == 1),
        "errors": _counts(codes, n, c.outcome == 2),
        "cached": cached,
        "latency": group_percentiles(codes[timed], c.latency[timed], n, (50, 95, 99)),
        "ttft": group_percentiles(codes[with_ttft], c.ttft[with_ttft], n, (50, 95)),
        "tpot": group_percentiles(codes[streamed], tpot, n, (50,)),
        "tokens_in": group_sums(codes, n, tokens[0]),
        "tokens_out": group_sums(codes, n, tokens[1]),
        "guessed": _counts(codes, n, c.usage_estimated),
        **_money(c, codes, n, (price_in, price_out, price_cached), tokens),
        "peak": peak,
        "busy": busy,
    }
    values = {name: column.tolist() for name, column in columns.items()}  # 10x faster to read
    return [
        (g, _row(total, **{name: column[g] for name, column in values.items()}))
        for g in (range(n) if empty else np.flatnonzero(calls + cached).tolist())
    ]


def _money(
    c: Columns, codes: np.ndarray, n: int, prices: tuple[np.ndarray, ...], tokens: tuple
) -> dict[str, np.ndarray]:
    """Per group: the cost (``spent``; NaN: no priced call), the ``priced`` calls, those whose
    cost is an ``estimated`` one, the cached input tokens (``held``), and what they ``saved`` at
    the cached-input price (NaN: no call with a price). A call costs what its record says it
    was charged, else its tokens at its price; ``prices``: USD per million input, output and
    cached input tokens of each call; ``tokens``: its input and output tokens, 0 for none. Sums
    run over every call, those without a price adding an exact 0.0: the same sums as over the
    priced calls alone."""
    price_in, price_out, price_cached = prices
    tokens_in, tokens_out = tokens
    known = ~np.isnan(price_in)
    held = np.minimum(np.nan_to_num(c.tokens_cached), tokens_in)
    saved = np.where(known, held * (price_in - price_cached), 0.0)
    charged = ~np.isnan(c.cost)
    costs = np.where(known, tokens_in * price_in + tokens_out * price_out - saved, 0.0)
    costs = np.where(charged, c.cost * 1e6, costs)  # in USD per million, as the prices are
    priced_calls = _counts(codes, n, known | charged)
    known_calls = _counts(codes, n, known)
    return {
        "spent": np.where(priced_calls > 0, group_sums(codes, n, costs), np.nan),
        "priced": priced_calls,
        "estimated": _counts(codes, n, charged & c.cost_estimated),
        "held": group_sums(codes, n, held),
        "saved": np.where(known_calls > 0, group_sums(codes, n, saved), np.nan),
    }


def _row(
    total,
    *,
    calls,
    ok,
    retried,
    errors,
    cached,
    latency,
    ttft,
    tpot,
    tokens_in,
    tokens_out,
    guessed,
    spent,
    priced,
    estimated,
    held,
    saved,
    peak,
    busy,
) -> dict[str, Any]:
    """One group's summary fields from its numbers (NaN: no sample, no price); ``total``: the
    calls a share is of."""
    return {
        "calls": int(calls),
        "ok": int(ok),
        "retried": int(retried),
        "errors": int(errors),
        "cached": int(cached),
        "share": round(int(calls) / total, 4) if total else None,
        "latency_ms": _percentiles(latency, (50, 95, 99)),
        "ttft_ms": _percentiles(ttft, (50, 95)),
        "tpot_ms": _percentiles(tpot, (50,)),
        "input_tokens": int(tokens_in),
        "output_tokens": int(tokens_out),
        "usage_estimated_calls": int(guessed),
        "cost_usd": None if isnan(spent) else round(spent / 1e6, 6),
        "priced_calls": int(priced),
        "cost_estimated_calls": int(estimated),
        "cached_input_tokens": int(held),
        "cache_hit_rate": round(held / tokens_in, 4) if tokens_in else None,
        "cache_saved_usd": None if isnan(saved) else round(saved / 1e6, 6),
        "output_tokens_per_s": _rate(tokens_out, busy),
        "peak_in_flight": int(peak),
    }


def _percentiles(values, which: tuple[int, ...]) -> dict[str, float | None]:
    return {f"p{q}": None if isnan(v) else round(v, 3) for q, v in zip(which, values, strict=True)}


def _rate(count: float, busy_ms: float) -> float | None:
    """``count`` per second of busy time, to 3 decimals; None when never busy."""
    return round(count / busy_ms * 1000.0, 3) if busy_ms else None
