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


if __name__ == "__main__":
    main()


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
    from rrcli.sim import check_host, config_from_options, serve

    explicit = ctx.get_parameter_source("host") is not click.core.ParameterSource.DEFAULT
    check_host(host, explicit=explicit)
    try:
        serve(config_from_options(**options), host, port, echo=lambda s: click.echo(s, err=False))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
