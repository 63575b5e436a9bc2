"""The results file: one whole line per job, and the resume that reads it back.

``prepare_output`` runs before anything is sent: it refuses to clobber an existing file, checks the
file can be written, and on ``--resume`` reads the file as a stream, drops a torn last line (a
crash mid-write) by truncating the file in place, and returns the keys of the jobs that already
succeeded. ``ResultWriter`` then appends one line per job in one of three formats:

- ``rrcli``: the result dict as ``result_line`` built it (key order kept);
- ``openai-batch``: OpenAI Batch API output lines (``id``, ``custom_id``, ``response``, ``error``);
- ``anthropic-batch``: Anthropic Message Batches result lines (``custom_id``, ``result``);

their response bodies whole whichever API served the job (``bodies``).

A resumed file is read in any of the three formats; an ``ok`` is status ``ok``, a 200 response or
a ``succeeded`` result.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from rrcli.errors import OutputExistsError, UsageError
from rrcli.records._jsonl import LineFile, dumps_line, open_error
from rrcli.records.bodies import LineAnswer, anthropic_body, openai_body
from rrcli.records.jobs import KeySet, job_key
from rrcli.records.origins import ResponseOrigins
from rrcli.vocabulary import anthropic_error_type, openai_error_type

__all__ = [
    "FORMATS",
    "CallbackWriter",
    "ResultSink",
    "ResultWriter",
    "ResumeState",
    "line_format",
    "line_outcome",
    "prepare_output",
]

FORMATS = ("rrcli", "openai-batch", "anthropic-batch")

_NEWLINE = orjson.OPT_APPEND_NEWLINE


class ResultSink(Protocol):
    """Where results go: a ResultWriter, or a callback for ``--prompt``."""

    def write(self, result: dict[str, Any], *, body: dict[str, Any] | None = None) -> None: ...

    def flush(self) -> None: ...


class CallbackWriter:
    """Hands each result to a callback (``--prompt`` prints answers instead of JSON lines; a
    pool hands its caller each call's record)."""

    def __init__(self, callback: Callable[[dict[str, Any]], None]) -> None:
        self.write = lambda result, body=None: callback(result)

    def flush(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class ResumeState:
    """What an existing results file says, read once before a resumed run starts.

    ``ok``: the keys (``jobs.job_key``) of jobs with an ``ok`` line; skip them. ``sessions``:
    session → deployment of the last result line carrying both (saved bindings). ``counts``: lines
    by outcome (``ok``, ``error``, ``invalid``, ``malformed``). ``dropped_bytes``: the size of the
    torn last line removed (0 if none). ``fmt``: the format found, None for an empty file.
    ``responses``: the backend that created each Responses answer of an ``ok`` line.
    """

    ok: KeySet = field(default_factory=KeySet)
    sessions: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(
        default_factory=lambda: {"ok": 0, "error": 0, "invalid": 0, "malformed": 0}
    )
    dropped_bytes: int = 0
    fmt: str | None = None
    responses: ResponseOrigins = field(default_factory=ResponseOrigins)


def prepare_output(
    path: Path | None, *, resume: bool, overwrite: bool, fmt: str | None = None
) -> ResumeState:
    """Make ``path`` ready for a run, before anything is sent; see the module docstring.

    Raises OutputExistsError (exit 2) for a non-empty file without ``resume``/``overwrite``, and
    UsageError for an unwritable path, a missing folder, or (with ``fmt``) a file written in
    another format. ``path`` None is standard output (nothing to resume). ``resume`` and
    ``overwrite`` are never both true: ``RunOptions`` refuses that.
    """
    if path is None:
        if resume:
            raise UsageError("--resume needs a results file, not standard output — give --out PATH")
        return ResumeState()
    if path.is_dir():
        raise UsageError(f"cannot write results to {path}: it is a folder — give a file path")
    if not path.parent.is_dir():
        raise UsageError(
            f"cannot write results to {path}: folder {path.parent} does not exist — "
            "create it or choose another --out"
        )
    existing = path.is_file() and path.stat().st_size > 0
    if existing and not (resume or overwrite):
        raise OutputExistsError(
            f"{path} already exists — pass --resume to skip the jobs that already succeeded, "
            "or --overwrite to start over"
        )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if overwrite:
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)
        return _scan(path, fmt) if resume and existing else ResumeState()
    except OSError as exc:
        raise open_error(
            "results", path, exc, "check the file and its folder are writable"
        ) from exc


def line_format(rec: object) -> str | None:
    """The format (one of FORMATS) of one parsed result line, or None if it is none of them."""
    if type(rec) is not dict:
        return None
    if "status" in rec and "id" in rec:
        return "rrcli"
    if "custom_id" in rec:
        if "response" in rec:
            return "openai-batch"
        if "result" in rec:
            return "anthropic-batch"
    return None


def line_outcome(rec: dict[str, Any], kind: str) -> tuple[str, str]:
    """(job key, outcome) of a result line of format ``kind``: outcome ``ok``, ``error`` or
    ``invalid`` (an anthropic-batch line is ``ok`` or ``error``: that format has no other)."""
    if kind == "rrcli":
        return job_key(rec["id"]), str(rec["status"])
    key = job_key(rec["custom_id"])
    if kind == "openai-batch":
        response = rec["response"]
        if type(response) is dict and response.get("status_code") == 200:
            return key, "ok"
        error = rec.get("error")
        invalid = type(error) is dict and error.get("code") == "invalid_job"
        return key, "invalid" if invalid else "error"
    result = rec["result"]
    return key, "ok" if type(result) is dict and result.get("type") == "succeeded" else "error"


def _scan(path: Path, fmt: str | None) -> ResumeState:
    """Read a results file as a stream; truncate a torn last line; collect the ok keys."""
    state = ResumeState()
    ok, sessions, counts, responses = state.ok, state.sessions, state.counts, state.responses
    found: str | None = None
    keep = pos = 0  # keep: the offset after the last line to keep
    bad_start: int | None = None  # where the last complete line starts, if it is not JSON
    loads, decode_error = orjson.loads, orjson.JSONDecodeError
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            start, pos = pos, pos + len(line)
            if not line.endswith(b"\n"):
                break  # torn: a crash mid-write (only ever the last line)
            keep, bad_start = pos, None
            try:
                rec = loads(line)
            except decode_error:
                if line.strip():
                    counts["malformed"] += 1
                    bad_start = start
                    continue
                rec = None
            kind = line_format(rec)
            if kind is None:
                counts["malformed"] += rec is not None
                continue
            if found is None:
                found = kind
                if fmt is not None and kind != fmt:
                    raise UsageError(
                        f"{path}:{number}: the file holds {kind} results, not {fmt} — resume with "
                        f"--format {kind}, or write to another --out"
                    )
            key, outcome = line_outcome(rec, kind)
            counts[outcome] = counts.get(outcome, 0) + 1
            if outcome == "ok":
                ok.add(key)
                if "response_id" in rec and type(rec.get("deployment")) is str:
                    responses.remember(str(rec["response_id"]), rec["deployment"])
            if "session" in rec and "deployment" in rec:
                sessions[str(rec["session"])] = rec["deployment"]
    if bad_start is not None:  # a last line that is not JSON is torn too: drop it
        counts["malformed"] -= 1
        keep = bad_start
    if keep != pos:
        os.truncate(path, keep)
    return ResumeState(ok, sessions, counts, pos - keep, found, responses)


class ResultWriter:
    """Appends one whole line per job to ``path`` (None: standard output) in format ``fmt``.

    ``write`` queues the line; ``flush`` hands queued lines to the OS in one write (the runner
    calls it periodically and at the end); ``close`` flushes and closes. ``append`` False
    truncates an existing file. ``clock`` (epoch seconds) dates the bodies built for batch
    formats. ``on_closed`` is called once if the reader of the output (a pipe) goes away;
    ``first`` runs before each write of queued lines (the traces' flush).
    """

    __slots__ = ("_clock", "_encode", "_out")

    def __init__(
        self,
        path: Path | None,
        *,
        fmt: str = "rrcli",
        append: bool,
        clock: Callable[[], float] = time.time,
        on_closed: Callable[[], None] | None = None,
        first: Callable[[], None] | None = None,
    ) -> None:
        encoders = {
            "rrcli": self._rrcli,
            "openai-batch": self._openai,
            "anthropic-batch": self._anthropic,
        }
        if fmt not in encoders:
            raise UsageError(f"unknown results format {fmt!r} — use one of {', '.join(FORMATS)}")
        self._encode = encoders[fmt]
        self._clock = clock
        self._out = LineFile(path, append=append, what="results", on_closed=on_closed, first=first)

    def write(
        self,
        result: dict[str, Any],
        *,
        body: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> None:
        """Queue the line of one job's final ``result`` (a result line's dict).

        ``body`` is the provider's response body (or error body) when there is one; the batch
        formats write it (completed) when it is of their API, else one built from ``result``.
        ``request_id`` is the server's request id (openai-batch; else ``result["request_id"]``).
        """
        self._out.write(self._encode(result, body, request_id))

    def encode(self, result: dict[str, Any], *, body: dict[str, Any] | None = None) -> bytes:
        """The line ``write`` would queue for ``result``, to be handed to ``write_line``."""
        return self._encode(result, body, None)

    def write_line(self, line: bytes) -> None:
        """Queue a line made by ``encode`` (a line also stored elsewhere is encoded once)."""
        self._out.write(line)

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.close()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the three formats ------------------------------------------------------------------

    def _rrcli(self, result: dict[str, Any], body: object, request_id: object) -> bytes:
        return dumps_line(result)  # metadata may hold integers beyond 64 bits

    def _openai(self, result: dict[str, Any], body: Any, request_id: str | None) -> bytes:
        request_id = request_id or result.get("request_id")
        response: dict[str, Any] | None = None
        error: dict[str, Any] | None = None
        failure = result.get("error") or {}
        status_code = failure.get("status_code")
        if result.get("status") == "ok":
            if not ("endpoint" in result and type(body) is dict):  # another endpoint's: as sent
                body = openai_body(LineAnswer(result, body), result.get("model"), self._clock)
            response = {"status_code": 200, "request_id": request_id, "body": body}
        elif status_code:  # the server answered: OpenAI keeps its response, error null
            if not (type(body) is dict and type(body.get("error")) is dict):
                body = {
                    "error": {
                        "message": failure.get("message", ""),
                        "type": openai_error_type(status_code),
                        "param": None,
                        "code": failure.get("type"),
                    }
                }
            response = {"status_code": status_code, "request_id": request_id, "body": body}
        else:  # no response at all, or an invalid job line
            code = failure.get("type") or result.get("status") or "error"
            error = {"code": code, "message": failure.get("message", "")}
        line = {
            "id": f"batch_req_{os.urandom(16).hex()}",
            "custom_id": job_key(result["id"]),
            "response": response,
            "error": error,
        }
        return orjson.dumps(line, option=_NEWLINE)

    def _anthropic(self, result: dict[str, Any], body: Any, request_id: object) -> bytes:
        if result.get("status") == "ok":
            message = anthropic_body(LineAnswer(result, body), result.get("model"))
            outcome: dict[str, Any] = {"type": "succeeded", "message": message}
        else:
            if not (type(body) is dict and body.get("type") == "error"):
                failure = result.get("error") or {}
                body = {
                    "type": "error",
                    "error": {
                        "type": anthropic_error_type(
                            failure.get("type"), failure.get("status_code")
                        ),
                        "message": failure.get("message", ""),
                    },
                }
            outcome = {"type": "errored", "error": body}
        line = {"custom_id": job_key(result["id"]), "result": outcome}
        return orjson.dumps(line, option=_NEWLINE)
