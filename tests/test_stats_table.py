"""`rrcli stats` as a user reads it: a table that fits 80 columns on a terminal, never a cut
number (on a terminal, piped, or as JSON), columns by --wide and --columns, and the runs it
read, picked by --run latest."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from runkit import Terminal, rrcli
from stats_tracegen import POOL, SimBackend, lines, run_records

from rrcli.stats.cells import COLUMNS, DEFAULT, short

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LONG_RUN = "20261201T204943Z-d8c6a81d"


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    """Two runs in one file, as two runs appended to one trace file leave it."""
    path = tmp_path_factory.mktemp("table") / "jobs.traces.jsonl"
    first = lines(run_records("run-x", jobs=90, start_ms=1_767_000_000_000, seed=7))
    second = lines(run_records(LONG_RUN, jobs=2000, start_ms=1_767_000_100_000, seed=8))
    path.write_bytes(first + second)
    return path


def screen(*args: str | Path, cwd: Path, columns: int) -> list[str]:
    """What the command prints on a terminal ``columns`` wide, a line a row, styles removed."""
    terminal = Terminal(*args, cwd=cwd, env={"COLUMNS": str(columns)})
    assert 0 == terminal.finish()
    return ANSI.sub("", terminal.text).replace("\r", "").splitlines()


def summary(traces: Path, *args: str) -> dict:
    result = rrcli("stats", traces, "--json", *args, cwd=traces.parent)
    assert 0 == result.returncode, result.stderr
    return json.loads(result.stdout)


def rows(text: list[str], keys: list[str]) -> dict[str, list[str]]:
    """The cells of each row whose first cell is one of ``keys``."""
    found = {}
    for line in text:
        cells = line.split()
        if cells and cells[0] in keys:
            found[cells[0]] = cells[1:]
    return found


def expected(group: dict, names: list[str]) -> list[str]:
    """The cells of the columns ``names`` for ``group``, split at spaces as ``rows`` splits."""
    by_name = {column.name: column for column in COLUMNS}
    return " ".join(by_name[name].cell(group) for name in names).split()


@pytest.mark.parametrize("columns", [80, 120])
def test_default_table_fits_the_terminal_and_cuts_no_number(traces, columns):
    """At 80 and 120 columns every line of `rrcli stats` fits, no cell is cut (no ellipsis),
    and every row's cells are the --json numbers, rounded: the default columns in order."""
    text = screen("stats", traces, cwd=traces.parent, columns=columns)
    numbers = summary(traces)
    assert [] == [line for line in text if len(line) > columns]
    assert [] == [line for line in text if "…" in line]
    names = [column.name for column in DEFAULT]
    keys = [g["key"] for g in numbers["groups"]] + ["total"]
    want = {g["key"]: expected(g, names) for g in [*numbers["groups"], numbers["total"]]}
    assert want == rows(text, keys)


def test_a_narrow_terminal_leaves_out_whole_columns_and_names_them(tmp_path):
    """A long deployment name at 80 columns: the key wraps, the lowest ranked default columns
    are left out and named under the table, and the columns shown are whole."""
    pool = tuple(
        SimBackend(b.id + "-with-a-long-name-east-2", b.model, b.max_concurrency, b.latency_ms)
        for b in POOL
    )
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        lines(run_records("r", jobs=300, start_ms=1_767_000_000_000, seed=3, pool=pool))
    )
    text = screen("stats", path, cwd=tmp_path, columns=80)
    assert [] == [line for line in text if len(line) > 80 or "…" in line]
    [note] = [line.split("not shown: ")[1] for line in text if "not shown: " in line]
    hidden = note.split(" (")[0].split(", ")
    ranked = sorted(DEFAULT, key=lambda column: column.rank)
    assert [column.name for column in ranked[len(ranked) - len(hidden) :]][::-1] == hidden[::-1]
    numbers = summary(path)
    shown = [column.name for column in DEFAULT if column.name not in hidden]
    assert {"total": expected(numbers["total"], shown)} == rows(text, ["total"])


def test_piped_by_run_draws_every_cell_whole(traces):
    """Piped, `--by run` with 25-character run ids, COLUMNS=60 in the environment: every
    default column, nothing cut, each number the JSON's rounded, however wide the lines are."""
    result = rrcli("stats", traces, "--by", "run", cwd=traces.parent, env={"COLUMNS": "60"})
    assert 0 == result.returncode, result.stderr
    text = result.stdout.splitlines()
    assert [] == [line for line in text if "…" in line]
    numbers = summary(traces, "--by", "run")
    names = [column.name for column in DEFAULT]
    want = {g["key"]: expected(g, names) for g in [*numbers["groups"], numbers["total"]]}
    assert want == rows(text, ["run-x", LONG_RUN, "total"])


def test_wide_and_columns_choose_the_columns(traces):
    """--wide shows every column in its order; --columns shows those named, in that order."""
    numbers = summary(traces)
    wide = rrcli("stats", traces, "--wide", cwd=traces.parent).stdout.splitlines()
    every = [column.name for column in COLUMNS]
    assert {"total": expected(numbers["total"], every)} == rows(wide, ["total"])
    picked = rrcli("stats", traces, "--columns", "p99,calls,cost", cwd=traces.parent)
    total = numbers["total"]
    p99, calls = short(total["latency_ms"]["p99"]), f"{total['calls']:,}"
    cost = f"{total['cost_usd']:.4f} (68 % priced)".split()
    assert {"total": [p99, calls, *cost]} == rows(picked.stdout.splitlines(), ["total"])


def test_an_unknown_column_is_a_usage_error_naming_the_known(traces):
    """--columns with a name that is no column: exit 2, the name and the known ones."""
    result = rrcli("stats", traces, "--columns", "p50,latency", cwd=traces.parent)
    assert 2 == result.returncode
    assert "--columns latency: expected names from calls, ok," in result.stderr
    assert "" == result.stdout


def test_stats_says_how_many_runs_and_run_latest_picks_the_last(traces):
    """Two runs in a file: the table says it counted 2 runs together; --run latest counts the
    last to start alone, as --run with its id does."""
    both = rrcli("stats", traces, cwd=traces.parent).stdout
    assert "runs: 2, counted together (--run latest or --run ID for one)" in both
    latest = summary(traces, "--run", "latest")
    assert [LONG_RUN] == [r["run_id"] for r in latest["runs"]]
    assert summary(traces, "--run", LONG_RUN) == latest
    one = rrcli("stats", traces, "--run", "latest", cwd=traces.parent).stdout
    assert "runs: 1 " in one or one.rstrip().endswith("runs: 1")


def test_json_numbers_are_whole_and_times_have_three_decimals(traces):
    """--json carries every number unrounded by the table: times in ms at three decimals."""
    numbers = summary(traces, "--plot")
    times = [
        value
        for group in [*numbers["groups"], numbers["total"]]
        for name in ("latency_ms", "ttft_ms", "tpot_ms")
        for value in group[name].values()
        if value is not None
    ]
    assert times and all(value == round(value, 3) for value in times)
    assert numbers["timeline"]["bin_ms"] == round(numbers["timeline"]["bin_ms"], 3)
