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
@click.argument("profile", metavar="PROFILE")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document.")
@click.option(
    "--strict", is_flag=True, help="Treat warnings as errors (e.g. an unset api_key_env)."
)
def validate(profile: str, as_json: bool, strict: bool) -> None:
    """Check PROFILE before any money is spent: every problem at once, with its line and fix.

    PROFILE is a TOML file, or `demo` for the built-in simulated pool. Exit status: 0 ok,
    1 the profile has errors, 2 it is not a readable profile at all.
    """
    import json
    import os

    from rrcli.profile import resolve_profile_path, validate_profile

    report = validate_profile(resolve_profile_path(profile, os.environ), strict=strict)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    elif not report.readable:
        click.echo(f"rrcli: {report.diagnostics[0]}", err=True)
    elif sys.stdout.isatty():
        from rrcli._render import print_validation

        print_validation(report)
    else:
        click.echo("\n".join(report.plain_lines()))
    sys.exit(report.exit_code)


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

    from rrcli.init import write_starter

    written = write_starter(Path(path), provider, backends, force)
    pool = f"{backends} {provider} backend" + ("s" if backends > 1 else "")
    click.echo(f"wrote {written} ({pool}); next: rrcli validate {written}")


if __name__ == "__main__":
    main()
