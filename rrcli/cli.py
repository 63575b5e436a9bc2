"""The ``rrcli`` command: parse options, call one core function, render, return an exit code.

Logic found in a command body belongs in the core. Heavy modules are imported inside the command
that needs them, so ``rrcli --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from rrcli import __version__
from rrcli.config.profile import CACHE_MODES, DEFAULT_PROVIDER
from rrcli.errors import RRCLIError, UsageError
from rrcli.providers.registry import NAMES
from rrcli.records.traceschema import RESULT_STATUSES


class _Group(click.Group):
    """Turns every RRCLIError into its message and exit code: never a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except RRCLIError as exc:
            click.echo(f"rrcli: {exc}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="rrcli")
def main() -> None:
    """A load-balancing runner for LLM APIs: a TOML profile names a pool of backends and a
    strategy; rrcli sends jobs across it, retries transient failures and traces every call."""


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    from rrcli.runtime.options import parse_shard

    try:
        return None if value is None else parse_shard(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc)) from None


_profile_option = click.option(
    "-p", "--profile", "profile_path", help="Profile file, or `demo` for the built-in pool."
)


@main.command()
@click.argument("jobs", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--prompt", "prompts", multiple=True, help="A one-off prompt (repeatable); prints the answer."
)
@_profile_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="Results file, or - for standard output [default: <JOBS stem>.results.jsonl].",
)
@click.option(
    "--traces",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trace file [default: <JOBS stem>.traces.jsonl].",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    help="Jobs in flight at once (overrides the profile).",
)
@click.option(
    "--resume", is_flag=True, help="Skip jobs that already have an ok result; append the rest."
)
@click.option("--overwrite", is_flag=True, help="Replace an existing results file.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["rrcli", "openai-batch", "anthropic-batch"]),
    default="rrcli",
    show_default=True,
    help="Results format.",
)
@click.option("--limit", type=click.IntRange(min=0), help="Only the first N jobs.")
@click.option(
    "--shard", callback=_shard, metavar="I/N", help="Only jobs whose stable id hash mod N is I."
)
@click.option("--seed", type=int, help="Seed for random choices and jitter.")
@click.option(
    "--queue", metavar="NAME", help="Work on the shared queue NAME (loading JOBS into it first)."
)
@click.option("--dry-run", is_flag=True, help="Parse, validate and route on paper; send nothing.")
@click.option(
    "--max-cost",
    type=float,
    metavar="USD",
    help="Stop before the run's spend would pass USD (exit 3); with --resume, earlier runs count.",
)
@click.option("--stream", is_flag=True, help="Stream responses (records time to first token).")
@click.option(
    "--keep-response",
    is_flag=True,
    help="Add the provider's response body to each result line (a stream: the body it folds into).",
)
@click.option(
    "--cache",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Response cache (SQLite file): answer repeated requests from it, store ok answers.",
)
@click.option(
    "--cache-mode",
    type=click.Choice(CACHE_MODES),
    help="Look up and store (readwrite), only look up (read), only store (write), or off "
    "[default: the profile's, else readwrite].",
)
@click.option(
    "--otlp",
    is_flag=False,
    flag_value="",
    metavar="[URL]",
    help="Send a span per call to this OTLP/HTTP collector as the run goes (without URL: "
    "$OTEL_EXPORTER_OTLP_ENDPOINT).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("-v", "--verbose", is_flag=True, help="Log every call.")
@click.option(
    "--log-format",
    type=click.Choice(["console", "json"]),
    default="console",
    show_default=True,
    help="Format of the log lines on standard error.",
)
def run(
    jobs: str | None,
    prompts: tuple[str, ...],
    profile_path: str | None,
    dry_run: bool,
    quiet: bool,
    verbose: bool,
    log_format: str,
    **fields: Any,
) -> None:
    """Send JOBS (a .jsonl file, or - for standard input) across the profile's pool."""
    import os

    from rrcli import _render
    from rrcli._logging import configure_logging, log_level
    from rrcli.config.load import load_profile, resolve_profile_path
    from rrcli.runtime.runner import RunControl, RunOptions, run_sync

    if bool(jobs) == bool(prompts) and not fields["queue"]:
        raise click.UsageError("give a JOBS file or --prompt TEXT (one of the two)")
    tty = sys.stderr.isatty()
    configure_logging(level=log_level(verbose=verbose, quiet=quiet, tty=tty), fmt=log_format)
    profile = load_profile(resolve_profile_path(profile_path, os.environ), environ=os.environ)
    stream = fields["stream"]
    answers = _render.PromptPrinter(stream=stream) if (prompts and not fields["out"]) else None
    options = RunOptions(  # the other options are RunOptions fields by name
        jobs=None if jobs is None or (jobs == "-" and not fields["queue"]) else Path(jobs),
        prompts=prompts,
        on_text=answers.text if (answers and stream) else None,
        on_result=answers.result if answers else None,
        **fields,
    ).with_defaults()
    if dry_run:
        import asyncio

        from rrcli.runtime.plan import plan

        _render.print_plan(profile, asyncio.run(plan(profile, options)))
        return
    control = RunControl()
    live = tty and not quiet and answers is None
    with _render.RunDisplay(enabled=live, control=control) as display:
        summary = run_sync(
            profile, options, environ=os.environ, on_start=display.start, control=control
        )
    if not quiet and answers is None:
        _render.print_summary(summary, options.out_file, options.traces)
    if summary.halted is not None:  # shown even with -q: the run did not finish
        click.echo(f"rrcli: {summary.halted.message}", err=True)
    sys.exit(summary.exit_code)


@main.command()
@click.argument("profile", metavar="[PROFILE]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document.")
@click.option(
    "--strict", is_flag=True, help="Treat warnings as errors (e.g. an unset api_key_env)."
)
@click.option(
    "--probe", is_flag=True, help="Send one tiny request to each backend; report latency."
)
@click.option(
    "--jobs",
    "jobs_path",
    type=click.Path(dir_okay=False),
    help="Also check a jobs file: its shapes and every invalid line.",
)
def validate(
    profile: str | None, as_json: bool, strict: bool, probe: bool, jobs_path: str | None
) -> None:
    """Check PROFILE before any money is spent: every problem at once, with its line and fix.

    PROFILE is a TOML file, or `demo` for the built-in simulated pool; without it, the profile
    `run` would use ($RRCLI_PROFILE, ./rrcli.toml, the XDG profile). Exit status: 0 ok,
    1 the profile has errors, 2 it is not a readable profile at all.
    """
    import json
    import os

    from rrcli import _render
    from rrcli.runtime.checks import validate as check

    jobs = Path(jobs_path) if jobs_path is not None else None
    report = check(profile, environ=os.environ, strict=strict, jobs=jobs, probe_backends=probe)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    elif not report.profile.readable:
        click.echo(f"rrcli: {report.profile.diagnostics[0]}", err=True)
    elif sys.stdout.isatty():
        _render.print_check(report)
    else:
        click.echo("\n".join(_render.check_lines(report)))
    sys.exit(report.exit_code)


@main.command()
@click.argument("path", default="rrcli.toml", type=click.Path(dir_okay=True))
@click.option(
    "--provider",
    type=click.Choice(NAMES),
    default=DEFAULT_PROVIDER,
    show_default=True,
    help="The provider of every backend in the starter pool.",
)
@click.option(
    "--backends",
    type=click.IntRange(1, 64),
    default=3,
    show_default=True,
    help="How many backends (one key each) the pool has.",
)
@click.option("--force", is_flag=True, help="Overwrite PATH if it exists.")
def init(path: str, provider: str, backends: int, force: bool) -> None:
    """Write a starter profile to PATH (default ./rrcli.toml) that validates as written."""
    from rrcli.config.starter import write_starter

    written = write_starter(Path(path), provider, backends, force)
    pool = f"{backends} {provider} backend" + ("s" if backends > 1 else "")
    click.echo(f"wrote {written} ({pool}); next: rrcli validate {written}")


@main.command()
@click.argument("traces", nargs=-1, required=True, metavar="TRACES...")
@click.option(
    "--by",
    type=click.Choice(["deployment", "model", "status", "error_type", "run", "endpoint"]),
    default="deployment",
    show_default=True,
    help="Group calls by deployment, model, HTTP status, error type, run or endpoint.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON (SPEC §10).")
@click.option("--plot", is_flag=True, help="Also draw calls in flight per deployment over time.")
@click.option(
    "--run",
    "runs",
    multiple=True,
    metavar="RUN_ID",
    help="Only this run (an id or a unique prefix of one); repeatable.",
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
    runs: tuple[str, ...],
    since: str | None,
) -> None:
    """Summarise trace files (- for standard input): per deployment calls, errors, latency,
    TTFT, tokens, cost and peak calls in flight."""
    import orjson

    from rrcli import _render
    from rrcli.stats.summary import summarize

    sources = [sys.stdin.buffer if t == "-" else t for t in traces]
    bins = _render.stats_plot_bins() if plot else None
    summary = summarize(sources, by=by, run=runs or None, since=since, timeline_bins=bins)
    if as_json:
        click.echo(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
    else:
        _render.render_stats(summary)
        if plot:
            _render.render_stats_plot(summary)
    if summary["malformed_lines"]:
        count = summary["malformed_lines"]
        click.echo(f"rrcli: {count} malformed trace line(s) skipped", err=True)


@main.command("export")
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


@main.command("results")
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
@_profile_option
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
    from rrcli.records.collect import collect_files
    from rrcli.runtime.queue_report import collect_queue

    target = None if out in (None, Path("-")) else out
    if bool(queue) == bool(sources or jobs_path):
        raise click.UsageError("give RESULTS files (and --jobs), or --queue NAME -p PROFILE")
    if queue is not None:
        report: Any = collect_queue(profile_path, queue, target, status)
    else:
        report = collect_files(sources, target, jobs=jobs_path, status=status)
    for line in report.lines(target, jobs_path):
        click.echo(line, err=True)
    sys.exit(report.exit_code)


@main.command("queue")
@click.argument("name")
@_profile_option
@click.option("--json", "as_json", is_flag=True, help="Print the progress as one JSON document.")
def queue_command(name: str, profile_path: str | None, as_json: bool) -> None:
    """Progress of the shared queue NAME: jobs, done, pending per worker, workers alive."""
    from rrcli.runtime.queue_report import queue_progress

    progress = queue_progress(profile_path, name)
    click.echo(progress.json() if as_json else "\n".join(progress.lines()))


@main.command("sim")
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


if __name__ == "__main__":
    main()
