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
from rrcli._commands import COMMANDS, profile_option
from rrcli.config.profile import CACHE_MODES, DEFAULT_PROVIDER
from rrcli.errors import RRCLIError, UsageError
from rrcli.registry import NAMES


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
    from rrcli.running.options import parse_shard

    try:
        return None if value is None else parse_shard(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc)) from None


@main.command()
@click.argument("jobs", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--prompt", "prompts", multiple=True, help="A one-off prompt (repeatable); prints the answer."
)
@profile_option
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
@click.option("--overwrite", is_flag=True, help="Replace an existing results file, and its traces.")
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
@click.option(
    "--progress",
    "progress_s",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="Off a terminal, log a progress line this often (0: never).",
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
    progress_s: float,
    quiet: bool,
    verbose: bool,
    log_format: str,
    **fields: Any,
) -> None:
    """Send JOBS (a .jsonl file, or - for standard input) across the profile's pool."""
    import os

    from rrcli._logging import configure_logging, log_level
    from rrcli.config.load import load_profile, resolve_profile_path
    from rrcli.running.runner import RunControl, RunOptions, run_sync

    if bool(jobs) == bool(prompts) and fields["queue"] is None:
        raise click.UsageError("give a JOBS file or --prompt TEXT (one of the two)")
    tty = sys.stderr.isatty()
    configure_logging(level=log_level(verbose=verbose, quiet=quiet, tty=tty), fmt=log_format)
    profile = load_profile(resolve_profile_path(profile_path, os.environ), environ=os.environ)
    stream = fields["stream"]
    answers = _prompt_printer(stream) if (prompts and not fields["out"]) else None
    options = RunOptions(  # the other options are RunOptions fields by name
        jobs=None if jobs is None or (jobs == "-" and not fields["queue"]) else Path(jobs),
        prompts=prompts,
        on_text=answers.text if (answers and stream) else None,
        on_result=answers.result if answers else None,
        **fields,
    ).with_defaults()
    if dry_run:
        _print_plan(profile, options)
        return
    control = RunControl()
    with _watcher(tty and not quiet and answers is None, quiet, progress_s) as display:
        summary = run_sync(
            profile,
            options,
            environ=os.environ,
            on_start=lambda summary, engine: display.start(summary, engine.status),
            control=control,
        )
    if not quiet and answers is None:
        from rrcli import _render

        _render.print_summary(summary, options.out_file, options.traces)
    if summary.halted is not None:  # shown even with -q: the run did not finish
        click.echo(f"rrcli: {summary.halted.message}", err=True)
    sys.exit(summary.exit_code)


def _print_plan(profile: Any, options: Any) -> None:
    import asyncio

    from rrcli import _render
    from rrcli.running.plan import plan

    _render.print_plan(profile, asyncio.run(plan(profile, options)), options.traces)


def _prompt_printer(stream: bool) -> Any:
    from rrcli import _render

    return _render.PromptPrinter(stream=stream)


def _watcher(live: bool, quiet: bool, progress_s: float) -> Any:
    """What shows the run's progress: the live display on a terminal, else (unless -q) a
    progress line every ``progress_s`` seconds; ``-q`` off a terminal shows none (and loads
    no display)."""
    from rrcli._logging import ProgressLines

    if live:
        from rrcli import _render

        return _render.RunDisplay(enabled=live)
    return ProgressLines(0 if quiet else progress_s)


@main.command()
@click.argument("profile", metavar="[PROFILE]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document.")
@click.option("--strict", is_flag=True, help="Treat warnings as errors (e.g. a literal api_key).")
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
    from rrcli.running.checks import validate as check

    jobs = Path(jobs_path) if jobs_path is not None else None
    report = check(profile, environ=os.environ, strict=strict, jobs=jobs, probe_backends=probe)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    elif not report.profile.readable:
        click.echo(f"rrcli: {report.profile.diagnostics[0]}", err=True)
    elif sys.stdout.isatty():
        _render.print_check(report)
    else:
        click.echo("\n".join(report.lines()))
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
    """Write a starter profile to PATH (default ./rrcli.toml); it validates once the key
    variables it names are exported, and init names those still unset."""
    import os

    from rrcli.config.starter import next_step, write_starter

    written = write_starter(Path(path), provider, backends, force)
    click.echo(next_step(written, provider, backends, os.environ))


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the script that completes rrcli's commands, options and files in SHELL. Load it
    from your shell's start-up file: eval "$(rrcli completion bash)" in ~/.bashrc,
    eval "$(rrcli completion zsh)" in ~/.zshrc, rrcli completion fish | source in
    ~/.config/fish/config.fish."""
    from click.shell_completion import get_completion_class

    script = get_completion_class(shell)(main, {}, "rrcli", "_RRCLI_COMPLETE")  # type: ignore[misc]
    click.echo(script.source())


for _command in COMMANDS:
    main.add_command(_command)

if __name__ == "__main__":
    main()
