"""Summaries of trace files: the numbers behind ``rrcli stats``, as plain data.

Why it exists: a run leaves one call record per HTTP attempt; users want to know which deployment
was slow, which one threw 429s, how evenly the strategy spread the load and what it cost, out of
millions of records, in seconds. No rich and no click here: ``summarize`` returns the JSON shape
of ``stats --json`` and the CLI renders it. Reading lines into columns is ``_tracecols``'s job; this
module is the arithmetic on the columns.

Definitions:
- a call answered by the response cache (outcome ``cached``) counts in ``cached`` only: not in
  ``calls``, ``share``, latency, tokens, cost, throughput or peak in flight (no HTTP call was
  made);
- latency, TTFT and TPOT percentiles are over ``ok`` calls; percentiles are numpy's default
  linear method (type 7); no samples → None;
- TPOT is (latency − TTFT) / (output tokens − 1), over streamed ok calls with a TTFT and more
  than one output token;
- peak in flight: the most calls of the group whose [ts_start, ts_end) overlap at one instant;
- output tokens per second: the group's output tokens over the time it had at least one call in
  flight (the union of its call intervals), so idle gaps between runs do not count;
- cost (USD): what each call record says the call was charged (``cost_usd``, the sum the budget
  and ``--resume`` count), else its tokens × the price the run record gives the deployment, per
  million tokens, over the calls that have either (``priced_calls`` counts them: a call without
  a price is never counted as free; ``cost_estimated_calls`` those charged for a usage rrcli did
  not know); None when no call of the group has a price;
- ``usage_estimated_calls``: calls whose server reported no usage, so their tokens are rrcli's
  estimate;
- ``--since`` keeps the runs that started at or after a time (a run's start is its run record's
  ``ts``, else its first call); ``--run`` keeps runs by id, unique id prefix or ``latest`` (the
  last to start).
All times in milliseconds unless a name says otherwise. Numbers are rounded for reading:
milliseconds, rates and means to 3 decimals, shares to 4, costs to 6 (a millionth of a dollar).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rrcli.errors import UsageError
from rrcli.records.traceschema import JOB_COUNTS, parse_rfc3339, rfc3339
from rrcli.stats.columns import CACHED, KEY_FIELDS, Columns, TraceReader
from rrcli.stats.grouped import group_rows, group_sums, group_sweep
from rrcli.stats.parallel import Source, both, cpus, read_all

__all__ = ["BY_FIELDS", "parse_since", "summarize"]

BY_FIELDS = tuple(KEY_FIELDS)  # what --by groups on
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_SPLIT_CALLS = 200_000  # from this many calls on, groups and total are summed at once
_FIRST_LINE_BYTES = 1 << 20  # what is read of a file to tell a results file from a trace
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def summarize(
    sources: Iterable[Source],
    *,
    by: str = "deployment",
    run: str | Iterable[str] | None = None,
    since: str | datetime | None = None,
    now: datetime | None = None,
    timeline_bins: int | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Summarise trace files or binary streams into the ``--json`` shape of ``rrcli stats``.

    ``by``: one of BY_FIELDS. ``run``: run ids (or unique prefixes) to keep. ``since``: keep runs
    that started at or after it — a datetime, an RFC 3339 time or an age like ``2h`` before
    ``now``. ``timeline_bins``: also return calls in flight per deployment over time (``--plot``).
    ``workers``: processes reading parts of large files at once (default: the usable CPUs).
    Raises UsageError for a missing file, a bad option or a run id that matches nothing.
    """
    if by not in BY_FIELDS:
        raise UsageError(f"--by {by!r}: expected one of {', '.join(BY_FIELDS)}")
    since_ms = parse_since(since, now or datetime.now(UTC))
    sources = list(sources)
    for source in sources:
        if isinstance(source, str | os.PathLike):
            _check_path(Path(source))
    workers = workers or cpus()
    reader = read_all(sources, by, workers)
    cols = reader.columns()
    runs, starts = _select_runs(reader, cols, [run] if isinstance(run, str) else run, since_ms)
    codes = np.array([reader.run_ids[r] for r in runs if r in reader.run_ids], np.int32)
    if len(codes) < len(reader.run_ids):
        cols = cols.take(np.isin(cols.run, codes))
    sent = cols.outcome != CACHED
    per_run = group_sums(cols.run[sent], len(reader.run_ids)).astype(int).tolist()
    groups, total = _sums(reader, cols, runs, int(sent.sum()), workers)
    summary = {
        "by": by,
        "groups": groups,
        "total": total,
        "jobs": _jobs(reader, runs),
        "runs": [_run_row(reader, per_run, r, starts[r]) for r in runs],
        "malformed_lines": reader.malformed,
    }
    if timeline_bins:
        summary["timeline"] = _timeline(reader, cols, runs, timeline_bins)
    return summary


def parse_since(value: str | datetime | None, now: datetime) -> float | None:
    """``--since`` → epoch ms: an RFC 3339 time or date (UTC when naive), or an age (``30m``,
    ``2h``, ``1d``, ``45s``) before ``now``."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp() * 1000.0
    age = _AGE.fullmatch(value.strip())
    if age:
        delta = timedelta(**{_UNITS[age[2]]: float(age[1])})
        return (now - delta).timestamp() * 1000.0
    seconds = parse_rfc3339(value.strip().replace(" ", "T", 1))
    if seconds is None:
        raise UsageError(
            f"--since {value!r}: expected a time such as 2026-11-29T21:00:00Z or 2026-11-29, "
            "or an age such as 30m, 2h or 1d"
        )
    return seconds * 1000.0


def _check_path(path: Path) -> None:
    if not path.exists():
        raise UsageError(
            f"{path}: no such trace file — check the path (`rrcli run` writes traces to "
            "<JOBS stem>.traces.jsonl, or where --traces points)"
        )
    if path.is_dir():
        raise UsageError(f"{path}: is a directory — give the trace files (JSONL) inside it")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{path}: not readable — check its permissions")
    if _holds_results(path):
        raise UsageError(
            f"{path}: a results file (one line per job), not a trace — give the trace file "
            "(`rrcli run` writes it to <JOBS stem>.traces.jsonl, or where --traces points)"
        )


def _holds_results(path: Path) -> bool:
    """Whether the file's first line is a job's result rather than a trace record: no
    ``event`` (every trace record has one), and a result's ``status`` or ``custom_id``."""
    with open(path, "rb") as f:
        first = f.readline(_FIRST_LINE_BYTES)
    try:
        record = orjson.loads(first)
    except orjson.JSONDecodeError:
        return False
    if type(record) is not dict or "event" in record:
        return False
    return "status" in record or "custom_id" in record


def _select_runs(reader, cols, wanted, since_ms) -> tuple[list[str], dict[str, float]]:
    """The run ids to keep, in start order, and the start (epoch ms) of every run."""
    starts = {r: reader.run_info(r).start_ms for r in reader.runs}
    unstarted = [(r, code) for r, code in reader.run_ids.items() if starts.get(r) is None]
    if unstarted:  # a run without its run record starts at its first call
        first = np.full(len(reader.run_ids), np.inf)
        np.minimum.at(first, cols.run, cols.t0)
        for run_id, code in unstarted:
            starts[run_id] = float(first[code])
    ids = sorted((r for r in starts if starts[r] < np.inf), key=lambda r: (starts[r], r))
    if wanted is not None:
        keep = {_match_run(prefix, ids) for prefix in wanted}
        ids = [r for r in ids if r in keep]
    if since_ms is not None:
        ids = [r for r in ids if starts[r] >= since_ms]
    return ids, starts


def _match_run(prefix: str, ids: list[str]) -> str:
    """The run id that ``prefix`` names: itself, the one id it begins, or ``latest``: the run
    that started last."""
    if prefix in ids:
        return prefix
    if prefix == "latest" and ids:
        return ids[-1]
    found = [r for r in ids if r.startswith(prefix)]
    if len(found) == 1:
        return found[0]
    known = ", ".join(ids[:10]) + (" …" if len(ids) > 10 else "") or "none"
    what = "matches several runs" if found else "matches no run in the traces"
    raise UsageError(f"--run {prefix!r}: {what} (runs: {known})")


def _prices(reader: TraceReader, cols: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """USD per million input, output and cached input tokens for each call, NaN where the run
    gives no price (cached input at the input price when the price names none). Looked up by
    (run, deployment) pair: a table of every pair would grow as runs × deployments."""
    width = len(reader.deployments) or 1
    pairs, prices = [], []
    for run_id, code in reader.run_ids.items():
        for backend_id, backend in reader.run_info(run_id).backends.items():
            if backend.price is not None and backend_id in reader.deployments:
                pairs.append(code * width + reader.deployments[backend_id])
                price = backend.price
                cached = price.input if price.cached_input is None else price.cached_input
                prices.append((price.input, price.output, cached))
    if not pairs:
        return tuple(np.full(len(cols.t0), np.nan) for _ in range(3))
    order = np.argsort(pairs)
    known = np.array(pairs)[order]
    table = np.vstack((np.array(prices).reshape(-1, 3)[order], [np.nan] * 3))  # last: no price
    wanted = cols.run.astype(np.int64) * width + cols.deployment
    at = np.minimum(np.searchsorted(known, wanted), len(known) - 1)
    at[known[at] != wanted] = len(known)
    return tuple(np.take(np.ascontiguousarray(table[:, k]), at) for k in range(3))


def _sums(reader, cols, runs, sent: int, workers: int) -> tuple[list, dict[str, Any]]:
    """The groups' rows and the total's; with ``workers`` and _SPLIT_CALLS calls or more, the
    groups are summed in a forked process while this one sums the total (each about half, each
    looking up the calls' prices itself, so that no step waits for the other)."""

    def groups() -> list[dict[str, Any]]:
        return _groups(reader, cols, _prices(reader, cols), runs, sent)

    def total() -> dict[str, Any]:
        return _total(cols, _prices(reader, cols), sent)

    if workers > 1 and len(cols.t0) >= _SPLIT_CALLS:
        return both(groups, total)
    return groups(), total()


def _groups(reader, cols, prices, runs, sent: int) -> list[dict[str, Any]]:
    """One row per group; ``sent``: the calls sent in all (what a share is of)."""
    values = {code: value for value, code in reader.keys.items()}
    price_in, price_out, price_cached = prices
    rows = group_rows(
        cols, cols.key, len(reader.keys), price_in, price_out, sent, price_cached=price_cached
    )
    groups = [{"key": values[code], **row} for code, row in rows]
    if reader.by == "run":
        rank = {r: i for i, r in enumerate(runs)}
        return sorted(groups, key=lambda g: rank[g["key"]])
    return sorted(groups, key=lambda g: (g["key"] is None, g["key"]))


def _total(cols: Columns, prices, sent: int) -> dict[str, Any]:
    """The summary fields of all calls together: one group."""
    everyone = np.zeros(len(cols.t0), np.int32)
    price_in, price_out, price_cached = prices
    [(_, row)] = group_rows(
        cols, everyone, 1, price_in, price_out, sent, empty=True, price_cached=price_cached
    )
    return {"key": "total", **row}


def _jobs(reader: TraceReader, runs: list[str]) -> dict[str, int]:
    """Job outcomes summed over the selected runs' run_end records."""
    total = dict.fromkeys(JOB_COUNTS, 0)
    for run_id in runs:
        for name, count in (reader.run_info(run_id).jobs or {}).items():
            total[name] = total.get(name, 0) + count
    return total


def _run_row(reader: TraceReader, calls: list[int], run_id: str, start: float) -> dict[str, Any]:
    info = reader.run_info(run_id)
    code = reader.run_ids.get(run_id)
    return {
        "run_id": run_id,
        "start": rfc3339(start / 1000.0),
        "profile": info.profile,
        "strategy": info.strategy,
        "calls": calls[code] if code is not None else 0,
        "ended": info.jobs is not None,
        "interrupted": info.interrupted,
    }


def _timeline(reader, cols, runs, bins: int) -> dict[str, Any]:
    """Mean calls in flight per deployment in each of ``bins`` equal slices of the time span."""
    if not len(cols.t0):
        return {"start": None, "end": None, "bin_ms": None, "series": []}
    lo, hi = float(cols.t0.min()), float(cols.t1.max())
    hi = max(hi, lo + 1.0)
    edges = np.linspace(lo, hi, bins + 1)
    n = len(reader.deployments)
    peaks = group_sweep(cols.deployment, cols.t0, cols.t1, n)[0]
    order = np.argsort(cols.deployment, kind="stable")
    rows = dict(
        zip(
            np.unique(cols.deployment[order]).tolist(),
            _slices(cols.deployment[order], order),
            strict=True,
        )
    )
    series = []
    for name, code in sorted(reader.deployments.items()):
        mine = rows.get(code)
        if mine is None:
            continue
        t0, t1 = cols.t0[mine], cols.t1[mine]
        backends = [reader.run_info(r).backends.get(name) for r in runs]
        caps = [b.max_concurrency for b in backends if b and b.max_concurrency is not None]
        series.append(
            {
                "deployment": name,
                "cap": max(caps) if caps else None,
                "peak_in_flight": int(peaks[code]),
                "mean_in_flight": [round(float(v), 3) for v in _mean_in_flight(t0, t1, edges)],
            }
        )
    return {
        "start": rfc3339(lo / 1000.0),
        "end": rfc3339(hi / 1000.0),
        "bin_ms": round((hi - lo) / bins, 3),
        "series": series,
    }


def _slices(keys: np.ndarray, order: np.ndarray) -> list[np.ndarray]:
    """The rows of each run of equal ``keys`` (sorted), as slices of ``order``."""
    return np.split(order, np.flatnonzero(np.diff(keys)) + 1) if len(order) else []


def _mean_in_flight(t0: np.ndarray, t1: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time-weighted mean of calls in flight between consecutive edges: the integral of the
    in-flight count F(x), piecewise linear between events, differenced at the edges."""
    times = np.concatenate((t0, t1))
    delta = np.concatenate((np.ones(len(t0)), -np.ones(len(t1))))
    order = np.lexsort((delta, times))
    times, counts = times[order], np.cumsum(delta[order])
    area = np.concatenate(([0.0], np.cumsum(counts[:-1] * np.diff(times))))
    at = np.searchsorted(times, edges, "right") - 1
    safe = np.maximum(at, 0)
    integral = np.where(at < 0, 0.0, area[safe] + counts[safe] * (edges - times[safe]))
    return np.diff(integral) / np.diff(edges)
