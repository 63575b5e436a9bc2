"""What a user reads states rrcli's behaviour in its own words (no "SPEC §…", a file users do
not have), documents every exit status, and offers shell completion."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rrcli.cli import main

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"\bSPEC\b(?:\.md)?(?: ?§ ?\d+)?|(?i:departs from)")


def every_command(group: click.Group, prefix: tuple[str, ...] = ()):
    """(args, command) for the group and each command under it, subcommands included."""
    yield prefix, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from every_command(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_readme_man_pages_and_help_cite_no_spec():
    """The README, every man page and every command's --help say what rrcli does, never
    "SPEC §N" or how it departs from a spec."""
    texts = {"README.md": (ROOT / "README.md").read_text()}
    texts |= {p.name: p.read_text() for p in sorted((ROOT / "man").glob("rrcli*.[15]"))}
    for args, _ in every_command(main):
        texts[f"rrcli {' '.join(args)} --help"] = CliRunner().invoke(main, [*args, "--help"]).output
    cited = {name: CITATION.findall(text) for name, text in texts.items()}
    assert {} == {name: found for name, found in cited.items() if found}


def test_rrcli_1_documents_every_exit_status():
    """rrcli(1) lists 0, 1, 2, 3 (a budget reached) and 130 (interrupted) under EXIT STATUS."""
    page = (ROOT / "man" / "rrcli.1").read_text()
    section = page.split(".SH EXIT STATUS", 1)[1].split(".SH", 1)[0]
    listed = set(re.findall(r"^\.B (\d+)$", section, re.MULTILINE))
    assert {"0", "1", "2", "3", "130"} == listed & {"0", "1", "2", "3", "130"}


@pytest.fixture
def on_path(tmp_path) -> dict[str, str]:
    """An environment whose PATH has an `rrcli` that is this worktree's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "rrcli"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rrcli "$@"\n')
    shim.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT)}


def test_bash_completion_completes_commands_and_options(on_path):
    """`eval "$(rrcli completion bash)"` in bash completes `rrcli ru` to run and
    `rrcli run --form` to --format."""
    script = """
        eval "$(rrcli completion bash)"
        complete_words() { COMPREPLY=(); COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1));
                           _rrcli_completion rrcli;
                           echo "${COMPREPLY[*]}"; }
        complete_words rrcli ru
        complete_words rrcli run --form
    """
    done = subprocess.run(["bash", "-c", script], env=on_path, capture_output=True, text=True)
    assert (0, ["run", "--format"]) == (done.returncode, done.stdout.split())


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_completion_scripts_call_rrcli_back(shell, on_path):
    """`rrcli completion zsh|fish` prints the script that asks rrcli for completions in that
    shell's protocol; an unknown shell is a usage error naming the three."""
    done = subprocess.run(["rrcli", "completion", shell], env=on_path, capture_output=True,
                          text=True)  # fmt: skip
    assert 0 == done.returncode
    assert f"_RRCLI_COMPLETE={shell}_complete" in done.stdout
    wrong = subprocess.run(["rrcli", "completion", "tcsh"], env=on_path, capture_output=True,
                           text=True)  # fmt: skip
    assert 2 == wrong.returncode and "'bash', 'zsh', 'fish'" in wrong.stderr
