"""The terminal captures in docs/screens/ are what the commands show today: taken afresh on a
pseudo-terminal at 80 and 160 columns (tests/screens.py), the stats screens equal the files
(their trace is made from a fixed seed) and the run's have their shape (the numbers of a live
run are timings). `python tests/screens.py` writes them again after a change of the output."""

from __future__ import annotations

import pytest
from screens import SCREENS, capture, shape


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> dict[str, str]:
    return capture(tmp_path_factory.mktemp("screens"))


def test_every_capture_is_in_docs(fresh):
    """docs/screens/ holds exactly the captures the script takes, each with its command."""
    assert sorted(fresh) == sorted(p.name for p in SCREENS.glob("*.txt"))
    assert all(text.startswith("$ rrcli ") for text in fresh.values())


def test_stats_screens_are_current(fresh):
    """`rrcli stats` and `stats --plot` at 80 and 160 columns (and --wide at 160) print what
    docs/screens/ shows, character for character; at 80 no line is wider than 80."""
    for name, text in fresh.items():
        if name.startswith("stats"):
            assert (SCREENS / name).read_text() == text, f"{name}: run python tests/screens.py"
    assert all(len(line) <= 80 for line in fresh["stats-plot-80.txt"].splitlines())


def test_run_screens_have_the_shape_in_docs(fresh):
    """`rrcli run`'s live display halfway and at the end, at 80 and 160 columns: the lines
    and words docs/screens/ shows, numbers aside; its totals are the run's 300 jobs."""
    for width in (80, 160):
        name = f"run-{width}.txt"
        assert shape((SCREENS / name).read_text()) == shape(fresh[name]), name
        assert "jobs 300/300" in fresh[name]
