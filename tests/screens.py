"""The terminal captures in docs/screens/: what `rrcli run` (its live display), `rrcli stats` and
`rrcli stats --plot` show at 80 and 160 columns, taken on a pseudo-terminal.

`python tests/screens.py` writes them again; tests/test_screens.py takes them afresh and
compares them with the files: the stats screens exactly (they read a synthetic trace made from a
fixed seed), the run's by shape (its numbers are timings).
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from runkit import Terminal, write_jobs  # noqa: E402
from stats_tracegen import lines, run_records  # noqa: E402

SCREENS = ROOT / "docs" / "screens"
WIDTHS = (80, 160)
RUN_ID = "20261201T204943Z-d8c6a81d"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_ERASE = re.compile(r"\r?\x1b\[2K(?:\x1b\[1A\x1b\[2K)*")
_HEAD = re.compile(r"jobs ([\d,]+)/([\d,]+)")
STATS = {
    "stats": ("stats", "jobs.traces.jsonl"),
    "stats-plot": ("stats", "jobs.traces.jsonl", "--plot"),
}


def plain(text: str) -> str:
    """Terminal output as the lines a reader sees: styles gone, line ends bare, no trailing
    blanks."""
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n") + "\n"


def run_screen(folder: Path, width: int) -> str:
    """`rrcli run` of 300 jobs on the demo pool, four at a time (so it takes a few seconds):
    the live display's frame nearest half done,
    then its last frame and the closing line, as the terminal last showed them."""
    jobs = write_jobs(folder / "jobs.jsonl", 300)
    args = ("run", jobs.name, "-p", "demo", "--concurrency", "4", "--seed", "1", "--overwrite")
    terminal = Terminal(*args, cwd=folder, env={"COLUMNS": str(width), "LINES": "45"})
    terminal.finish()
    frames = [frame for frame in _ERASE.split(terminal.text) if _HEAD.search(_ANSI.sub("", frame))]

    def distance(frame: str) -> int:
        done, total = (int(n.replace(",", "")) for n in _HEAD.search(_ANSI.sub("", frame)).groups())
        return abs(2 * done - total)

    middle = min(frames, key=distance)
    command = f"$ rrcli {' '.join(args[:-1])}"
    return (
        f"{command}      # halfway\n{plain(middle)}\n{command}      # at the end\n"
        f"{plain(frames[-1])}"
    )


def stats_traces(folder: Path) -> Path:
    """A synthetic trace of 300 jobs on three backends (tests/stats_tracegen.py, seed 7)."""
    path = folder / "jobs.traces.jsonl"
    path.write_bytes(lines(run_records(RUN_ID, jobs=300, start_ms=1_767_000_000_000, seed=7)))
    return path


def stats_screen(folder: Path, width: int, args: tuple[str, ...]) -> str:
    terminal = Terminal(*args, cwd=folder, env={"COLUMNS": str(width), "LINES": "45"})
    assert 0 == terminal.finish()
    return f"$ rrcli {' '.join(args)}\n{plain(terminal.text)}"


def capture(folder: Path) -> dict[str, str]:
    """Every screen, by file name."""
    screens = {}
    stats_traces(folder)
    wide = ("stats", "jobs.traces.jsonl", "--wide")
    for width in WIDTHS:
        screens[f"stats-wide-{width}.txt"] = stats_screen(folder, width, wide)
        for name, args in STATS.items():
            screens[f"{name}-{width}.txt"] = stats_screen(folder, width, args)
        run_folder = folder / f"run-{width}"
        run_folder.mkdir()
        screens[f"run-{width}.txt"] = run_screen(run_folder, width)
    return screens


def shape(text: str) -> list[list[str]]:
    """A screen without its timings: numbers as #, whitespace and a backend's passing
    ``cooling`` mark ignored."""
    words = (re.sub(r"\d[\d,.]*", "#", line).split() for line in text.splitlines())
    return [[w for w in line if w not in ("cooling",)] for line in words if line]


if __name__ == "__main__":
    SCREENS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        for name, text in capture(Path(folder)).items():
            (SCREENS / name).write_text(text)
            print(f"wrote {SCREENS / name}")
