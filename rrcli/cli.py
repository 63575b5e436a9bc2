"""The ``rrcli`` command: parse options, call one core function, render, return an exit code.

Logic found in a command body belongs in the core. Heavy modules are imported inside the command
that needs them, so ``rrcli --help`` stays fast.
"""

from __future__ import annotations

import sys

import click

from rrcli import __version__
from rrcli.errors import RRCLIError


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
    from rrcli.stats import summarize

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


if __name__ == "__main__":
    main()
