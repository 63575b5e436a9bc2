"""`rrcli help TOPIC` shows a man page from a checkout (an editable install) as plain text when
piped, with or without groff; an unknown topic exits 2 naming the topics."""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROFF = re.compile(r"^\s*\.(TH|SH|TP|B)\b|\\f[BIRP]|\\-", re.MULTILINE)


def rrcli_help(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if path is not None:
        env["PATH"] = path
    command = [sys.executable, "-m", "rrcli", "help", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def words(text: str) -> str:
    """The text with its runs of blanks (groff justifies lines) made single spaces."""
    return " ".join(text.split())


def assert_is_the_run_page(text: str) -> None:
    assert "rrcli-run - send LLM jobs across a pool of backends" in words(text)
    assert "--max-cost" in text and "--resume" in text
    assert [] == ROFF.findall(text)


def test_help_run_piped_prints_the_page_as_text():
    """Piped, `rrcli help run` prints rrcli-run(1)'s NAME and options, no roff requests."""
    proc = rrcli_help("run")
    assert (0, "") == (proc.returncode, proc.stderr)
    assert_is_the_run_page(proc.stdout)


def test_help_run_reads_the_page_without_groff_or_mandoc(tmp_path):
    """With neither groff nor mandoc on PATH, the page is still plain text, not its source."""
    proc = rrcli_help("run", path=str(tmp_path))
    assert 0 == proc.returncode
    assert_is_the_run_page(proc.stdout)


def test_help_profile_shows_the_file_format_page():
    """`rrcli help profile` is rrcli-profile(5)."""
    proc = rrcli_help("profile")
    assert 0 == proc.returncode
    assert "rrcli-profile - the TOML profile of rrcli" in words(proc.stdout)


def test_help_lists_the_topics():
    """Without a topic, every page is listed: commands and file formats."""
    proc = rrcli_help()
    assert 0 == proc.returncode
    listed = set(re.findall(r"^(\S+) +rrcli", proc.stdout, re.MULTILINE))
    pages = {p.stem.removeprefix("rrcli-") for p in (ROOT / "man").glob("rrcli*.[15]")}
    assert pages == listed
    assert {"run", "serve", "profile", "jobs", "traces"} <= listed


def test_unknown_topic_exits_2_naming_the_topics():
    """`rrcli help nope` exits 2 and names the topics there are."""
    proc = rrcli_help("nope")
    assert 2 == proc.returncode
    assert ("", "rrcli: no page for 'nope'; topics: rrcli, batches,") == (
        proc.stdout,
        proc.stderr[:50],
    )
    assert "profile, queue, results, run, serve" in proc.stderr


@pytest.mark.skipif(shutil.which("man") is None, reason="no man command here")
def test_help_on_a_terminal_pages_through_man():
    """On a terminal `rrcli help run` hands the page to `man -l`, which pages it with its
    MANPAGER."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MANPAGER": "sh -c 'echo PAGED; cat'"}
    command = [sys.executable, "-m", "rrcli", "help", "run"]
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(command, env=env, stdin=terminal, stdout=terminal, stderr=terminal)
    os.close(terminal)
    out = b""
    while chunk := _read(controller):
        out += chunk
    os.close(controller)
    assert 0 == proc.wait(timeout=60)
    text = re.sub(r".\x08", "", out.decode("utf-8", "replace"))
    assert text.startswith("PAGED") and "send LLM jobs across a pool" in words(text)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # the terminal closed when the command ended
        return b""
