"""The ``rrcli`` commands around a run: ``stats``, ``export``, ``results``, ``queue``, ``sim``,
``serve``, ``batches`` and ``help`` (``cli.py`` has the group, ``run``, ``validate`` and
``init``, and adds these to it).

As in ``cli.py``: parse options, call one core function, render; heavy modules are imported
inside the command that needs them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from rrcli.errors import UsageError
from rrcli.records.traceschema import RESULT_STATUSES

__all__ = ["COMMANDS", "profile_option"]

profile_option = click.option(
    "-p", "--profile", "profile_path", help="Profile file, or `demo` for the built-in pool."
)


@click.command()
@click.argument("traces", nargs=-1, required=True, metavar="TRACES...")
@click.option(
    "--by",
    type=click.Choice(["deployment", "model", "status", "error_type", "run", "endpoint"]),
    default="deployment",
    show_default=True,
    help="Group calls by deployment, model, HTTP status, error type, run or endpoint.",
)
@click.option("--json", "as_json", is_flag=True, help="Print every number as JSON.")
@click.option("--plot", is_flag=True, help="Also draw calls in flight per deployment over time.")
@click.option("--wide", is_flag=True, help="Show every column of the table.")
@click.option(
    "--columns",
    metavar="NAMES",
    help="The table's columns, comma-separated (calls, ok, retried, errors, cached, share, p50, "
    "p95, p99, ttft, ttft_p95, tpot, tokens_in, tokens_out, estimated, cost, hit, saved, tok_s, "
    "peak).",
)
@click.option(
    "--run",
    "runs",
    multiple=True,
    metavar="RUN_ID",
    help="Only this run: an id, a unique prefix of one, or `latest`; repeatable.",
)
@click.option(
    "--since",
    metavar="TIME",
    help="Only runs started at or after TIME: 2026-11-29T21:00:00Z, 2026-11-29, or an age: 2h.",
)
def stats(
    traces: tuple[str, ...],
    by: str,
    as_json: bool,
    plot: bool,
    wide: bool,
    columns: str | None,
    runs: tuple[str, ...],
    since: str | None,
) -> None:
    """Summarise trace files (- for standard input): per deployment calls, errors, latency,
    TTFT, tokens, cost and peak calls in flight."""
    import orjson

    from rrcli import _render
    from rrcli.stats.cells import pick
    from rrcli.stats.summary import summarize

    shown = pick(columns, wide=wide)  # UsageError for an unknown name, before reading
    sources = [sys.stdin.buffer if t == "-" else t for t in traces]
    bins = _render.stats_plot_bins() if plot else None
    summary = summarize(sources, by=by, run=runs or None, since=since, timeline_bins=bins)
    if as_json:
        click.echo(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
    else:
        _render.render_stats(summary, shown, fit=not (columns or wide))
        if plot:
            _render.render_stats_plot(summary)
    if summary["malformed_lines"]:
        count = summary["malformed_lines"]
        click.echo(f"rrcli: {count} malformed trace line(s) skipped", err=True)


@click.command("export")
@click.argument("traces", nargs=-1, required=True, metavar="TRACES...")
@click.option(
    "--otlp",
    metavar="URL",
    help="The OTLP/HTTP collector, e.g. http://localhost:4318 [default: "
    "$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT].",
)
def export_command(traces: tuple[str, ...], otlp: str | None) -> None:
    """Send trace files (- for standard input) to an OpenTelemetry collector: a span per call,
    a parent span per job. Exit status 1 when some spans were not delivered."""
    import os

    from rrcli.otel.endpoint import require_sdk, traces_url

    url = traces_url(otlp, os.environ)
    require_sdk()
    from rrcli.otel.export import export_traces

    report = export_traces([sys.stdin.buffer if t == "-" else t for t in traces], url)
    for line in report.lines():
        click.echo(line, err=True)
    sys.exit(report.exit_code)


@click.command("results")
@click.argument(
    "sources", nargs=-1, metavar="RESULTS...", type=click.Path(dir_okay=False, path_type=Path)
)
@click.option(
    "--jobs",
    "jobs_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Put the lines in this jobs file's order; name its jobs that have no line.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="Write the lines here [default: standard output].",
)
@click.option(
    "--status",
    type=click.Choice(RESULT_STATUSES),
    help="Only the jobs whose final line has this status.",
)
@click.option("--queue", metavar="NAME", help="Collect the shared queue NAME instead of files.")
@profile_option
def results_command(
    sources: tuple[Path, ...],
    jobs_path: Path | None,
    out: Path | None,
    status: str | None,
    queue: str | None,
    profile_path: str | None,
) -> None:
    """The final line of each job in RESULTS (its last line there), or in the shared --queue:
    one line a job, in the format the files hold, ready to hand on. Exit status 1 when a job of
    --jobs (of the queue) has no line."""
    from rrcli.fleet.queue_report import collect_queue
    from rrcli.records.collect import collect_files

    target = None if out in (None, Path("-")) else out
    if (queue is not None) == bool(sources or jobs_path):
        raise click.UsageError("give RESULTS files (and --jobs), or --queue NAME -p PROFILE")
    if queue is not None:
        report: Any = collect_queue(profile_path, queue, target, status)
    else:
        report = collect_files(sources, target, jobs=jobs_path, status=status)
    for line in report.lines(target, jobs_path):
        click.echo(line, err=True)
    sys.exit(report.exit_code)


@click.command("queue")
@click.argument("name")
@profile_option
@click.option("--json", "as_json", is_flag=True, help="Print the progress as one JSON document.")
def queue_command(name: str, profile_path: str | None, as_json: bool) -> None:
    """Progress of the shared queue NAME: jobs, done, pending per worker, workers alive."""
    from rrcli.fleet.queue_report import queue_progress

    progress = queue_progress(profile_path, name)
    click.echo(progress.json() if as_json else "\n".join(progress.lines()))


@click.command("sim")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, help="Port to listen on (0: any free).")
@click.option("--latency-ms", default=0.0, show_default=True, help="Response time per request.")
@click.option("--jitter-ms", default=0.0, show_default=True, help="Latency varies by ± this.")
@click.option(
    "--error-rate", default=0.0, show_default=True, help="Share of requests that get 500."
)
@click.option(
    "--rate-limit-rate", default=0.0, show_default=True, help="Share of requests that get 429."
)
@click.option(
    "--retry-after-ms", default=100.0, show_default=True, help="Retry-After sent with 429s."
)
@click.option("--cap", type=int, default=None, help="Concurrent requests above N answer 429.")
@click.option("--output-tokens", default=32, show_default=True, help="Tokens in each reply.")
@click.option("--ttft-ms", type=float, default=None, help="Time to first token (streams).")
@click.option("--tokens-per-s", type=float, default=None, help="Streaming speed after the first.")
@click.option(
    "--prefix-cache-tokens",
    type=int,
    default=0,
    show_default=True,
    help="Capacity of the prefix cache in tokens (0: no cache).",
)
@click.option(
    "--prefill-ms-per-token",
    type=float,
    default=0.0,
    show_default=True,
    help="Time to read each input token the prefix cache does not hold.",
)
@click.option(
    "--cut-stream-rate", default=0.0, show_default=True, help="Share of streams cut halfway."
)
@click.option(
    "--stream-error-rate",
    default=0.0,
    show_default=True,
    help="Share of streams with an error event halfway.",
)
@click.option(
    "--pause-turn-rate",
    default=0.0,
    show_default=True,
    help="Share of Anthropic replies that stop with pause_turn.",
)
@click.option(
    "--batch-delay-ms",
    default=0.0,
    show_default=True,
    help="Time a batch takes from created to ended.",
)
@click.option(
    "--batch-window-ms",
    type=float,
    default=None,
    help="Batch lines not done this long after the create expire [default: 24 h].",
)
@click.option(
    "--batch-failure-rate",
    default=0.0,
    show_default=True,
    help="Share of batch lines that fail with a 500.",
)
@click.option(
    "--batch-enqueued-tokens",
    type=int,
    default=None,
    help="Input tokens a key may have in batches not ended [default: no limit].",
)
@click.option("--api-key", "api_keys", multiple=True, help="Accept only this key (repeatable).")
@click.option("--seed", type=int, default=None, help="Makes the random draws repeatable.")
@click.option("--model", default=None, help="Model name to report (default: the request's).")
@click.pass_context
def sim_command(ctx: click.Context, host: str, port: int, **options: object) -> None:
    """Serve simulated OpenAI and Anthropic APIs on loopback, for trying profiles and tests."""
    from rrcli.sim.behaviour import config_from_options
    from rrcli.sim.server import check_host, serve

    explicit = ctx.get_parameter_source("host") is not click.core.ParameterSource.DEFAULT
    check_host(host, explicit=explicit)
    try:
        serve(config_from_options(**options), host, port, echo=lambda s: click.echo(s, err=False))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


@click.command("batches")
@profile_option
@click.option("--cancel", "cancel", metavar="ID", help="Cancel the batch ID, then list.")
@click.option("--all", "cancel_all", is_flag=True, help="Cancel every batch not ended, then list.")
def batches_command(profile_path: str | None, cancel: str | None, cancel_all: bool) -> None:
    """List the Batch API batches on the pool's keys (deployment, id, state, counts, age) on
    every backend that has a Batch API, and cancel them. Exit status 1 when a backend could
    not be asked or --cancel names a batch no backend has."""
    import os
    import time

    from rrcli.running.batches import pool_batches

    if cancel is not None and cancel_all:
        raise click.UsageError("give --cancel ID or --all, not both")
    report = pool_batches(profile_path, os.environ, cancel=cancel, cancel_all=cancel_all)
    for line in report.lines(time.time()):
        click.echo(line, err=line.startswith("rrcli: "))
    sys.exit(report.exit_code)


@click.command("serve")
@click.option(
    "-p",
    "--profile",
    "profiles",
    multiple=True,
    help="Profile file, or `demo` (repeatable: each is a pool, picked by its name as model).",
)
@click.option(
    "--host", default=None, help="Address to listen on [default: [serve] host, 127.0.0.1]."
)
@click.option(
    "--port", type=int, default=None, help="Port to listen on [default: [serve] port, 8787]."
)
@click.option(
    "--traces", type=click.Path(dir_okay=False, path_type=Path), help="Trace file (appended)."
)
@click.option(
    "--key-env",
    help="Variable holding the client keys, comma-separated [default: [serve] keys_env].",
)
@click.option("--no-auth", is_flag=True, help="Take requests without a key (loopback only).")
@click.option("-q", "--quiet", is_flag=True, help="No live display; log errors only.")
def serve_command(
    profiles: tuple[str, ...],
    host: str | None,
    port: int | None,
    traces: Path | None,
    key_env: str | None,
    no_auth: bool,
    quiet: bool,
) -> None:
    """Serve the OpenAI and Anthropic APIs in front of the profiles' pools."""
    import asyncio
    import os

    from rrcli import _render
    from rrcli._logging import configure_logging
    from rrcli.config.load import load_profile, resolve_profile_path
    from rrcli.serve.metrics import Activity
    from rrcli.serve.server import ServeOptions, client_keys, event_loop, serve

    configure_logging(level="error" if quiet else "warning")
    paths = profiles or (None,)
    loaded = [load_profile(resolve_profile_path(p, os.environ), environ=os.environ) for p in paths]
    table = loaded[0].serve  # the first profile's [serve], under the options given here
    options = ServeOptions(
        host=host or table.host,
        port=table.port if port is None else port,
        traces=traces,
        key_env=key_env or table.keys_env or None,
        no_auth=no_auth,
        drain_timeout=table.drain_timeout,
        max_body_bytes=table.max_body_bytes,
        session_idle=table.session_idle,
        open_metrics=table.open_metrics,
        head_timeout=table.head_timeout,
        idle_timeout=table.idle_timeout,
        max_connections=table.max_connections,
        max_connections_per_address=table.max_connections_per_address,
    )
    keys, made = client_keys(options, os.environ)

    def watch(gateway: Any) -> None:
        activity = Activity(gateway)
        display.watch(activity.line, activity.rows)

    display = _render.RunDisplay(enabled=sys.stderr.isatty() and not quiet)
    try:
        with display:
            echo = lambda s: click.echo(s)  # noqa: E731
            run = serve(loaded, options, keys=keys, made=made, echo=echo, on_start=watch)
            with asyncio.Runner(loop_factory=event_loop()) as runner:
                runner.run(run)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise UsageError(f"cannot listen on {options.host}:{options.port}: {exc}") from None


@click.command("help")
@click.argument("topic", required=False)
def help_command(topic: str | None) -> None:
    """Show the man page of TOPIC: a command (run, serve, ...), or profile, jobs or traces (the
    files' formats); without TOPIC, list the topics. Paged by man on a terminal, plain text
    otherwise; works from a checkout as from an install."""
    from rrcli.manpages import show

    sys.exit(show(topic, sys.stdout))


COMMANDS = (
    stats,
    export_command,
    results_command,
    queue_command,
    sim_command,
    serve_command,
    batches_command,
    help_command,
)
