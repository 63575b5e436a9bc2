"""The jobs file (SPEC §3): one JSON object a line, read as a stream.

``iter_jobs`` turns each line into a ``Job`` or an ``InvalidJob`` (a message naming the line and
the cause); it never raises for bad content, so one bad line never stops a run. Memory stays flat:
the only thing kept across lines is the set of ids seen, stored as 64-bit hashes in a compact
open-addressing table (``KeySet``, about 16 MB for a million ids), not as Python strings.

Accepted shapes (``kind``): ``prompt`` (+ ``system``), ``messages``, ``session`` (``turns`` +
``system``), ``openai_batch`` (OpenAI Batch input lines) and ``anthropic_batch`` (Anthropic
Message Batches request lines). ``model`` is always dropped: the routed backend's model is sent.
"""

from __future__ import annotations

import difflib
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson

__all__ = [
    "MAX_LINE_BYTES",
    "InvalidJob",
    "Job",
    "KeySet",
    "iter_jobs",
    "job_key",
    "shard_of",
]

MAX_LINE_BYTES = 64 << 20  # a longer line is invalid (and skipped without being held in memory)

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_COMMON = ("id", "custom_id", "session", "metadata")
_ALLOWED = {
    "prompt": frozenset({*_COMMON, "prompt", "system", "params"}),
    "messages": frozenset({*_COMMON, "messages", "system", "params"}),
    "session": frozenset({*_COMMON, "turns", "system", "params"}),
    "openai_batch": frozenset({*_COMMON, "method", "url", "body"}),
    "anthropic_batch": frozenset({*_COMMON, "params"}),
}
_SHAPE_KEYS = ("prompt", "messages", "turns", "body")
_OPENAI_BATCH_URL = "/v1/chat/completions"
_BOM = b"\xef\xbb\xbf"
_EMPTY: tuple[Any, ...] = ()
_MISSING = object()
_M64 = 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True, slots=True)
class Job:
    """One valid line of the jobs file.

    ``id`` is the id as the user wrote it (str or int; ``line-N`` when absent) and results echo it
    unchanged; ``key`` is its str form (dedupe, resume, shard). ``messages`` are OpenAI-style chat
    messages, a leading system message when there is one; for a session only that system message,
    the user turns being in ``turns``. ``stream`` is None unless the job sets ``params.stream``
    (then removed from ``params``). ``custom_id`` is the line's ``custom_id`` when it had one.
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


@dataclass(frozen=True, slots=True)
class InvalidJob:
    """A line that cannot run: its result has id ``line-N`` and status ``invalid``.

    ``message`` names the line and the cause (``line 7: ...``); ``duplicate_of`` is the repeated id
    (as written) when the line's only fault is reusing an earlier line's id.
    """

    id: str
    line: int
    message: str
    duplicate_of: str | int | None = None
    source: str = ""


def job_key(job_id: object) -> str:
    """The str form of an id (an int ``5`` and a string ``"5"`` are the same job)."""
    return job_id if type(job_id) is str else str(job_id)


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
        """Add ``key``; True if it was new, False if it was already there."""
        i, h = self._slot(key)
        if self._table[i]:
            return False
        self._table[i] = h
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


def _type_name(value: object) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


class _Bad(Exception):
    """A line's fault; caught in ``iter_jobs`` and turned into an InvalidJob."""


def _check_messages(messages: object, where: str) -> tuple[dict[str, Any], ...]:
    if type(messages) is not list:
        raise _Bad(f"{where} must be an array of messages, got {_type_name(messages)}")
    if not messages:
        raise _Bad(f"{where} is empty — give at least one message")
    for i, m in enumerate(messages):
        if type(m) is not dict:
            raise _Bad(f"{where}[{i}] must be an object with role and content")
        role = m.get("role")
        if role not in _ROLES:
            accepted = ", ".join(sorted(_ROLES))
            got = orjson.dumps(role).decode() if role is not None else "nothing"
            raise _Bad(f"{where}[{i}].role must be one of {accepted}, got {got}")
        content = m.get("content", _MISSING)
        if type(content) not in (str, list) and not (content is None and role == "assistant"):
            got = "nothing" if content is _MISSING else _type_name(content)
            raise _Bad(
                f"{where}[{i}].content must be a string or an array of content parts, got {got}"
            )
    return tuple(messages)


def _check_params(params: object, where: str) -> dict[str, Any]:
    if params is None:
        return {}
    if type(params) is not dict:
        raise _Bad(f"{where} must be an object, got {_type_name(params)}")
    return params


def _pop_stream(params: dict[str, Any], where: str) -> bool | None:
    params.pop("model", None)  # the routed backend's model is sent
    if "stream" not in params:
        return None
    stream = params.pop("stream")
    if type(stream) is not bool:
        raise _Bad(f"{where}.stream must be true or false, got {_type_name(stream)}")
    return stream


def _system_message(system: object, where: str) -> tuple[dict[str, Any], ...]:
    if system is None:
        return _EMPTY
    if type(system) is str:
        return ({"role": "system", "content": system},)
    if type(system) is list and all(
        type(b) is dict and b.get("type") == "text" and type(b.get("text")) is str for b in system
    ):
        return ({"role": "system", "content": "\n".join(b["text"] for b in system)},)
    raise _Bad(f"{where} must be a string, got {_type_name(system)}")


def _shape(obj: dict[str, Any]) -> str:
    """Which of the five shapes a line is (or a _Bad naming why none fits)."""
    if "prompt" in obj:
        kind = "prompt"
    elif "messages" in obj:
        kind = "messages"
    elif "turns" in obj:
        kind = "session"
    elif "body" in obj or "url" in obj or "method" in obj:
        kind = "openai_batch"
    elif "params" in obj and "custom_id" in obj:
        kind = "anthropic_batch"
    else:
        raise _Bad(
            "none of the job shapes — give prompt, messages or turns, or an OpenAI Batch "
            "line (custom_id, method, url, body) or an Anthropic Message Batches line "
            "(custom_id, params)"
        )
    allowed = _ALLOWED[kind]
    if not obj.keys() <= allowed:
        both = [k for k in _SHAPE_KEYS if k in obj]
        if len(both) > 1:
            raise _Bad(f"has both {both[0]} and {both[1]} — use one shape a line")
        # Eval files carry their own fields ("answer", "category"): those are ignored. A key
        # that looks like a misspelt one of ours ("sytem") would silently change the request,
        # so it is refused with the fix.
        for extra in sorted(obj.keys() - allowed):
            hint = difflib.get_close_matches(extra, sorted(allowed), n=1, cutoff=0.8)
            if hint:
                raise _Bad(
                    f"unknown key {orjson.dumps(extra).decode()} for a {kind} job (did you mean "
                    f'"{hint[0]}"? put fields of your own under metadata)'
                )
    return kind


def _build(obj: dict[str, Any], kind: str) -> tuple[tuple, tuple, dict, bool | None]:
    """(messages, turns, params, stream) of a line of the given shape."""
    turns: tuple[str, ...] = _EMPTY
    if kind == "prompt":
        prompt = obj["prompt"]
        if type(prompt) is not str:
            raise _Bad(f"prompt must be a string, got {_type_name(prompt)}")
        messages = (
            *_system_message(obj.get("system"), "system"),
            {"role": "user", "content": prompt},
        )
        params = _check_params(obj.get("params"), "params")
        return messages, turns, params, _pop_stream(params, "params")
    if kind == "messages":
        messages = _check_messages(obj["messages"], "messages")
        system = _system_message(obj.get("system"), "system")
        if system:
            if messages[0]["role"] == "system":
                raise _Bad("has system and a leading system message — keep one")
            messages = system + messages
        params = _check_params(obj.get("params"), "params")
        return messages, turns, params, _pop_stream(params, "params")
    if kind == "session":
        turns = obj["turns"]
        if type(turns) is not list or not turns or any(type(t) is not str for t in turns):
            raise _Bad("turns must be a non-empty array of strings (the user's turns)")
        params = _check_params(obj.get("params"), "params")
        system = _system_message(obj.get("system"), "system")
        return system, tuple(turns), params, _pop_stream(params, "params")
    if kind == "openai_batch":
        url = obj.get("url")
        if url != _OPENAI_BATCH_URL:
            raise _Bad(
                f"url {orjson.dumps(url).decode()} is not supported — rrcli sends chat "
                f'completions only: "url": "{_OPENAI_BATCH_URL}"'
            )
        if obj.get("method", "POST") != "POST":
            raise _Bad(f'method {orjson.dumps(obj["method"]).decode()} — only "POST" is accepted')
        body = obj.get("body")
        if type(body) is not dict:
            raise _Bad(
                f"body must be an object (the chat completion request), got {_type_name(body)}"
            )
        if "messages" not in body:
            raise _Bad("body.messages is missing")
        messages = _check_messages(body.pop("messages"), "body.messages")
        return messages, turns, body, _pop_stream(body, "body")
    params = _check_params(obj["params"], "params")  # anthropic_batch
    if "messages" not in params:
        raise _Bad("params.messages is missing")
    messages = _check_messages(params.pop("messages"), "params.messages")
    system = _system_message(params.pop("system", None), "params.system")
    return system + messages, turns, params, _pop_stream(params, "params")


def _raw_id(obj: dict[str, Any]) -> tuple[object, str | None]:
    """(id as written or None, its key) — _Bad for a wrong type."""
    name = "id"
    if "id" in obj:
        if "custom_id" in obj:
            raise _Bad("has both id and custom_id — keep one")
        raw = obj["id"]
    elif "custom_id" in obj:
        raw, name = obj["custom_id"], "custom_id"
    else:
        return None, None
    if type(raw) is int:
        return raw, str(raw)
    if type(raw) is not str:
        raise _Bad(f"{name} must be a string or an integer, got {_type_name(raw)}")
    if not raw:
        raise _Bad(f"{name} is empty — give the job a name or leave {name} out")
    if raw.startswith("line-") and raw[5:].isdigit():
        raise _Bad(f'{name} "{raw}" is reserved for lines without an id — choose another')
    return raw, raw


def _parse(obj: object, n: int) -> Job:
    if type(obj) is not dict:
        raise _Bad(f"expected a JSON object, got {_type_name(obj)}")
    kind = _shape(obj)
    raw, key = _raw_id(obj)
    messages, turns, params, stream = _build(obj, kind)
    if key is None:
        raw = key = f"line-{n}"
    session = obj.get("session", key)
    if type(session) is not str:
        if type(session) is not int:
            raise _Bad(f"session must be a string, got {_type_name(session)}")
        session = str(session)
    metadata = obj.get("metadata")
    if metadata is not None and type(metadata) is not dict:
        raise _Bad(f"metadata must be an object, got {_type_name(metadata)}")
    custom_id = obj.get("custom_id")
    return Job(raw, key, n, kind, messages, turns, params, session, metadata, custom_id, stream)


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
    repeats an earlier valid line's id is an InvalidJob with ``duplicate_of``. Never raises for
    bad content; a line longer than ``max_line_bytes`` is invalid and skipped without being read
    into memory whole.
    """
    seen = KeySet()
    readline = stream.readline
    limit = max_line_bytes + 1
    loads, decode_error = orjson.loads, orjson.JSONDecodeError
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
        if n == 1 and raw.startswith(_BOM):
            raw = raw[3:]
        try:
            job = _parse(loads(raw), n)
        except decode_error as exc:
            if not raw.strip():
                continue
            yield InvalidJob(f"line-{n}", n, f"line {n}: {_undecodable(raw, exc)}", None, source)
            continue
        except _Bad as exc:
            yield InvalidJob(f"line-{n}", n, f"line {n}: {exc}", None, source)
            continue
        if seen.add(job.key):
            yield job
        else:
            message = (
                f"line {n}: duplicate id {orjson.dumps(job.id).decode()} — an earlier line has "
                "it; give each job its own id"
            )
            yield InvalidJob(f"line-{n}", n, message, job.id, source)
