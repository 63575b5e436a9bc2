"""rrcli's man pages wherever they are, and as text: ``rrcli help TOPIC``.

A checkout (and so an editable install) has them in ``man/`` beside the package; a wheel installs
them under ``<prefix>/share/man/man1`` and ``man5``, where ``man`` finds them. ``man_pages`` knows
both places; ``show`` pages one through ``man -l`` on a terminal, and otherwise writes plain text
(groff, else mandoc, else a small roff reader of ours) that pipes cleanly.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from rrcli.errors import UsageError

__all__ = ["as_text", "man_pages", "page_for", "roff_to_text", "show"]

PACKAGE = Path(__file__).resolve().parent


def _places() -> list[tuple[Path, ...]]:
    """The folders that may hold the pages, the checkout's first, then the install's."""
    # installed under a prefix: <prefix>/lib/pythonX.Y/site-packages/rrcli (Lib/site-packages)
    roots = [*PACKAGE.parents[1:4], Path(sysconfig.get_path("data")), Path(sys.prefix)]
    user = sysconfig.get_preferred_scheme("user")
    roots.append(Path(sysconfig.get_path("data", user)))
    installed = [(r / "share/man/man1", r / "share/man/man5") for r in roots]
    return [(PACKAGE.parent / "man",), *installed]


def _rrcli_first(page: Path) -> tuple[bool, str]:
    return page.stem != "rrcli", page.stem


def man_pages() -> dict[str, Path]:
    """Each topic and its page: ``run`` is rrcli-run(1), ``profile`` rrcli-profile(5), ``rrcli``
    rrcli(1). The first place that has rrcli(1) answers, so a checkout's pages never mix with
    an older install's."""
    for folders in _places():
        if (folders[0] / "rrcli.1").is_file():
            pages = sorted((p for f in folders for p in f.glob("rrcli*.[15]")), key=_rrcli_first)
            return {p.stem.removeprefix("rrcli-"): p for p in pages}
    return {}


def page_for(topic: str, pages: dict[str, Path] | None = None) -> Path:
    """The page of ``topic``; a UsageError naming the topics when it has none."""
    pages = man_pages() if pages is None else pages
    if not pages:
        raise UsageError(
            "the man pages are not installed here; read them in the man/ folder of the sources"
        )
    if topic not in pages:
        raise UsageError(f"no page for {topic!r}; topics: {', '.join(pages)}")
    return pages[topic]


def topics_text(pages: dict[str, Path]) -> str:
    """The topics, one a line with its page: ``run  rrcli-run(1)``."""
    width = max(map(len, pages), default=0)
    lines = [f"{t:<{width}}  {p.stem}({p.suffix[1:]})" for t, p in pages.items()]
    return "\n".join(["rrcli help TOPIC shows the page of TOPIC:", *lines])


#: the renderers tried in order: each prints plain text of a page given after its arguments
RENDERERS = (("groff", "-man", "-Tutf8", "-rHY=0", "-P", "-c"), ("mandoc", "-Tutf8"))


def as_text(page: Path, which: Callable[[str], str | None] = shutil.which) -> str:
    """The page as plain text: groff or mandoc when found, else ``roff_to_text``."""
    for command in RENDERERS:
        if which(command[0]) is None:
            continue
        proc = subprocess.run([*command, str(page)], capture_output=True, check=False)
        if proc.returncode == 0:
            # both set bold and underline by overstriking: keep the letters
            return re.sub(r".\x08", "", proc.stdout.decode("utf-8", "replace"))
    return roff_to_text(page.read_text(encoding="utf-8"))


_ESCAPES = {
    r"\-": "-", r"\e": "\\", r"\&": "", r"\(dq": '"', r"\(lq": "\u201c", r"\(rq": "\u201d",
    r"\(aq": "'", r"\(em": "\u2014", r"\(en": "\u2013", r"\(mu": "\u00d7", r"\(bu": "\u2022",
    r"\(>=": "\u2265", r"\(<=": "\u2264", r"\(<>": "\u2260", r"\(->": "\u2192",
    r"\ ": " ", r"\~": " ", r"\|": "", r"\^": "",
}  # fmt: skip
#: a font change, one of the escapes above, or any other special character (dropped)
_ESCAPE = re.compile(r"\\f(?:\(..|\[[^]]*\]|.)|" + "|".join(map(re.escape, _ESCAPES)) + r"|\\\(..")
_ALTERNATING = {"BR", "RB", "BI", "IB", "IR", "RI"}


def _inline(text: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(), ""), text)


def _arguments(rest: str) -> list[str]:
    return [a.strip('"') for a in re.findall(r'"[^"]*"|(?:\\.|\S)+', rest)]


def roff_to_text(source: str) -> str:
    """A man page's text without its requests: headings flush left, paragraphs filled to 78
    columns, a .TP tag above its indented body. Enough for our own pages where neither groff
    nor mandoc is installed; not a roff."""
    out: list[str] = []
    para: list[str] = []
    state = {"indent": 7, "verbatim": False, "tag": False}

    def flush() -> None:
        pad = " " * state["indent"]
        out.extend(textwrap.wrap(" ".join(para), 78, initial_indent=pad, subsequent_indent=pad,
                                 break_on_hyphens=False))  # fmt: skip
        para.clear()

    for line in source.splitlines():
        if line.startswith('.\\"'):
            continue
        if line.startswith("."):
            name, _, rest = line[1:].partition(" ")
            args = _arguments(rest)
            if name in ("B", "I") or name in _ALTERNATING:
                line = (" " if name in ("B", "I") else "").join(args)
            else:
                flush()
                if name in ("SH", "SS", "PP", "P", "LP", "TP"):
                    state.update(indent=7, tag=name == "TP")
                    out.append("")
                if name in ("SH", "SS"):
                    out.append(("" if name == "SH" else "   ") + _inline(" ".join(args)))
                elif name in ("nf", "EX", "fi", "EE"):
                    state["verbatim"] = name in ("nf", "EX")
                continue
        text = _inline(line)
        if state["verbatim"]:
            out.append(" " * state["indent"] + text)
        elif state["tag"]:
            out.append("       " + text)
            state.update(indent=14, tag=False)
        else:
            para.append(text)
    flush()
    return "\n".join(out).strip("\n") + "\n"


def show(topic: str | None, stdout: TextIO) -> int:
    """``rrcli help [TOPIC]``: the topics, or the page, paged by ``man -l`` on a terminal and
    written as plain text elsewhere. Returns the exit status."""
    pages = man_pages()
    if topic is None:
        page_for("rrcli", pages)  # none installed: say so
        stdout.write(topics_text(pages) + "\n")
        return 0
    page = page_for(topic, pages)
    if stdout.isatty() and shutil.which("man") is not None:
        stdout.flush()
        return subprocess.run(["man", "-l", str(page)], check=False).returncode
    stdout.write(as_text(page))
    return 0
