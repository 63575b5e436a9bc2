"""The run's side of ``run --otlp``: trace lines handed to a span process, never waited for.

Making a span and encoding it for OTLP costs about 115 µs of CPU; in a thread of the run that
was a fifth of a 50 ms run's throughput at 64 in flight, since the thread and the event loop
share one interpreter lock. So the spans are made and sent by a child process
(``otel.child``), and the run only copies each trace line, already encoded for the trace file,
into a buffer that goes down a pipe in one non-blocking write when 64 KiB have gathered and
at each flush of the outputs. When the span process falls behind, the buffer grows to
``buffer_max`` and further call records are dropped and counted, never waited for.

``close`` hands over what is left, ends the input and waits for the process's ``SendReport``
(its own drain rules bound that wait), adding what never reached it. A process that died or
hung is counted as having sent nothing of what it was given.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import subprocess
import sys
import tempfile
import time

import orjson

from rrcli.config.redaction import redact_each, redacted_url, url_secrets
from rrcli.otel.report import URL_VARIABLE, SendReport

__all__ = ["SpanProcess"]

_FLUSH_AT = 1 << 16  # bytes gathered before they go down the pipe
_PIPE_SIZE = 1 << 20  # the pipe's capacity asked of Linux (F_SETPIPE_SZ): fewer short writes
_F_SETPIPE_SZ = 1031
_CALL = b'{"event":"call"'  # how a call record's line begins (records.trace writes it first)
_NEWLINE = orjson.OPT_APPEND_NEWLINE


class SpanProcess:
    """The span process of one run: ``put(line)`` each trace line, ``job_done(job_id)`` when a
    job ended, ``flush()`` now and then, ``close()`` for the SendReport. ``wait_s`` bounds the
    close (the process's own drain takes at most about 13 s)."""

    def __init__(
        self, url: str, run_id: str, *, buffer_max: int = 16 << 20, wait_s: float = 20.0
    ) -> None:
        self.endpoint = redacted_url(url)  # as the report shows it
        self._secrets = url_secrets(url)
        self._max, self._wait_s = buffer_max, wait_s
        self._buf = bytearray()
        self._overflow = 0  # call records the full buffer turned away
        self._dropped_jobs: set[bytes] = set()  # their jobs, until each ends
        self._handed = 0  # calls and job ends handed over: all lost if the process dies
        self._broken = False
        read, self._fd = os.pipe()
        with contextlib.suppress(OSError):  # an older kernel: the default 64 KiB
            fcntl.fcntl(self._fd, _F_SETPIPE_SZ, _PIPE_SIZE)
        os.set_blocking(self._fd, False)
        # a file, not a pipe: no amount of it can block the process; closed by close()
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "rrcli.otel.child", run_id],
                stdin=read,
                stdout=subprocess.PIPE,
                stderr=self._errors,
                env=_child_environ(url),
                start_new_session=True,
            )
        finally:
            os.close(read)

    @property
    def pid(self) -> int:
        """The span process's id."""
        return self._proc.pid

    def put(self, line: bytes) -> None:
        """Queue one trace line (the hot path); a full buffer drops a call and counts it."""
        buf = self._buf
        if len(buf) < self._max:
            buf += line
            if line.startswith(_CALL):
                self._handed += 1
            if len(buf) >= _FLUSH_AT:
                self.flush()
        elif line.startswith(_CALL):
            self._overflow += 1
            self._dropped_jobs.add(orjson.dumps(orjson.loads(line).get("job_id")))

    def job_done(self, job_id: object) -> None:
        """A job ended: its parent span can be made once its calls' spans are. Always handed
        over (a few bytes, past ``buffer_max`` too), marked ``[job_id, 1]`` when a call of the
        job was turned away here: had none reached the process, its parent is counted lost."""
        dropped = False
        if self._dropped_jobs:  # only once the buffer has turned calls away
            key = orjson.dumps(job_id)
            dropped = key in self._dropped_jobs
            self._dropped_jobs.discard(key)
        self._buf += orjson.dumps([job_id, 1] if dropped else [job_id], option=_NEWLINE)
        self._handed += 1

    def flush(self) -> None:
        """Hand the process what the pipe takes now, without waiting."""
        if not self._buf or self._broken:
            return
        try:
            written = os.write(self._fd, self._buf)
        except BlockingIOError:
            return
        except OSError:  # the span process is gone: what it was given is counted at close
            self._broken = True
            return
        del self._buf[:written]

    def close(self) -> SendReport:
        """Hand over the rest (for up to ``wait_s``), end the input, and return what the span
        process reports, with what never reached it added to the dropped."""
        deadline = time.monotonic() + self._wait_s
        while self._buf and not self._broken and time.monotonic() < deadline:
            select.select([], [self._fd], [], 0.05)
            self.flush()
        buf = self._buf  # what never reached the process: its calls and job ends
        unsent = buf.count(_CALL) + buf.count(b"\n[") + buf.startswith(b"[")
        buf.clear()
        os.close(self._fd)
        self._fd = -1
        try:
            out, _ = self._proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            err = self._last_error()
        except subprocess.TimeoutExpired:
            self._proc.kill()
            out, _ = self._proc.communicate()
            err = "it did not finish in time"
        self._errors.close()
        return self._report(out, err, unsent)

    def abandon(self) -> None:
        """End the process without a report, unless ``close`` already did (a run that failed
        before its end: nothing waits for the collector)."""
        if self._fd < 0:
            return
        os.close(self._fd)
        self._fd = -1
        self._proc.kill()
        self._proc.wait()
        self._errors.close()

    def _last_error(self) -> str:
        """The last line the span process wrote to its standard error."""
        self._errors.seek(max(0, self._errors.seek(0, os.SEEK_END) - 4096))
        lines = self._errors.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no message"

    def _report(self, out: bytes, err: str, unsent: int) -> SendReport:
        try:
            report = SendReport(**orjson.loads(out))
        except (orjson.JSONDecodeError, TypeError):
            return SendReport(
                self.endpoint,
                0,
                self._handed + self._overflow,
                f"the span process ended without a report (exit {self._proc.returncode}): "
                + redact_each(err, self._secrets),
            )
        dropped = report.dropped + self._overflow + unsent
        error = None if report.error is None else redact_each(report.error, self._secrets)
        return SendReport(self.endpoint, report.sent, dropped, error)


def _child_environ(url: str) -> dict[str, str]:
    """The run's environment (the ``OTEL_*`` variables the exporter reads), the collector's URL,
    and this interpreter's import path: a library user's ``sys.path`` finds rrcli there too."""
    path = os.pathsep.join(entry for entry in sys.path if entry)
    return {**os.environ, URL_VARIABLE: url, "PYTHONPATH": path}
