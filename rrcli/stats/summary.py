"""Summaries of trace files (SPEC §5, §10): the numbers behind ``rrcli stats``, as plain data.

Why it exists: a run leaves one call record per HTTP attempt; users want to know which deployment
was slow, which one threw 429s, how evenly the strategy spread the load and what it cost, out of
millions of records, in seconds. No rich and no click here: ``summarize`` returns the JSON shape of
SPEC §10 and the CLI renders it. Reading lines into columns is ``_tracecols``'s job; this module is
the arithmetic on the columns.

Definitions (where SPEC §10 is silent):
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
- cost (USD): tokens × the price the run record gives the deployment, per million tokens; None
  when no call of the group has a price;
- ``--since`` keeps the runs that started at or after a time (a run's start is its run record's
  ``ts``, else its first call); ``--run`` keeps runs by id or unique id prefix.
All times in milliseconds unless a name says otherwise. Numbers are rounded for reading:
milliseconds, rates and means to 3 decimals, shares to 4, costs to 6 (a millionth of a dollar).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import re
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from rrcli.errors import UsageError
from rrcli.records.traceschema import JOB_COUNTS, OUTCOMES, parse_rfc3339, rfc3339
from rrcli.stats.columns import KEY_FIELDS, Columns, TraceReader

__all__ = ["BY_FIELDS", "parse_since", "summarize"]

BY_FIELDS = tuple(KEY_FIELDS)  # what --by groups on
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_PARALLEL_BYTES = 64 << 20
_CACHED = OUTCOMES.index("cached")  # the outcome code of a call answered by the response cache
_FIRST_LINE_BYTES = 1 << 20  # what is read of a file to tell a results file from a trace
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}

Source = str | os.PathLike[str] | IO[bytes]


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
    """Summarise trace files or binary streams into the ``--json`` shape of SPEC §10.

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
    reader = _read(sources, by, workers or _cpus())
    cols = reader.columns()
    runs, starts = _select_runs(reader, cols, [run] if isinstance(run, str) else run, since_ms)
    codes = np.array([reader.run_ids[r] for r in runs if r in reader.run_ids], np.int32)
    if len(codes) < len(reader.run_ids):
        cols = cols.take(np.isin(cols.run, codes))
    price_in, price_out = _prices(reader, cols)
    summary = {
        "by": by,
        "groups": _groups(reader, cols, price_in, price_out, runs),
        "total": _stats("total", cols, price_in, price_out, _sent(cols)),
        "jobs": _jobs(reader, runs),
        "runs": [_run_row(reader, cols, r, starts[r]) for r in runs],
        "malformed_lines": reader.malformed,
    }
    if timeline_bins:
        summary["timeline"] = _timeline(reader, cols, runs, timeline_bins)
    return summary


def _read(sources: list[Source], by: str, workers: int) -> TraceReader:
    """Read every source; files of _PARALLEL_BYTES or more are cut at line boundaries into
    parts read by ``workers`` forked processes, whose readers are merged."""
    reader, parts = TraceReader(by), []
    for source in sources:
        if not isinstance(source, str | os.PathLike):
            reader.read(getattr(source, "buffer", source))
            continue
        size = os.path.getsize(source)
        cuts = _cuts(source, size, workers if size >= _PARALLEL_BYTES else 1)
        if len(cuts) > 2:
            parts += [(source, a, b, by) for a, b in itertools.pairwise(cuts)]
        else:
            with open(source, "rb") as stream:
                reader.read(stream)
    if parts:
        fork = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(min(workers, len(parts)), mp_context=fork) as pool:
            for part in pool.map(_read_part, parts):
                reader.merge(part)
    return reader


def _cuts(path: Source, size: int, parts: int) -> list[int]:
    """Byte offsets that cut a file into about ``parts`` pieces of whole lines."""
    cuts = [0]
    with open(path, "rb") as stream:
        for i in range(1, parts):
            stream.seek(size * i // parts)
            stream.readline()
            if cuts[-1] < stream.tell() < size:
                cuts.append(stream.tell())
    return [*cuts, size]


def _read_part(part: tuple[Source, int, int, str]) -> TraceReader:
    path, start, end, by = part
    reader = TraceReader(by)
    with open(path, "rb") as stream:
        stream.seek(start)
        reader.read(stream, end - start)
    return reader


def _cpus() -> int:
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


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
    first = np.full(len(reader.run_ids), np.inf)
    np.minimum.at(first, cols.run, cols.t0)
    starts = {r: reader.run_info(r).start_ms for r in reader.runs}
    for run_id, code in reader.run_ids.items():
        if starts.get(run_id) is None:
            starts[run_id] = float(first[code])
    ids = sorted((r for r in starts if starts[r] < np.inf), key=lambda r: (starts[r], r))
    if wanted is not None:
        keep = {_match_run(prefix, ids) for prefix in wanted}
        ids = [r for r in ids if r in keep]
    if since_ms is not None:
        ids = [r for r in ids if starts[r] >= since_ms]
    return ids, starts


def _match_run(prefix: str, ids: list[str]) -> str:
    if prefix in ids:
        return prefix
    found = [r for r in ids if r.startswith(prefix)]
    if len(found) == 1:
        return found[0]
    known = ", ".join(ids[:10]) + (" …" if len(ids) > 10 else "") or "none"
    what = "matches several runs" if found else "matches no run in the traces"
    raise UsageError(f"--run {prefix!r}: {what} (runs: {known})")


def _prices(reader: TraceReader, cols: Columns) -> tuple[np.ndarray, np.ndarray]:
    """USD per million input/output tokens for each call, NaN where the run gives no price."""
    table = np.full((2, len(reader.run_ids) or 1, len(reader.deployments) or 1), np.nan)
    for run_id, code in reader.run_ids.items():
        for backend_id, backend in reader.run_info(run_id).backends.items():
            if backend.price is not None and backend_id in reader.deployments:
                at = (code, reader.deployments[backend_id])
                table[0][at], table[1][at] = backend.price.input, backend.price.output
    return table[0][cols.run, cols.deployment], table[1][cols.run, cols.deployment]


def _groups(reader, cols, price_in, price_out, runs) -> list[dict[str, Any]]:
    values = {code: value for value, code in reader.keys.items()}
    order = np.argsort(cols.key, kind="stable")
    keys = cols.key[order]
    bounds = np.flatnonzero(np.diff(keys)) + 1
    groups = []
    for rows in np.split(order, bounds) if len(order) else []:
        take = cols.take(rows)
        key = values[int(take.key[0])]
        groups.append(_stats(key, take, price_in[rows], price_out[rows], _sent(cols)))
    if reader.by == "run":
        rank = {r: i for i, r in enumerate(runs)}
        return sorted(groups, key=lambda g: rank[g["key"]])
    return sorted(groups, key=lambda g: (g["key"] is None, g["key"]))


def _stats(key, c: Columns, price_in, price_out, total: int) -> dict[str, Any]:
    """The SPEC §10 fields of one group of calls; answers from the response cache are counted
    apart (``cached``) and nowhere else: they made no HTTP call, took no time and cost nothing."""
    from_cache = c.outcome == _CACHED
    cached = int(from_cache.sum())
    if cached:
        sent = np.flatnonzero(~from_cache)
        c, price_in, price_out = c.take(sent), price_in[sent], price_out[sent]
    ok = c.outcome == 0
    with_ttft = ok & ~np.isnan(c.ttft)
    streamed = with_ttft & c.stream & ~np.isnan(c.latency) & (c.tokens_out > 1)
    tpot = (c.latency[streamed] - c.ttft[streamed]) / (c.tokens_out[streamed] - 1)
    tokens_in, tokens_out = np.nan_to_num(c.tokens_in), np.nan_to_num(c.tokens_out)
    priced = ~np.isnan(price_in)
    cost = None
    if priced.any():
        spent = tokens_in[priced] @ price_in[priced] + tokens_out[priced] @ price_out[priced]
        cost = round(float(spent) / 1e6, 6)
    peak, busy_ms = _sweep(c.t0, c.t1)
    return {
        "key": key,
        "calls": len(c.t0),
        "ok": int(ok.sum()),
        "retried": int((c.outcome == 1).sum()),
        "errors": int((c.outcome == 2).sum()),
        "cached": cached,
        "share": round(len(c.t0) / total, 4) if total else None,
        "latency_ms": _percentiles(c.latency[ok & ~np.isnan(c.latency)], (50, 95, 99)),
        "ttft_ms": _percentiles(c.ttft[with_ttft], (50, 95)),
        "tpot_ms": _percentiles(tpot, (50,)),
        "input_tokens": int(tokens_in.sum()),
        "output_tokens": int(tokens_out.sum()),
        "cost_usd": cost,
        "output_tokens_per_s": _rate(float(tokens_out.sum()), busy_ms),
        "peak_in_flight": peak,
    }


def _sent(cols: Columns) -> int:
    """The calls actually sent (not answered from the cache): what ``share`` divides by."""
    return int((cols.outcome != _CACHED).sum())


def _percentiles(samples: np.ndarray, which: tuple[int, ...]) -> dict[str, float | None]:
    if not len(samples):
        return {f"p{q}": None for q in which}
    values = np.percentile(samples, which)
    return {f"p{q}": round(float(v), 3) for q, v in zip(which, values, strict=True)}


def _rate(count: float, busy_ms: float) -> float | None:
    """``count`` per second of busy time, to 3 decimals; None when never busy."""
    return round(count / busy_ms * 1000.0, 3) if busy_ms else None


def _sweep(t0: np.ndarray, t1: np.ndarray) -> tuple[int, float]:
    """Peak in flight and busy time (ms) of the intervals [t0, t1).

    With starts S and ends E each sorted: just after S[i], i + 1 calls have started and those
    with an end <= S[i] are gone, so in flight = i + 1 - #(E <= S[i]). The group is idle after
    E[j] exactly when #(S <= E[j]) == j + 1, until S[j + 1]; busy = span − those gaps.
    """
    if not len(t0):
        return 0, 0.0
    starts, ends = np.sort(t0), np.sort(t1)
    n = len(starts)
    peak = int((np.arange(1, n + 1) - np.searchsorted(ends, starts, "right")).max())
    idle = np.searchsorted(starts, ends[:-1], "right") == np.arange(1, n)
    gaps = starts[1:][idle] - ends[:-1][idle]
    return peak, float(ends[-1] - starts[0] - gaps.sum())


def _jobs(reader: TraceReader, runs: list[str]) -> dict[str, int]:
    """Job outcomes summed over the selected runs' run_end records."""
    total = dict.fromkeys(JOB_COUNTS, 0)
    for run_id in runs:
        for name, count in (reader.run_info(run_id).jobs or {}).items():
            total[name] = total.get(name, 0) + count
    return total


def _run_row(reader: TraceReader, cols: Columns, run_id: str, start: float) -> dict[str, Any]:
    info = reader.run_info(run_id)
    code = reader.run_ids.get(run_id)
    sent = 0 if code is None else int(((cols.run == code) & (cols.outcome != _CACHED)).sum())
    return {
        "run_id": run_id,
        "start": rfc3339(start / 1000.0),
        "profile": info.profile,
        "strategy": info.strategy,
        "calls": sent,
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
    series = []
    for name, code in sorted(reader.deployments.items()):
        mine = cols.deployment == code
        if not mine.any():
            continue
        t0, t1 = cols.t0[mine], cols.t1[mine]
        backends = [reader.run_info(r).backends.get(name) for r in runs]
        caps = [b.max_concurrency for b in backends if b and b.max_concurrency is not None]
        series.append(
            {
                "deployment": name,
                "cap": max(caps) if caps else None,
                "peak_in_flight": _sweep(t0, t1)[0],
                "mean_in_flight": [round(float(v), 3) for v in _mean_in_flight(t0, t1, edges)],
            }
        )
    return {
        "start": rfc3339(lo / 1000.0),
        "end": rfc3339(hi / 1000.0),
        "bin_ms": round((hi - lo) / bins, 3),
        "series": series,
    }


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
