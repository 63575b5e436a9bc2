"""Trace lines → the small typed records stats reads, decoded a block at a time.

Why it exists apart from columns.py: which fields are read and how they are typed decides what
is malformed, and the decoder is most of the time ``rrcli stats`` takes. A trace names the same
few runs, deployments, models, endpoints and error types in every line, so a ``BlockDecoder``
learns them: once a block has named a value, later blocks are decoded by a struct typing those
fields as a ``Literal`` of the values seen, for which msgspec hands back the one string it
holds instead of making (and later freeing) a new one each line. A block naming a value not
seen yet fails that decoder and is decoded again by the plain one, whose records teach the new
value: the records of every block are the ones the plain decoder gives.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from rrcli.records.traceschema import CALL
from rrcli.tokens import MAX_USAGE_TOKENS

__all__ = ["FIELDS", "KEY_FIELDS", "META", "BlockDecoder", "Call", "Run", "RunEnd", "decode_line"]

KEY_FIELDS = {
    "deployment": "deployment",
    "model": "model",
    "status": "http_status",
    "error_type": "error_type",
    "run": "run_id",
    "endpoint": "endpoint",
}
#: what a call record without the field meant: traces written before it was added are chat's
_ABSENT = {"endpoint": "chat"}
# The call fields stats reads, typed as the schema says; all but the first five may be absent
# or null in a line (an older or a hand-written trace). Kept in the schema's order, which is the
# writer's: msgspec matches each key fastest when it comes where the struct expects it.
_REQUIRED = ("run_id", "deployment", "outcome", "ts_start", "ts_end")
_READ = (
    _REQUIRED
    + tuple(KEY_FIELDS.values())
    + (
        "latency_ms",
        "ttft_ms",
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "usage_estimated",
        "cost_usd",
        "cost_estimated",
        "stream",
    )
)
#: the string fields whose values a trace repeats, decoded as the values seen once learned
_LEARNED = ("run_id", "deployment", "model", "endpoint", "error_type")
_MOST_VALUES = 256  # a field naming more values than this is decoded as plain text from then on
#: a count no call reaches (MAX_USAGE_TOKENS or more, or negative) makes its record malformed:
#: it would overflow every sum made with it
_Count = Annotated[int, msgspec.Meta(ge=0, lt=MAX_USAGE_TOKENS)]


def _call_struct(learned: dict[str, frozenset[str]]) -> type[msgspec.Struct]:
    """The call record's struct, each field in ``learned`` typed as a Literal of its values."""

    def kind(name: str, declared: Any) -> Any:
        values = learned.get(name)
        return Literal[tuple(sorted(values))] if values else declared

    return msgspec.defstruct(
        "Call",
        [
            (name, kind(name, declared))
            if name in _REQUIRED
            else (name, kind(name, declared) | None, _ABSENT.get(name))
            for name, declared in CALL
            if name in _READ
        ],
        tag="call",
        tag_field="event",
        kw_only=True,
        gc=False,
    )


Call = _call_struct({})


class _Price(msgspec.Struct, gc=False):
    input: float
    output: float
    cached_input: float | None = None


class _Backend(msgspec.Struct, gc=False):
    id: str
    max_concurrency: _Count | None = None
    price: _Price | None = None


class _Profile(msgspec.Struct, gc=False):
    name: str | None = None
    strategy: str | None = None
    backends: list[_Backend] = []


class Run(msgspec.Struct, tag="run", tag_field="event", gc=False):
    run_id: str
    ts: str
    profile: _Profile


class RunEnd(msgspec.Struct, tag="run_end", tag_field="event", gc=False):
    run_id: str
    jobs: dict[str, _Count]
    interrupted: bool | None = None


class BackendEvent(msgspec.Struct, tag="backend", tag_field="event", gc=False):
    """A backend's change of state: known, read, and not used by the numbers."""

    run_id: str
    deployment: str
    state: str


class Refused(msgspec.Struct, tag="refused", tag_field="event", gc=False):
    """A request serve refused before any backend was asked: known, read, and not used."""

    run_id: str
    reason: str


META = (Run, RunEnd, BackendEvent, Refused)  # the records that are not calls
FIELDS = {name: at for at, name in enumerate(Call.__struct_fields__)}  # name → its place
assert all(len(kind.__struct_fields__) < len(FIELDS) for kind in META)


def _decoder(call: type[msgspec.Struct]) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(call | Run | RunEnd | BackendEvent | Refused)


_PLAIN = _decoder(Call)
_LEARNED_AT = [FIELDS[name] for name in _LEARNED]


def decode_line(line: bytes | memoryview) -> object:
    """One trace line's record; raises msgspec.MsgspecError or RecursionError as msgspec does."""
    return _PLAIN.decode(line)


class BlockDecoder:
    """Decodes blocks of trace lines, learning the values of the repeated string fields."""

    def __init__(self) -> None:
        self._values: dict[str, set[str]] = {name: set() for name in _LEARNED}
        self._learned: msgspec.json.Decoder | None = None

    def __reduce__(self) -> tuple[type[BlockDecoder], tuple[()]]:
        return BlockDecoder, ()  # what it learned is only a speed-up: a copy starts afresh

    def decode_lines(self, block: bytes | memoryview) -> list[object]:
        """The records of a block of whole lines; raises as msgspec does for a block with a
        line that does not decode."""
        if self._learned is not None:
            try:
                return self._learned.decode_lines(block)
            except msgspec.ValidationError:  # a new value (or a bad line: decoded again below)
                pass
        records = _PLAIN.decode_lines(block)
        self._learn(records)
        return records

    def _learn(self, records: list[object]) -> None:
        """Note the values the records name; a new one makes the learned decoder anew."""
        calls = [msgspec.structs.astuple(r) for r in records if type(r) is Call]
        grew = False
        for name, at in zip(_LEARNED, _LEARNED_AT, strict=True):
            values = self._values[name]
            if len(values) > _MOST_VALUES:
                continue
            new = {row[at] for row in calls} - values - {None}
            if new:
                values |= new
                grew = True
        if grew:
            learned = {
                name: frozenset(values)
                for name, values in self._values.items()
                if len(values) <= _MOST_VALUES
            }
            self._learned = _decoder(_call_struct(learned))
