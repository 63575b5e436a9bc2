"""The response cache in a run: a call whose request was answered before is answered
from the cache file, without routing, a slot, a rate-limit token or a budget.

The key is a hash of the request as it would be sent to a backend (``Engine._request``: the
endpoint, the job's dialect, the messages or input, the params with the backend's merged under
the job's, never ``stream``) and of that backend's model, never its id: backends that serve one
model with the same params share answers. A pool may serve several models, and which backend a
job lands on is the router's choice, made only when a slot is free: rather than asking the router
for a choice it would then have to honour, the backends are grouped once per run by what they
would send (model and params), and a job looks up each group it may be routed to (its excluded
backends set aside), in profile order: one lookup on a pool of one model, the first stored
answer wins on a mixed pool. An answer from any group is one the pool could have given. On a
miss the call is routed as usual, and its ok answer is stored under the key of the group that
served it (computed once: the lookup's, when there was one).

A hit is one ``Attempt`` with decision ``cached``, zero latency and no queue time, on the
backend that first gave the answer when it is still in the group, else the group's first:
the trace writes it (``outcome: "cached"``), the result line says ``"cached": true``, and the
router never sees it. Only ok answers are stored; a Responses call continuing a
``previous_response_id`` (an answer that depends on the server's state) is never cached.

The jobs of a file are read ahead (``ahead``): a chunk's first-group keys in one SELECT, and a
chat job that is one call every backend of the group may take, found answered, is finished
right there by ``finish`` (running/hits.py: the same lines without the Attempt), never handed
to a worker; every other job's answer waits for its own ``lookup``.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from rrcli.config.profile import CACHE_MODES, Backend, Profile
from rrcli.engine.options import EngineOptions
from rrcli.errors import UsageError
from rrcli.providers.base import Call, Reply
from rrcli.records.attempt import Attempt, CallOutcome, cached_attempt
from rrcli.records.jobs import InvalidJob, Job

if TYPE_CHECKING:
    from rrcli.records.cache import CacheFile

MANY = 256  # jobs read ahead and looked up at once (records.cache.MANY: one SELECT)

__all__ = ["ANSWERED", "Answered", "ResponseCache", "open_cache", "request_key"]

Jobs = Iterator[Job | InvalidJob]
#: what builds the request a backend would be sent (``Engine._request``)
Request = Callable[[Job, list[dict[str, Any]], Backend], Call]
#: what finishes a job the read-ahead found answered, never routed (running/hits.py): given
#: the job, its call, the backend the answer is on and the stored reply's fields; False when
#: it leaves the job to the workers
Finish = Callable[[Job, Call, Backend, dict[str, Any]], bool]


class Answered:
    """What the read-ahead hands on after a chunk of which it finished jobs (``ANSWERED``): a
    worker lets the event loop run then (flushes, signals), as a whole rerun may be answered
    without a job being handed on."""

    __slots__ = ()


ANSWERED = Answered()

_KEY_VERSION = b"rrcli-cache-key-1\n"
#: the reply's fields kept: not the transport's (status, TTFT), nor a pause_turn's continuation
_STORED = tuple(
    f.name
    for f in fields(Reply)
    if f.name not in ("http_status", "ttft_ms", "continuation", "pause_s")
)
#: the fields of a stored answer a hit finished where it was read may hold: a Responses id is
#: remembered (its continuations go to its backend) by the engine's own path
_PLAIN = frozenset(_STORED) - {"response_id"}


def request_key(call: Call, model: str) -> bytes:
    """The canonical key of ``call`` sent to ``model``: endpoint, dialect, messages, params
    (keys sorted at every depth) and input, hashed; never ``stream`` (not in ``Call.params``)."""
    text = orjson.dumps(
        (call.endpoint, model, call.dialect, call.messages, call.params, call.input),
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.blake2b(_KEY_VERSION + text, digest_size=20).digest()


def _encode(reply: Reply, backend: Backend) -> bytes:
    values = {name: getattr(reply, name) for name in _STORED}
    return orjson.dumps(
        {"by": backend.id, "reply": {k: v for k, v in values.items() if v is not None}}
    )


@dataclass(slots=True)
class ResponseCache:
    """A run's cache: its file and what the run may do with it (``--cache-mode``), the pool
    grouped by the request its backends would send, and the counts of hits and stores."""

    file: CacheFile
    backends: Sequence[Backend]
    reads: bool = True
    writes: bool = True
    hits: int = 0
    _groups: tuple[tuple[Backend, ...], ...] = ()
    _group_of: dict[str, int] | None = None
    _first: dict[str, Backend] = field(default_factory=dict)  # the first group's, by id
    #: read ahead (``ahead``), by id(job) for a job not yet looked up: the job (kept alive, so
    #: its id names it), its call to the first group and that call's key, the answer or None
    _read: dict[int, tuple[Job, Call, bytes, bytes | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        groups: dict[bytes, list[Backend]] = {}
        for backend in self.backends:
            what = orjson.dumps((backend.model, backend.params), option=orjson.OPT_SORT_KEYS)
            groups.setdefault(what, []).append(backend)
        self._groups = tuple(tuple(group) for group in groups.values())
        self._group_of = {b.id: i for i, group in enumerate(self._groups) for b in group}
        self._first = {b.id: b for b in self._groups[0]} if self._groups else {}

    def lookup(
        self,
        job: Job,
        messages: list[dict[str, Any]],
        turn: int,
        excluded: frozenset[str],
        request: Request,
    ) -> tuple[Attempt | None, dict[int, bytes]]:
        """(the cached attempt answering this call, or None; the keys computed, by group)."""
        keys: dict[int, bytes] = {}
        if not self.reads or "previous_response_id" in job.params:
            return None, keys
        read = self._read.pop(id(job), None) if self._read else None
        for index, group in enumerate(self._groups):
            allowed = [b for b in group if b.id not in excluded] if excluded else group
            if not allowed:
                continue
            if read is not None and index == 0 and read[0] is job and allowed[0] is group[0]:
                _, call, key, answer = read
            else:
                call = request(job, messages, allowed[0])
                key = request_key(call, allowed[0].model)
                answer = self.file.get(key)
            keys[index] = key
            stored = _decode(answer)
            if stored is not None:
                self.hits += 1
                return _hit(job, turn, call, allowed, *stored), keys
        return None, keys

    def ahead(
        self, jobs: Iterator[Job | InvalidJob], request: Request, finish: Finish | None = None
    ) -> Iterator[Job | InvalidJob | Answered]:
        """``jobs`` as they come, each chunk of them looked up in one SELECT before the first is
        handed on (a call's own lookup then finds its answer read): the first group's key of
        each job that is one call of its first turn. A job found answered is first offered to
        ``finish``, and not handed on when it took it (a hit: it finished the job); ANSWERED
        follows a chunk of which some were."""
        if not self.reads or not self._groups:
            yield from jobs
            return
        first = self._groups[0][0]
        older: list[int] = []  # read two chunks ago: a job of them still read was refused
        old: list[int] = []
        while chunk := list(itertools.islice(jobs, MANY)):
            for stale in older:
                self._read.pop(stale, None)
            plain = [j for j in chunk if type(j) is Job and j.kind != "session"]
            plain = [j for j in plain if "previous_response_id" not in j.params]
            calls = [request(j, list(j.messages), first) for j in plain]
            keys = [request_key(call, first.model) for call in calls]
            found = self.file.get_many(keys)
            done: set[int] = set()
            for job, call, key in zip(plain, calls, keys, strict=True):
                answer = found.get(key)
                if answer is not None and finish is not None:
                    stored = self._plain(answer)
                    if stored is not None and finish(job, call, *stored):
                        self.hits += 1
                        done.add(id(job))
                        continue
                self._read[id(job)] = (job, call, key, answer)
            older, old = old, [id(j) for j in plain]
            if not done:
                yield from chunk
                continue
            yield from (j for j in chunk if id(j) not in done)
            yield ANSWERED

    def _plain(self, stored: bytes) -> tuple[Backend, dict[str, Any]] | None:
        """(the backend, the reply's fields) of a stored answer as ``lookup`` gives it on the
        first group when every backend of it may take the call; None for an entry ``_decode``
        refuses, or one holding a field a plain answer's lines cannot carry."""
        try:
            entry = orjson.loads(stored)
            by, reply = entry["by"], entry["reply"]
        except (orjson.JSONDecodeError, TypeError, KeyError):
            return None
        if type(reply) is not dict or "output" not in reply or not reply.keys() <= _PLAIN:
            return None
        if type(by) is not str:
            return None
        return self._first.get(by, self._groups[0][0]), reply

    def keep(
        self,
        outcome: CallOutcome,
        keys: dict[int, bytes],
        messages: list[dict[str, Any]],
        request: Request,
    ) -> None:
        """Store the answer of an ok call under its group's key (``keys``: the lookup's)."""
        job, attempt, reply = outcome.job, outcome.attempt, outcome.reply
        if not self.writes or outcome.status != "ok" or attempt is None or reply is None:
            return
        assert isinstance(job, Job) and self._group_of is not None
        if "previous_response_id" in job.params:
            return
        backend = attempt.backend
        key = keys.get(self._group_of[backend.id])
        if key is None:
            key = request_key(request(job, messages, backend), backend.model)
        self.file.put(key, backend.model, _encode(reply, backend))


def _decode(stored: bytes | None) -> tuple[str, Reply] | None:
    """(the backend that gave a stored answer, the answer); None for none, or for an entry
    this rrcli cannot read (written by another version: a miss, stored again)."""
    if stored is None:
        return None
    try:
        entry = orjson.loads(stored)
        return entry["by"], Reply(**entry["reply"])
    except (orjson.JSONDecodeError, TypeError, KeyError):
        return None


def _hit(
    job: Job, turn: int, call: Call, allowed: Sequence[Backend], by: str, reply: Reply
) -> Attempt:
    """The attempt a stored answer makes: on the backend that first gave it (``by``) when it
    may take this call, else on the first that may; zero latency, no queue, decision
    ``cached``."""
    backend = next((b for b in allowed if b.id == by), allowed[0])
    return cached_attempt(
        job.id,
        job.session,
        turn,
        backend,
        reply,
        call.stream,
        job.endpoint,
        time.time(),
        time.monotonic(),
    )


def open_cache(profile: Profile, options: EngineOptions) -> ResponseCache | None:
    """The run's cache: ``--cache``, else the profile's ``[cache] path``, in ``--cache-mode``
    (else the profile's mode, else ``readwrite``); None when there is none or the mode is
    ``off``. CacheError (exit 2, nothing sent) when the file cannot be used."""
    mode = options.cache_mode or profile.cache.mode
    path = options.cache or (Path(profile.cache.path) if profile.cache.path else None)
    if mode not in CACHE_MODES:
        raise UsageError(f"--cache-mode {mode}: expected one of {', '.join(CACHE_MODES)}")
    if mode == "off":
        return None
    if path is None:
        if options.cache_mode is not None:
            raise UsageError(
                f"--cache-mode {mode} needs a cache file — pass --cache PATH or set "
                "[cache] path in the profile"
            )
        return None
    reads, writes = mode != "write", mode != "read"
    from rrcli.records.cache import CacheFile  # sqlite3 loads only for a run with a cache

    return ResponseCache(CacheFile(path, read=reads, write=writes), profile.backends, reads, writes)
