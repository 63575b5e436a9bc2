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


if __name__ == "__main__":
    main()
