"""The package installs and its command answers."""

from click.testing import CliRunner

from rrcli import __version__
from rrcli.cli import main


def test_version():
    """`rrcli --version` prints the package version."""
    result = CliRunner().invoke(main, ["--version"])
    assert 0 == result.exit_code
    assert __version__ in result.output
