"""The jobs file: one JSON object a line, read as a stream.

``iter_jobs`` turns each line into a ``Job`` or an ``InvalidJob`` (a message naming the line and
the cause); it never raises for bad content, so one bad line never stops a run. Memory stays flat:
the only thing kept across lines is the set of ids seen, stored as 64-bit hashes in a compact
open-addressing table (``KeySet``, about 16 MB for a million ids), not as Python strings.

What a line may hold, and how it becomes a request, is ``_jobshapes``: ``prompt`` (+
``system``), ``messages``, ``session`` (``turns`` + ``system``), ``openai_batch`` (OpenAI Batch
input lines) and ``anthropic_batch`` (Anthropic Message Batches request lines) for chat; a line
naming another ``endpoint`` (embeddings, responses, completions, moderations) carries its
``input``. Numbers keep their exact value, integers beyond 64 bits included (in metadata; a
request cannot carry one). ``Job`` and ``InvalidJob`` are frozen ``msgspec.Struct`` records:
one is made a line, and a frozen dataclass would set each of its fields through
``object.__setattr__``.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from array import array
from collections.abc import Iterator
from typing import Any, BinaryIO

import msgspec
import orjson

from rrcli.errors import LineError, UsageError
from rrcli.records._compressed import compressed_as, open_jobs_file
from rrcli.records._jobshapes import (
    BUILDERS,
    Parts,
    anthropic_request,
    check_sendable,
    openai_request,
    raw_id,
    shape,
    type_name,
)

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_SESSION_BYTES",
    "InvalidJob",
    "Job",
    "KeySet",
    "check_json_lines",
    "iter_jobs",
    "job_from_dict",
    "job_key",
    "open_jobs_file",
    "parse_job",
    "request_job",
    "session_name",
    "shard_of",
]

MAX_LINE_BYTES = 64 << 20  # a longer line is invalid (and skipped without being held in memory)
#: the most UTF-8 bytes of a session name kept (bindings, traces, results); a longer name is
#: kept as its start and a digest of the whole
MAX_SESSION_BYTES = 256
_DIGEST_CHARS = 64  # sha256's hex digest

_BOM = b"\xef\xbb\xbf"
_PEEK_BYTES = 1 << 16  # what check_json_lines looks at, at most
_M64 = 0xFFFFFFFFFFFFFFFF
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0000000000")
# orjson turns an integer beyond 64 bits into a float, silently. Such an integer has 19 digits
# or more, so a line with such a run of digits (found by one translate and one count: ~0.1 µs)
# is read again by the stdlib parser, which keeps every integer exact; orjson still decides
# what is valid JSON.
_LONG_RUN = b"0" * 19


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """One valid line of the jobs file.

    ``id`` is the id as the user wrote it (str or int; ``line-N`` when absent) and results echo it
    unchanged; ``key`` is its str form (dedupe, resume, shard). ``messages`` are OpenAI-style chat
    messages, a leading system message when there is one; for a session only that system message,
    the user turns being in ``turns``. ``stream`` is None unless the job sets ``params.stream``
    (then removed from ``params``). ``custom_id`` is the line's ``custom_id`` when it had one.
    ``endpoint`` is the API endpoint it goes to (``chat`` unless the line names another);
    a non-chat job has no messages and carries its ``input`` (completions: the prompt) as
    written.
    """

    id: str | int
    key: str
    line: int
    kind: str
    messages: tuple[dict[str, Any], ...]
    turns: tuple[str, ...]
    params: dict[str, Any]
    session: str
    metadata: dict[str, Any] | None
    custom_id: str | int | None
    stream: bool | None
    endpoint: str = "chat"
    input: Any = None


class InvalidJob(msgspec.Struct, frozen=True):
    """A line that cannot run: its result has status ``invalid`` and this ``id``: the line's own
    when it has a readable one not taken by an earlier line, else ``line-N``.

    ``message`` names the line and the cause (``line 7: ...``); ``duplicate_of`` is the repeated id
    (as written) when the line's id was an earlier line's.
    """

    id: str | int
    line: int
    message: str
    duplicate_of: str | int | None = None
    source: str = ""

    @property
    def key(self) -> str:
        """The id's str form, as ``Job.key`` (shard, resume)."""
        return job_key(self.id)


def job_key(job_id: object) -> str:
    """The str form of an id (an int ``5`` and a string ``"5"`` are the same job)."""
    return job_id if type(job_id) is str else str(job_id)


def session_name(name: str) -> str:
    """The name a session is kept under: ``name`` itself up to ``MAX_SESSION_BYTES`` bytes of
    UTF-8; a longer one its start, ``~`` and the sha256 of the whole (so two long names that
    differ anywhere stay two sessions), ``MAX_SESSION_BYTES`` bytes at most. A session name is a
    key, held by the router's bindings and written in every trace and result line: a client
    that names its session with megabytes (a 4 MiB ``user``) would make each of those as big."""
    if len(name) * 4 <= MAX_SESSION_BYTES:  # no character is more than 4 bytes of UTF-8
        return name
    data = name.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_SESSION_BYTES:
        return name
    start = data[: MAX_SESSION_BYTES - 1 - _DIGEST_CHARS].decode("utf-8", "ignore")
    return f"{start}~{hashlib.sha256(data).hexdigest()}"


def shard_of(key: str, n: int) -> int:
    """Which of ``n`` shards a job belongs to: stable across processes and machines (crc32)."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % n


class KeySet:
    """A set of str keys held as 64-bit hashes in an open-addressing table (``array('Q')``).

    About 16 bytes per key at most, against ~100 for a ``set`` of ``str``. Membership is by hash,
    so two different keys collide with probability about n²/2⁶⁵ (≈3e-8 for a million keys). The
    hashes are Python's string hashes: valid within one process only, never stored.
    """

    __slots__ = ("_limit", "_mask", "_n", "_table")

    def __init__(self, capacity: int = 1024) -> None:
        size = 1024
        while size * 3 < capacity * 5:  # keep the load under 0.6
            size <<= 1
        self._n = 0
        self._resize(size)

    def __len__(self) -> int:
        return self._n

    def _slot(self, key: object) -> tuple[int, int]:
        """(index, hash): where ``key``'s hash sits, or the empty slot where it would go."""
        h = (hash(key) & _M64) or 1
        table, mask = self._table, self._mask
        i = h & mask
        v = table[i]
        while v and v != h:
            i = (i + 1) & mask
            v = table[i]
        return i, h

    def add(self, key: str) -> bool:
        """Add ``key``; True if it was new, False if it was already there. Once a job: the probe
        of ``_slot`` written out, without its call and its tuple."""
        h = (hash(key) & _M64) or 1
        table, mask = self._table, self._mask
        i = h & mask
        while (v := table[i]) and v != h:
            i = (i + 1) & mask
        if v:
            return False
        table[i] = h
        self._n += 1
        if self._n > self._limit:
            self._resize(2 * (self._mask + 1))
        return True

    def __contains__(self, key: object) -> bool:
        return self._table[self._slot(key)[0]] != 0

    def _resize(self, size: int) -> None:
        old = getattr(self, "_table", ())
        table = array("Q", bytes(8 * size))
        mask = size - 1
        for h in old:
            if h:
                i = h & mask
                while table[i]:
                    i = (i + 1) & mask
                table[i] = h
        self._table, self._mask, self._limit = table, mask, size * 3 // 5


def _parse(obj: object, n: int, wide: bool) -> Job:
    """The Job of one decoded line; ``wide``: the line holds integers beyond 64 bits, which
    only its metadata may carry."""
    if type(obj) is not dict:
        raise LineError(f"expected a JSON object, got {type_name(obj)}")
    kind = shape(obj)
    raw, key = raw_id(obj)
    messages, turns, params, stream, endpoint, value = BUILDERS[kind](obj)
    if wide:
        check_sendable(messages, "messages")
        check_sendable(value, "input")
        check_sendable(params, "params" if kind != "openai_batch" else "body")
    if key is None:
        raw = key = f"line-{n}"
    session = obj.get("session", key)
    if type(session) is not str:
        if type(session) is not int:
            raise LineError(f"session must be a string, got {type_name(session)}")
        session = str(session)
    if session is not key:  # a job that is its own session: its id is written whole anyway
        session = session_name(session)
    metadata = obj.get("metadata")
    if metadata is not None and type(metadata) is not dict:
        raise LineError(f"metadata must be an object, got {type_name(metadata)}")
    custom_id = obj.get("custom_id")
    return Job(
        id=raw,
        key=key,
        line=n,
        kind=kind,
        messages=messages,
        turns=turns,
        params=params,
        session=session,
        metadata=metadata,
        custom_id=custom_id,
        stream=stream,
        endpoint=endpoint,
        input=value,
    )


def parse_job(raw: bytes, n: int) -> Job:
    """Line ``n`` again, as ``iter_jobs`` made it a Job: a line stored after it was read once
    (a shared queue's job). Raises LineError or orjson.JSONDecodeError for a line that was
    not a valid job."""
    raw = raw.removeprefix(_BOM) if n == 1 else raw
    wide = raw.translate(_DIGITS_AS_ZERO).count(_LONG_RUN) > 0
    return _parse(json.loads(raw) if wide else orjson.loads(raw), n, wide)


def _packed_fix(packed: str, name: str) -> str:
    """What to do with a compressed stream rrcli was not given by name."""
    unpack = "zcat" if packed == "gzip" else "zstd -dc"
    return (
        f"this is {packed}-compressed data — name the file (rrcli decompresses the gzip and "
        f"zstd files it opens), or decompress it first: {unpack} {name} | rrcli run -"
    )


def job_from_dict(obj: dict[str, Any], n: int) -> Job | InvalidJob:
    """A job a program hands in as a dict (``rrcli.Pool.call``), checked as line
    ``n`` of a file would be: the Job, or an InvalidJob whose message names the fault. The
    dict's parts may be taken into the Job (its messages moved out of its body)."""
    try:
        return _parse(obj, n, False)
    except LineError as exc:
        raw = obj.get("id", obj.get("custom_id")) if type(obj) is dict else None
        return InvalidJob(raw if type(raw) in (str, int) else f"line-{n}", n, str(exc))


def request_job(
    api: str, endpoint: str, body: dict[str, Any], *, id: str | int, session: str | None = None
) -> Job | InvalidJob:
    """The job of a request's ``body`` in ``api`` (``openai``: to ``/v1/<endpoint>``;
    ``anthropic``: to ``/v1/messages``), checked as a batch line's body is: the Job (its
    messages or input taken out of ``body``), or an InvalidJob whose message names the fault
    in the request's own terms. ``session``: the conversation it belongs to (else its own)."""
    try:
        if api == "anthropic":
            parts: Parts = anthropic_request(body, "body")
        else:
            parts = openai_request(endpoint, body)
    except LineError as exc:
        return InvalidJob(id, 0, str(exc))
    messages, turns, params, stream, endpoint, value = parts
    key = job_key(id)
    kind = "anthropic_batch" if api == "anthropic" else "openai_batch"  # the request's dialect
    return Job(
        id=id,
        key=key,
        line=0,
        kind=kind,
        messages=messages,
        turns=turns,
        params=params,
        session=key if session is None else session_name(session),
        metadata=None,
        custom_id=None,
        stream=stream,
        endpoint=endpoint,
        input=value,
    )


def _undecodable(raw: bytes, exc: orjson.JSONDecodeError) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return f"not UTF-8 text (bad byte at column {err.start + 1}) — save the file as UTF-8"
    return f"not valid JSON: {exc.msg} (column {exc.colno})"


def _skip_rest(readline: Any) -> None:
    while True:
        chunk = readline(1 << 20)
        if not chunk or chunk.endswith(b"\n"):
            return


def iter_jobs(
    stream: BinaryIO, source: str, *, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[Job | InvalidJob]:
    """Each line of ``stream`` as a Job or an InvalidJob, in order; blank lines skipped.

    ``source`` names the file in InvalidJob.source (``-`` for standard input). A line whose id
    repeats an earlier line's id is an InvalidJob with ``duplicate_of``. Never raises for bad
    content in a line; a line longer than ``max_line_bytes`` is invalid and skipped without
    being read into memory whole. Raises UsageError at once, before any line is read, when the
    stream is one JSON document rather than JSON Lines (``check_json_lines``), and at its first
    line when it is gzip or zstd data (``open_jobs_file`` decompresses a file it opens).
    """
    check_json_lines(stream, source)
    return _lines(stream, source, max_line_bytes)


def check_json_lines(stream: BinaryIO, source: str) -> None:
    """UsageError when ``stream`` starts as one JSON document (an array, or an object over
    several lines) rather than one object a line: said once, with the fix, instead of an
    invalid result for every line. Looks only at what the stream's buffer already holds."""
    peek = getattr(stream, "peek", None)
    if peek is None:
        return
    head = peek(_PEEK_BYTES)[:_PEEK_BYTES]
    name = "FILE" if source in ("-", "<stdin>") else source
    packed = compressed_as(head)
    if packed is not None:
        raise UsageError(f"{source}: {_packed_fix(packed, name)}")
    head = head.removeprefix(_BOM).lstrip()
    if head.startswith(b"["):
        what, jq = "one JSON array", "jq -c '.[]'"
    elif head.split(b"\n", 1)[0].strip() == b"{":
        what, jq = "a JSON object written over several lines", "jq -c ."
    else:
        return
    raise UsageError(
        f"{source}: rrcli reads JSON Lines: one object per line, and this is {what} — "
        f"convert it with: {jq} {name} > jobs.jsonl"
    )


def _lines(stream: BinaryIO, source: str, max_line_bytes: int) -> Iterator[Job | InvalidJob]:
    seen = KeySet()
    readline = stream.readline
    limit = max_line_bytes + 1
    loads, decode_error, digits_as_zero = orjson.loads, orjson.JSONDecodeError, _DIGITS_AS_ZERO
    n = 0
    while True:
        raw = readline(limit)
        if not raw:
            return
        n += 1
        if len(raw) == limit and not raw.endswith(b"\n"):
            _skip_rest(readline)
            message = f"line {n}: longer than {max_line_bytes} bytes — split the job"
            yield InvalidJob(f"line-{n}", n, message, None, source)
            continue
        if n == 1:
            raw = raw.removeprefix(_BOM)
            packed = compressed_as(raw)
            if packed is not None:  # a pipe: check_json_lines could not look ahead
                raise UsageError(f"{source}: {_packed_fix(packed, 'FILE')}")
        value: object = None
        try:
            value = loads(raw)
            wide = raw.translate(digits_as_zero).count(_LONG_RUN) > 0
            job = _parse(json.loads(raw) if wide else value, n, wide)
        except decode_error as exc:
            if not raw.strip():
                continue
            yield InvalidJob(f"line-{n}", n, f"line {n}: {_undecodable(raw, exc)}", None, source)
            continue
        except LineError as exc:
            yield _invalid(value, n, f"line {n}: {exc}", seen, source)
            continue
        if seen.add(job.key):
            yield job
        else:
            message = (
                f"line {n}: duplicate id {orjson.dumps(job.id).decode()} — an earlier line has "
                "it; give each job its own id"
            )
            yield InvalidJob(f"line-{n}", n, message, job.id, source)


def _invalid(value: object, n: int, message: str, seen: KeySet, source: str) -> InvalidJob:
    """A line that parsed but cannot run keeps its own id when one is readable, so its result
    joins back to the input (an OpenAI Batch line's custom_id); an id already taken gives
    ``line-N`` and ``duplicate_of``, as for a valid line."""
    try:
        raw, key = raw_id(value) if type(value) is dict else (None, None)
    except LineError:
        raw = key = None
    if key is None:
        return InvalidJob(f"line-{n}", n, message, None, source)
    if not seen.add(key):
        return InvalidJob(f"line-{n}", n, message, raw, source)
    return InvalidJob(raw, n, message, None, source)  # type: ignore[arg-type]
