"""What `pip install` puts on a machine: the man pages where `man` finds them, for a venv as
for a system-wide prefix (man looks in <prefix>/share/man beside each bin directory on PATH).

The wheel is built from a copy of the sources by pip, as a user's install builds it, and
installed under a fresh prefix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(p.name for p in (ROOT / "man").glob("rrcli*.[15]"))


def pip(*args: str | Path, cwd: Path) -> None:
    command = [sys.executable, "-m", "pip", *map(str, args), "--no-deps", "-q"]
    subprocess.run(command, cwd=cwd, check=True, capture_output=True, timeout=600)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds from the project's sources."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("rrcli", "man"):
        shutil.copytree(
            ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    pip("wheel", "-w", source / "dist", ".", cwd=source)
    [built] = (source / "dist").glob("rrcli-*.whl")
    return built


def test_the_wheel_carries_every_man_page_in_its_section(wheel):
    """Every page of man/ is in the wheel's data under share/man/man1 or man5."""
    names = zipfile.ZipFile(wheel).namelist()
    found = sorted(n.rsplit("/", 1)[1] for n in names if "/data/share/man/man" in n)
    assert PAGES == found
    assert all(f"/share/man/man{n[-1]}/{n}" in " ".join(names) for n in PAGES)


@pytest.fixture(scope="module")
def prefix(wheel, tmp_path_factory) -> Path:
    """The wheel installed under a fresh prefix (a venv, or /usr/local)."""
    prefix = tmp_path_factory.mktemp("prefix")
    # --ignore-installed: pip would otherwise uninstall the rrcli this suite runs from first
    pip("install", "--prefix", prefix, "--ignore-installed", wheel, cwd=prefix)
    return prefix


@pytest.mark.skipif(shutil.which("man") is None, reason="no man command here")
def test_man_finds_the_pages_of_a_fresh_install(prefix):
    """Installed under a fresh prefix with its bin on PATH (a venv, or /usr/local), `man -w`
    finds rrcli(1), rrcli-run(1) and rrcli-profile(5) there."""
    env = {k: v for k, v in os.environ.items() if k != "MANPATH"}
    env["PATH"] = f"{prefix / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
    for section, page in (("1", "rrcli"), ("1", "rrcli-run"), ("5", "rrcli-profile")):
        found = subprocess.run(["man", "-w", section, page], env=env, capture_output=True,
                               text=True, check=False)  # fmt: skip
        expected = prefix / "share" / "man" / f"man{section}" / f"{page}.{section}"
        assert (0, str(expected)) == (found.returncode, found.stdout.strip())


def test_rrcli_help_shows_the_installed_page(prefix):
    """The installed rrcli, with no checkout near it, finds rrcli-run(1) under the prefix's
    share/man and, piped, prints it as text."""
    purelib = sysconfig.get_path("purelib", vars={"base": prefix, "platbase": prefix})
    code = "import sys, rrcli.cli; print(rrcli.cli.__file__, file=sys.stderr); rrcli.cli.main()"
    env = {**os.environ, "PYTHONPATH": purelib}
    proc = subprocess.run([sys.executable, "-c", code, "help", "run"], env=env, cwd=prefix,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert (0, purelib) == (proc.returncode, str(Path(proc.stderr.strip()).parents[1]))
    assert "rrcli-run - send LLM jobs" in " ".join(proc.stdout.split())
    assert "--resume" in proc.stdout and ".TH" not in proc.stdout and "\\fB" not in proc.stdout
