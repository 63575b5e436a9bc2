"""Man pages cannot drift: every option of a command's --help is in its page, and every page
renders with groff without a warning.

Pages are discovered by file name: man/rrcli.1 is the top command, man/rrcli-<cmd>.1 the
command <cmd>. A command gets checked as soon as its page exists.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import click
import pytest

from rrcli.cli import main

MAN = Path(__file__).resolve().parent.parent / "man"
PAGES = sorted(MAN.glob("rrcli*.[15]"))
COMMAND_PAGES = sorted(MAN.glob("rrcli*.1"))


def command_for(page: Path) -> click.Command:
    name = page.stem.removeprefix("rrcli").removeprefix("-")
    return main.commands[name] if name else main


def options_of(command: click.Command) -> set[str]:
    ctx = click.Context(command, info_name=command.name)
    opts = set()
    for param in command.get_params(ctx):
        if isinstance(param, click.Option):
            opts.update(o for o in [*param.opts, *param.secondary_opts] if o.startswith("-"))
    return opts


def page_text(page: Path) -> str:
    """The page's source with roff's escaped hyphens made plain."""
    return page.read_text(encoding="utf-8").replace("\\-", "-")


def test_every_command_with_a_page_is_found():
    """rrcli, validate and init have pages; each page names a real command."""
    names = {p.stem for p in COMMAND_PAGES}
    assert {"rrcli", "rrcli-validate", "rrcli-init"} <= names
    for page in COMMAND_PAGES:
        assert command_for(page) is not None


@pytest.mark.parametrize("page", COMMAND_PAGES, ids=lambda p: p.name)
def test_every_help_option_is_in_the_page(page):
    """Each option that `--help` lists for the command appears in its man page."""
    text = page_text(page)
    missing = sorted(
        o for o in options_of(command_for(page)) if not re.search(rf"{re.escape(o)}\b", text)
    )
    assert [] == missing


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed (CI installs it)")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_renders_without_warnings(page):
    """`groff -man -ww -z` renders the page with no warning at all."""
    proc = subprocess.run(
        ["groff", "-man", "-ww", "-z", str(page)], capture_output=True, text=True, timeout=60
    )
    assert (0, "") == (proc.returncode, proc.stderr)


def test_profile_page_documents_every_key():
    """rrcli-profile(5) names every key of the schema."""
    from rrcli.config.schema import (
        BACKEND,
        CACHE,
        COOLDOWN,
        CREDENTIALS,
        GATE,
        HEALTH,
        QUEUE,
        RETRY,
        SERVE,
        SIM,
        TOP,
    )

    text = page_text(MAN / "rrcli-profile.5")
    keys = {*TOP, *BACKEND, *CREDENTIALS, *RETRY, *GATE, *COOLDOWN, *HEALTH, *CACHE, *SIM, *QUEUE}
    keys |= {*SERVE}
    assert [] == sorted(k for k in keys if k not in text)
