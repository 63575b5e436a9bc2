"""The ``rrcli`` command: parse options, call one core function, render, return an exit code.

Logic found in a command body belongs in the core. Heavy modules are imported inside the command
that needs them, so ``rrcli --help`` stays fast.
"""

from __future__ import annotations

import sys

import click

from rrcli import __version__
from rrcli.errors import RRCLIError, UsageError


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
    if value is None:
        return None
    try:
        index, count = (int(x) for x in value.split("/"))
    except ValueError:
        raise click.BadParameter("expected I/N, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise click.BadParameter(f"expected 0 <= I < N, got {value}")
    return index, count


@main.command()
@click.argument("jobs", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--prompt", "prompts", multiple=True, help="A one-off prompt (repeatable); prints the answer."
)
@click.option(
    "-p", "--profile", "profile_path", help="Profile file, or `demo` for the built-in pool."
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="Results file [default: <JOBS stem>.results.jsonl].",
)
@click.option(
    "--traces",
    type=click.Path(dir_okay=False),
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
@click.option("--dry-run", is_flag=True, help="Parse, validate and route on paper; send nothing.")
@click.option("--stream", is_flag=True, help="Stream responses (records time to first token).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("-v", "--verbose", is_flag=True, help="Log every call.")
@click.option(
    "--log-format",
    type=click.Choice(["console", "json"]),
    default="console",
    show_default=True,
    help="Log line format when not on a terminal.",
)
def run(
    jobs: str | None,
    prompts: tuple[str, ...],
    profile_path: str | None,
    out: str | None,
    traces: str | None,
    concurrency: int | None,
    resume: bool,
    overwrite: bool,
    fmt: str,
    limit: int | None,
    shard: tuple[int, int] | None,
    seed: int | None,
    dry_run: bool,
    stream: bool,
    quiet: bool,
    verbose: bool,
    log_format: str,
) -> None:
    """Send JOBS (a .jsonl file, or - for standard input) across the profile's pool."""
    import os
    from pathlib import Path

    from rrcli import _render
    from rrcli._logging import configure_logging
    from rrcli.config.profile import load_profile, resolve_profile_path
    from rrcli.run.plan import plan
    from rrcli.run.runner import RunOptions, run_sync

    if bool(jobs) == bool(prompts):
        raise click.UsageError("give a JOBS file or --prompt TEXT (one of the two)")
    if resume and overwrite:
        raise click.UsageError("--resume and --overwrite exclude each other")
    tty = sys.stderr.isatty() and not quiet
    level = "error" if (quiet or tty) else ("debug" if verbose else "info")
    configure_logging(level=level, fmt=log_format)
    profile = load_profile(resolve_profile_path(profile_path, os.environ), environ=os.environ)
    jobs_path = None if (jobs in (None, "-")) else Path(jobs)
    stem = jobs_path.stem if jobs_path else "stdin"
    out_path = Path(out) if out else (Path(f"{stem}.results.jsonl") if jobs else None)
    trace_path = Path(traces) if traces else (Path(f"{stem}.traces.jsonl") if jobs else None)
    answers = _render.PromptPrinter(stream=stream) if (prompts and out_path is None) else None
    options = RunOptions(
        jobs=jobs_path,
        out=out_path,
        traces=trace_path,
        fmt=fmt,
        resume=resume,
        overwrite=overwrite,
        concurrency=concurrency,
        limit=limit,
        shard=shard,
        seed=seed,
        stream=stream,
        prompts=prompts,
        on_text=answers.text if (answers and stream) else None,
        on_result=answers.result if answers else None,
    )
    if dry_run:
        import asyncio

        _render.print_plan(profile, asyncio.run(plan(profile, options)))
        return
    with _render.RunDisplay(enabled=tty and answers is None) as display:
        summary = run_sync(profile, options, environ=os.environ, on_start=display.start)
    if not quiet and answers is None:
        _render.print_summary(summary, out_path, trace_path)
    sys.exit(summary.exit_code)


@main.command()
@click.argument("profile", metavar="PROFILE")
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
def validate(profile: str, as_json: bool, strict: bool, probe: bool, jobs_path: str | None) -> None:
    """Check PROFILE before any money is spent: every problem at once, with its line and fix.

    PROFILE is a TOML file, or `demo` for the built-in simulated pool. Exit status: 0 ok,
    1 the profile has errors, 2 it is not a readable profile at all.
    """
    import json
    import os

    from rrcli.config.profile import resolve_profile_path, validate_profile

    report = validate_profile(resolve_profile_path(profile, os.environ), strict=strict)
    document = report.as_dict()
    extra_lines: list[str] = []
    failed = False
    if jobs_path is not None:
        from pathlib import Path

        from rrcli._render import jobs_report_lines
        from rrcli.run.checks import check_jobs

        jobs_report = check_jobs(Path(jobs_path))
        document["jobs"] = jobs_report.as_dict()
        extra_lines += jobs_report_lines(jobs_report)
        failed |= bool(jobs_report.invalid)
    if probe and report.ok and report.profile is not None:
        import asyncio

        from rrcli._render import probe_lines
        from rrcli.run.checks import probe as probe_backends

        results = asyncio.run(probe_backends(report.profile, os.environ))
        document["probe"] = [_probe_dict(r) for r in results]
        extra_lines += probe_lines(results)
        failed |= not all(r.ok for r in results)
    if as_json:
        document["ok"] = document["ok"] and not failed
        click.echo(json.dumps(document, indent=2))
    elif not report.readable:
        click.echo(f"rrcli: {report.diagnostics[0]}", err=True)
    else:
        if sys.stdout.isatty():
            from rrcli._render import print_validation

            print_validation(report)
        else:
            click.echo("\n".join(report.plain_lines()))
        for line in extra_lines:
            click.echo(line)
    sys.exit(report.exit_code or (1 if failed else 0))


def _probe_dict(result: object) -> dict[str, object]:
    from dataclasses import asdict

    return asdict(result)  # type: ignore[call-overload]


@main.command()
@click.argument("path", default="rrcli.toml", type=click.Path(dir_okay=True))
@click.option(
    "--provider",
    type=click.Choice(["openai", "anthropic", "sim"]),
    default="openai",
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
    from pathlib import Path

    from rrcli.config.starter import write_starter

    written = write_starter(Path(path), provider, backends, force)
    pool = f"{backends} {provider} backend" + ("s" if backends > 1 else "")
    click.echo(f"wrote {written} ({pool}); next: rrcli validate {written}")


@main.command()
@click.argument("traces", nargs=-1, required=True, metavar="TRACES...")
@click.option(
    "--by",
    type=click.Choice(["deployment", "model", "status", "error_type", "run"]),
    default="deployment",
    show_default=True,
    help="Group calls by deployment, model, HTTP status, error type or run.",
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
