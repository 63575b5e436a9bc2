"""The documentation cannot drift: the generated references are what `python docs/generate.py`
writes today, every key of the profile schema has its meaning written down, and the site builds
with `mkdocs build --strict` (no broken link or anchor, no page left out of the navigation)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def generate_module():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_regenerating_the_references_changes_nothing():
    """`python docs/generate.py --check` finds the profile page, its man page, the CLI page and
    the SYNOPSIS and OPTIONS of every command's man page as it would write them."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert (0, "") == (done.returncode, done.stderr)


def test_every_schema_key_has_its_meaning_and_no_more():
    """keys.toml and the schema agree: each key of the schema has an entry, each entry names a
    key of the schema."""
    generate = generate_module()
    assert [] == generate.check_coverage(generate.load_keys())


def test_the_cli_reference_is_each_commands_help():
    """The CLI page holds `rrcli run --help` as click prints it, option for option."""
    from click.testing import CliRunner

    from rrcli.cli import main

    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    shown = CliRunner().invoke(main, ["run", "--help"], terminal_width=100).output
    options = [line.split()[0] for line in shown.splitlines() if line.startswith("  -")]
    section = page.split("## rrcli run\n", 1)[1].split("\n## ", 1)[0]
    assert [] == [o for o in options if o not in section]


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    """`mkdocs build --strict` succeeds: every link and anchor resolves, every page is in the nav,
    the API reference is read from the docstrings. (Not -q: it hides the warnings that --strict
    counts, and a broken link would pass.)"""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]' (CI installs it)")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert 0 == done.returncode, done.stderr[-3000:]
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="rrcli.pool.pool.Pool.chat"' in api
