"""Trace lines → numpy columns, fast, never failing on a bad line.

Why it exists apart from stats.py: reading is the hot path (1,000,000 lines in about a second)
and has its own rules — what is malformed, how timestamps parse — while stats.py only does
arithmetic on the columns. A block of lines is decoded in one ``msgspec`` call into small typed
records holding only the fields stats needs (``decoding``: type checks included, other fields
skipped in C); a block that does not decode whole is decoded again line by line, so one bad line
costs only itself. Canonical ``2026-11-29T21:31:29.123Z`` timestamps parse vectorised; any other
RFC 3339 form goes through ``datetime.fromisoformat``. Times are float milliseconds since the
epoch.

Malformed (counted, skipped): not JSON, not an object, no ``event``, a run, call, backend or
run_end record missing a field or with a wrong type (a call needs ``run_id``, ``deployment``,
``outcome`` in ok|retry|error|cached and two timestamps with ts_end >= ts_start), a call whose
numbers cannot be true (``_sane``: a negative or infinite latency, TTFT or token count, a token
count no call reaches, ``tokens.MAX_USAGE_TOKENS`` or more, a latency that is not its
interval's), a line nested past the decoder's depth. Blank lines and records of an unknown event
(a newer rrcli) are skipped without counting.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import IO, Any

import msgspec
import numpy as np

from rrcli.records.traceschema import EVENTS, MAX_CALL_COST_USD, OUTCOMES, parse_rfc3339
from rrcli.stats.decoding import FIELDS, KEY_FIELDS, META, BlockDecoder, Run, RunEnd, decode_line
from rrcli.stats.values import codes, flags, floats, small_codes, timestamps
from rrcli.tokens import MAX_USAGE_TOKENS

_BLOCK_BYTES = 1 << 20  # about 1,600 lines, whose Python objects more often stay in the CPU caches
_LATENCY_SLACK_MS = 1000.0  # a latency further than this from ts_end − ts_start is malformed
_OUTCOMES = {name: code for code, name in enumerate(OUTCOMES)}  # ok 0, retry 1, error 2, cached 3
_OUTCOME_CHARS = {name: chr(code) for name, code in _OUTCOMES.items()}
CACHED = _OUTCOMES["cached"]  # the outcome of an answer from the response cache: no call made
_NUMBERS = ("latency_ms", "ttft_ms", "input_tokens", "output_tokens", "cached_input_tokens")


@dataclass(slots=True)
class RunInfo:
    """What the run and run_end records say about one run (either may be missing)."""

    run_id: str
    start_ms: float | None = None
    profile: str | None = None
    strategy: str | None = None
    backends: dict[str, Any] = field(default_factory=dict)  # id → its profile entry
    jobs: dict[str, int] | None = None
    interrupted: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Columns:
    """Call records as columns, one entry per call. Codes index a TraceReader's ``run_ids``,
    ``deployments`` and ``keys``; outcome is 0 ok, 1 retry, 2 error, 3 cached; NaN is a null
    number."""

    run: np.ndarray
    deployment: np.ndarray
    key: np.ndarray
    outcome: np.ndarray
    stream: np.ndarray
    t0: np.ndarray
    t1: np.ndarray
    latency: np.ndarray
    ttft: np.ndarray
    tokens_in: np.ndarray
    tokens_out: np.ndarray
    tokens_cached: np.ndarray  # input tokens a server's cache held
    cost: np.ndarray  # USD the call was charged, as its record says (NaN: not said, unbelievable)
    cost_estimated: np.ndarray  # the charge stands for a usage rrcli did not know
    usage_estimated: np.ndarray  # the server reported no usage: the counts are rrcli's estimate

    def take(self, index: np.ndarray) -> Columns:
        """The rows at ``index`` (an integer or boolean array)."""
        return Columns(**{name: getattr(self, name)[index] for name in self.__slots__})

    @staticmethod
    def joined(blocks: list[Columns]) -> Columns:
        """The rows of every block, in order."""
        if len(blocks) == 1:
            return blocks[0]
        names = Columns.__slots__
        return Columns(**{n: np.concatenate([getattr(b, n) for b in blocks]) for n in names})


class TraceReader:
    """Reads any number of trace streams; ``columns()`` gives every call read so far."""

    def __init__(self, by: str = "deployment", decoder: BlockDecoder | None = None) -> None:
        """``decoder``: one that has read other parts of the same traces, so knows their names."""
        self.by = by
        self.runs: dict[str, RunInfo] = {}
        self.run_ids: dict[str, int] = {}
        self.deployments: dict[str, int] = {}
        shared = {"run": self.run_ids, "deployment": self.deployments}
        self.keys: dict[Any, int] = shared.get(by, {})
        self.malformed = 0
        self._blocks: list[Columns] = []
        self._decoder = decoder or BlockDecoder()

    def read(self, stream: IO[bytes], size: int | None = None) -> None:
        """Read a binary stream of JSONL trace lines to its end, or ``size`` bytes of it (which
        must end at a line boundary); a torn last line is malformed."""
        with _collector_paused():
            self._read(stream, size)

    def _read(self, stream: IO[bytes], size: int | None) -> None:
        buffer = bytearray(_BLOCK_BYTES)
        view, kept = memoryview(buffer), 0
        left = float("inf") if size is None else size
        while left > 0:
            if kept == len(buffer):  # one line longer than the buffer: grow it
                view.release()
                buffer.extend(bytes(len(buffer)))
                view = memoryview(buffer)
            got = stream.readinto(view[kept : kept + int(min(len(buffer) - kept, left))])
            if not got:
                break
            left -= got
            end = kept + got
            cut = buffer.rfind(b"\n", 0, end) + 1
            if cut:
                self._feed(view[:cut])
                buffer[: end - cut] = bytes(view[cut:end])
            kept = end - cut if cut else end
        if bytes(view[:kept]).strip():
            self._feed(bytes(view[:kept]))

    def merge(self, other: TraceReader) -> None:
        """Add what another reader (of another part of the traces) has read."""
        runs = _remap(self.run_ids, other.run_ids)
        deployments = _remap(self.deployments, other.deployments)
        keys = {"run": runs, "deployment": deployments}.get(self.by)
        if keys is None:
            keys = _remap(self.keys, other.keys)
        for theirs in other._blocks:
            self._blocks.append(
                replace(
                    theirs,
                    run=runs[theirs.run],
                    deployment=deployments[theirs.deployment],
                    key=keys[theirs.key],
                )
            )
        for run_id, theirs in other.runs.items():
            mine = self.run_info(run_id)
            if mine.start_ms is None:
                mine.start_ms, mine.profile = theirs.start_ms, theirs.profile
                mine.strategy, mine.backends = theirs.strategy, theirs.backends
            if theirs.jobs is not None:
                mine.jobs, mine.interrupted = theirs.jobs, theirs.interrupted
        self.malformed += other.malformed

    def columns(self) -> Columns:
        """Every call read so far."""
        if not self._blocks:
            return _no_calls()
        self._blocks = [Columns.joined(self._blocks)]
        return self._blocks[0]

    def run_info(self, run_id: str) -> RunInfo:
        """The RunInfo of ``run_id``, made on first sight."""
        info = self.runs.get(run_id)
        if info is None:
            info = self.runs[run_id] = RunInfo(run_id)
        return info

    def _feed(self, block: bytes | memoryview) -> None:
        try:
            records = self._decoder.decode_lines(block)
        except (msgspec.MsgspecError, RecursionError):  # a line nested past the decoder's depth
            records = self._decode_each(bytes(block).split(b"\n"))
        if records:
            self._columns(records)

    def _decode_each(self, lines: list[bytes]) -> list[object]:
        records = []
        for line in lines:
            try:
                records.append(decode_line(line))
            except (msgspec.MsgspecError, RecursionError):
                self.malformed += bool(line.strip()) and not _unknown_event(line)
        return records

    def _columns(self, records: list[object]) -> None:
        """The calls of a block as columns, its other records noted. Every record's fields
        come out in one C call (``astuple``), flattened into one list whose strided slices are
        the fields: a tenth of the cost of reading each attribute of each record. A block of
        calls only (most) flattens to ``width`` values a record; any other record has fewer."""
        n, width = len(records), len(FIELDS)
        flat = list(chain.from_iterable(map(msgspec.structs.astuple, records)))
        if len(flat) != n * width:
            calls = [r for r in records if type(r) not in META]
            for record in records:
                if type(record) in META:
                    self._meta(record)
            n = len(calls)
            if not n:
                return
            flat = list(chain.from_iterable(map(msgspec.structs.astuple, calls)))

        def values(name: str) -> list[Any]:
            return flat[FIELDS[name] :: width]

        t0, t1 = timestamps(values("ts_start") + values("ts_end")).reshape(2, n)
        numbers = np.array([floats(values(name)) for name in _NUMBERS])
        run = codes(self.run_ids, values("run_id"))
        deployment = codes(self.deployments, values("deployment"))
        key = {"run": run, "deployment": deployment}.get(self.by)
        if key is None:
            key = codes(self.keys, values(KEY_FIELDS[self.by]))
        latency, ttft, tokens_in, tokens_out, tokens_cached = numbers
        block = Columns(
            run=run,
            deployment=deployment,
            key=key,
            outcome=small_codes(_OUTCOME_CHARS, values("outcome")).view(np.int8),
            stream=flags(values("stream")),
            t0=t0,
            t1=t1,
            latency=latency,
            ttft=ttft,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            tokens_cached=tokens_cached,
            cost=_charges(values("cost_usd")),
            cost_estimated=flags(values("cost_estimated")),
            usage_estimated=flags(values("usage_estimated")),
        )
        good = _sane(t0, t1, numbers)
        if not good.all():
            self.malformed += int(n - good.sum())
            block = block.take(good)
        self._blocks.append(block)

    def _meta(self, record: object) -> None:
        if type(record) not in (Run, RunEnd):
            return
        info = self.run_info(record.run_id)
        if type(record) is RunEnd:
            info.jobs, info.interrupted = record.jobs, record.interrupted
            return
        start = parse_rfc3339(record.ts)
        if start is None:
            self.malformed += 1
        elif info.start_ms is None:
            info.start_ms = start * 1000.0
            info.profile, info.strategy = record.profile.name, record.profile.strategy
            info.backends = {b.id: b for b in record.profile.backends}


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while reading: decoding makes and frees a few tuples a
    line, none in a cycle, and counting them set off a collection every few hundred lines
    (about 4 % of the reading time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _no_calls() -> Columns:
    """The columns of no call, each of its type."""
    ints, none, flag = np.zeros(0, np.int32), np.zeros(0), np.zeros(0, bool)
    return Columns(
        run=ints,
        deployment=ints,
        key=ints,
        outcome=np.zeros(0, np.int8),
        stream=flag,
        t0=none,
        t1=none,
        latency=none,
        ttft=none,
        tokens_in=none,
        tokens_out=none,
        tokens_cached=none,
        cost=none,
        cost_estimated=flag,
        usage_estimated=flag,
    )


def _charges(values: list[float | None]) -> np.ndarray:
    """The USD each call record says it was charged, NaN where it says none or a charge that
    cannot be one (negative, not finite, MAX_CALL_COST_USD or more): its tokens are priced."""
    charged = floats(values)  # typed float: msgspec refused any past a float
    with np.errstate(invalid="ignore"):
        charged[~((charged >= 0) & (charged < MAX_CALL_COST_USD))] = math.nan
    return charged


def _sane(t0: np.ndarray, t1: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """Which calls' numbers can be true: two timestamps with ts_end >= ts_start; latency,
    TTFT and token counts null or finite and >= 0, a count below MAX_USAGE_TOKENS; a latency
    within a second of the call's interval (the writer takes both from one clock reading) and
    a TTFT no longer than it.
    A p50 of −5,000,000,000 ms from one bad line is worse than the line skipped and counted."""
    latency, ttft = numbers[0], numbers[1]
    with np.errstate(invalid="ignore"):
        good = (t1 >= t0) & ~((numbers < 0) | np.isinf(numbers)).any(axis=0)
        good &= ~(np.abs(latency - (t1 - t0)) > _LATENCY_SLACK_MS) & ~(ttft > latency + 1.0)
        good &= ~(numbers[2:] >= MAX_USAGE_TOKENS).any(axis=0)
    return good  # comparisons with NaN (null, or not a timestamp) are False


def _unknown_event(line: bytes) -> bool:
    """A well-formed record of an event this version does not know (skipped, not malformed)."""
    try:
        record = msgspec.json.decode(line)
    except (msgspec.MsgspecError, RecursionError):
        return False
    return (
        type(record) is dict
        and isinstance(record.get("event"), str)
        and record["event"] not in EVENTS
        and isinstance(record.get("run_id"), str)
    )


def _remap(table: dict, other: dict) -> np.ndarray:
    """Codes of ``other``'s values in ``table`` (grown with the new ones), indexed by
    ``other``'s codes."""
    mapping = np.zeros(len(other), np.int32)
    for value, code in other.items():
        mapping[code] = table.setdefault(value, len(table))
    return mapping
