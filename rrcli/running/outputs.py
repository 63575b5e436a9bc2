"""A run's outputs: the results sink (a file, appended on ``--resume``; or the ``--prompt``
callback) and the trace writer, claimed for the run before anything is sent, and fed to the span
process of ``--otlp`` and to a shared queue when there is one.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack, closing
from typing import TYPE_CHECKING

from rrcli.engine.summary import RunSummary
from rrcli.records.claim import STDIN, OutputClaim, refuse_same_files
from rrcli.records.results import (
    CallbackWriter,
    ResultSink,
    ResultWriter,
    ResumeState,
    prepare_output,
)
from rrcli.records.trace import TraceWriter
from rrcli.routing.control import Halt, RunControl
from rrcli.running.options import RunOptions
from rrcli.running.telemetry import JobEnds

if TYPE_CHECKING:
    from rrcli.otel.live import SpanProcess
    from rrcli.running.workers import SharedQueue

__all__ = [
    "OUTPUT_CLOSED",
    "open_outputs",
    "output_closed",
    "prepare_results",
    "refuse_clobbering",
]

OUTPUT_CLOSED = 141  # exit status when the results' reader went away: 128 + SIGPIPE, as a shell


def refuse_clobbering(options: RunOptions) -> None:
    """UsageError when an output is the jobs file or the other output (records/claim.py)."""
    given = options.prompts or options.job_dicts is not None
    jobs = STDIN if options.jobs is None and not given else options.job_path
    out = options.out_file if options.on_result is None else None
    refuse_same_files(jobs, [("--out", out), ("--traces", options.traces)])


def prepare_results(options: RunOptions, stack: ExitStack) -> ResumeState | None:
    """The results file made ready before anything is sent (None: results go to a callback):
    it and the traces file locked for this run until ``stack`` closes (records/claim.py), then
    on --resume, what it already holds, in the format asked for."""
    out = options.out_file if options.on_result is None else None
    claim = stack.enter_context(closing(OutputClaim()))
    claim.take(out, "results")
    claim.take(options.traces, "traces")
    if options.on_result is not None:
        return None
    return prepare_output(
        options.out_file, resume=options.resume, overwrite=options.overwrite, fmt=options.fmt
    )


def open_outputs(
    options: RunOptions,
    run_id: str,
    stack: ExitStack,
    sender: SpanProcess | None = None,
    queue: SharedQueue | None = None,
    on_closed: Callable[[], None] | None = None,
) -> tuple[ResultSink, TraceWriter]:
    """The result sink (a file appended on --resume, or the --prompt callback) and the trace
    writer (appended to, but started afresh with --overwrite, as the results are), both closed
    by ``stack``; with a span ``sender`` (--otlp) both feed it too; with a
    shared ``queue`` each result line goes to it as well. ``on_closed``: called once if the
    results' reader (a pipe) goes away."""
    tap = None if sender is None else sender.put
    traces = TraceWriter(options.traces, run_id, tap=tap, append=not options.overwrite)
    stack.callback(traces.close)  # after the results', whose flush flushes the traces first
    results: ResultSink
    if options.on_result is not None:
        results = CallbackWriter(options.on_result)
    else:
        out = options.out_file
        append = options.resume and out is not None and out.exists()
        writer = ResultWriter(
            out, fmt=options.fmt, append=append, on_closed=on_closed, first=traces.flush
        )
        stack.callback(writer.close)
        results = writer if queue is None else queue.sink(writer)
    if sender is not None:
        results = JobEnds(results, sender)
    return results, traces


def output_closed(control: RunControl, summary: RunSummary) -> Callable[[], None]:
    """What the run does when the reader of its results goes away (``--out - | head``): it
    stops at once, calls in flight cancelled (their answers have nowhere to go), and exits as a
    program killed by SIGPIPE would (OUTPUT_CLOSED)."""

    def stop() -> None:
        message = (
            f"the results output was closed (broken pipe) after {summary.done:,} results: "
            "the run stopped; jobs not finished have no result line"
        )
        control.halt(Halt(OUTPUT_CLOSED, "output_closed", message))
        control.cancel()

    return stop
