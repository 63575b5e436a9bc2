"""Everything rich: the live run display, plans, summaries, diagnostics and stats tables.

The only module that imports rich; only the CLI imports it. Machine output goes to stdout, the
human display to stderr. ``NO_COLOR`` is honoured by rich itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from rrcli.stats.cells import DEFAULT, Column, defaults_for, key_cell, plain_table
from rrcli.stats.text import cost_line, estimated_line

if TYPE_CHECKING:
    from rrcli.config.load import ValidationReport
    from rrcli.config.profile import Profile
    from rrcli.diagnostic import Diagnostic
    from rrcli.engine.summary import RunSummary
    from rrcli.routing.status import DeploymentStatus, EngineStatus
    from rrcli.running.checks import CheckReport
    from rrcli.running.plan import Plan

#: the live display's deployments: (label, status) each
Rows = list[tuple[str, "DeploymentStatus"]]
_PIPE_WIDTH = 160  # columns for tables written to a pipe (no terminal to measure)


def _console(*, stderr: bool = False) -> Console:
    """A console that never wraps a line of text (``soft_wrap``: a piped log stays one line a
    message, whatever its length); tables written to a pipe get _PIPE_WIDTH columns unless
    COLUMNS says otherwise."""
    console = Console(stderr=stderr, soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, soft_wrap=True, width=_PIPE_WIDTH)
    return console


stderr = _console(stderr=True)
stdout = _console()


class PromptPrinter:
    """``run --prompt``: answers as plain text on stdout; streamed text as it arrives."""

    def __init__(self, *, stream: bool) -> None:
        self.stream = stream
        self.partial = False

    def text(self, chunk: str) -> None:
        sys.stdout.write(chunk)
        sys.stdout.flush()
        self.partial = True

    def result(self, result: dict[str, Any]) -> None:
        if result["status"] == "ok":
            if not self.partial:
                sys.stdout.write(result["output"])
            sys.stdout.write("\n")
        else:
            if self.partial:
                sys.stdout.write("\n")
            error = result["error"]
            stderr.print(
                f"rrcli: {result['id']} failed: {error['type']}: {error['message']}",
                markup=False,
                highlight=False,
            )
        sys.stdout.flush()
        self.partial = False


class RunDisplay:
    """The live progress display on a terminal: a head line and a row per deployment, ``rrcli
    run``'s (``start``) or another command's (``watch``: ``rrcli serve``). It reads the engine's
    status four times a second from rich's refresh thread; the engine never calls into it, so it
    costs the hot path nothing. The status tells it the run is stopping. Jobs a resumed run
    skips count as done."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.live: Live | None = None
        self.summary: RunSummary | None = None
        self._status: Callable[[], EngineStatus] | None = None
        self._now: EngineStatus | None = None  # the status this refresh reads
        self._head: Callable[[], str] = str
        self._rows: Callable[[], Rows] = list

    def __enter__(self) -> RunDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()

    def start(self, summary: RunSummary, status: Callable[[], EngineStatus]) -> None:
        """Show a run: its ``summary`` and its engine's ``status()``."""
        self.summary, self._status = summary, status
        self.watch(self._run_head, self._run_rows)

    def watch(self, head: Callable[[], str], rows: Callable[[], Rows]) -> None:
        """Show ``head()`` and the deployments of ``rows()``, (label, status) each, live."""
        self._head, self._rows = head, rows
        if self.enabled:
            self.live = Live(
                get_renderable=self._render,
                console=stderr,
                refresh_per_second=4,
                redirect_stdout=False,
                redirect_stderr=True,  # log lines print above the display (see _logging)
            )
            self.live.start()

    def _run_head(self) -> str:
        summary, now = self.summary, self._now
        assert summary is not None and now is not None
        head = f"jobs {summary.progress().line()}  ok {summary.ok:,}"
        head += f"  error {summary.error:,}  invalid {summary.invalid:,}"
        if summary.skipped:
            head += f"  skipped {summary.skipped:,}"
        if now.budget is not None:
            head += f"  {now.budget.line()}"
        return head

    def _run_rows(self) -> Rows:
        assert self._now is not None
        return [(deployment.id, deployment) for deployment in self._now.deployments]

    def _render(self) -> Group:
        summary = self.summary
        now = self._now = None if self._status is None else self._status()
        lines = [Text(self._head(), style="bold"), _deployments(self._rows())]
        if summary is not None and summary.failures:
            lines.append(Text(summary.failures_line(), style="red"))
        if now is not None and now.stopping:
            lines.append(Text(_stopping(now), style="yellow"))
        return Group(*lines)


_COLUMNS = (
    ("deployment", "left"),
    ("in flight / cap", "right"),
    ("ok calls", "right"),
    ("retried", "right"),
    ("errors", "right"),
    ("", "left"),
)


def _deployments(rows: Rows) -> Table:
    """A row per deployment: in flight of its cap, ok calls, failed calls retried and those no
    retry followed (counts that only grow), down or cooling."""
    table = Table(box=None, pad_edge=False)
    for name, justify in _COLUMNS:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for label, status in rows:
        cap = f"{status.cap}"
        if status.cap != status.max_cap:
            cap += f" (max {status.max_cap})"
        mark = "[red]down[/]" if status.state == "down" else ""
        if status.state == "cooling":
            mark = "[yellow]cooling[/]"
        table.add_row(
            label,
            f"{status.in_flight} / {cap}",
            f"{status.ok:,}",
            f"{status.retried:,}",
            f"{status.errors:,}",
            mark,
        )
    return table


def _stopping(now: EngineStatus) -> str:
    """What the display says once the run stops dispatching: Ctrl-C was pressed, or the run
    halted by itself (its reason said, and no Ctrl-C offered for it)."""
    in_flight = now.in_flight
    calls = f"{in_flight:,} call" + ("" if in_flight == 1 else "s")
    if now.control == "cancelled":
        return f"stopping: cancelling {calls}"
    if now.halt is not None:
        return f"stopping ({now.halt.reason}): letting {calls} finish"
    return f"stopping: letting {calls} finish (Ctrl-C again to cancel them)"


def print_summary(summary: RunSummary, out: Path | None, traces: Path | None) -> None:
    """One closing line on stderr: the counts and where the outputs are."""
    jobs = summary.jobs
    line = ", ".join(f"{count:,} {name}" for name, count in jobs.items())
    if summary.cached:
        line += f" ({summary.cached:,} calls answered from the cache)"
    if out is not None:
        line += f" → {out}"
    if traces is not None:
        line += f" (traces: {traces})"
    if summary.next_step is not None:
        line += f" — {summary.next_step}"
    stderr.print(line, markup=False, highlight=False, soft_wrap=True)


def print_check(report: CheckReport) -> None:
    """``rrcli validate`` on a terminal: the diagnostics table, then the jobs file's, prices'
    and probes' lines."""
    print_validation(report.profile, stdout)
    for line in report.check_lines():
        stdout.print(line, markup=False, highlight=False, soft_wrap=True)


def print_plan(profile: Profile, plan: Plan, traces: Path | None = None) -> None:
    """``run --dry-run``: the plan's table (each deployment, then the total) and its notes."""
    head, rows = plan.rows(profile.backends)
    table = Table(title=f"plan: {plan.jobs:,} jobs ({plan.invalid:,} invalid), nothing sent")
    for i, name in enumerate(head):
        table.add_column(name, justify="left" if i < 2 else "right")
    for row in rows[:-1]:
        table.add_row(*row)
    table.add_section()
    table.add_row(*rows[-1], style="bold")
    stdout.print(table)
    stdout.print(plan.output_note(), markup=False, highlight=False)
    likely = plan.likely_note(traces)
    if likely is not None:
        stdout.print(likely, markup=False, highlight=False)
    for message in plan.refused:
        stdout.print(f"invalid: {message}", markup=False, highlight=False)


_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}


def print_validation(report: ValidationReport, console: Console | None = None) -> None:
    """``rrcli validate`` on a terminal: one table row per diagnostic, its cells wrapped at
    word boundaries only, or, on a terminal too narrow for that, a block per diagnostic; then
    the verdict."""
    console = console or _console()
    if report.diagnostics:
        table = _diagnostics_table(report)
        # each column's least width, its padding (one a side) and the borders between them
        least = sum(c.min_width or 0 for c in table.columns) + 3 * len(table.columns) + 1
        if least <= console.width:
            console.print(table, soft_wrap=False)
        else:
            console.print(report.source)
            for d in report.diagnostics:
                console.print(_diagnostic_block(d), soft_wrap=False)
    style = "bold green" if report.ok else "bold red"
    console.print(Text(report.summary(), style=style))


def _diagnostics_table(report: ValidationReport) -> Table:
    """A row per diagnostic; each column at least as wide as its longest word, so no word is
    ever cut."""
    rows = [
        (d.severity, "" if d.line is None else str(d.line), d.subject, d.message, d.fix)
        for d in report.diagnostics
    ]
    table = Table(title=report.source, title_justify="left", show_lines=False, expand=False)
    heads = ("", "line", "where", "problem", "fix")
    for i, head in enumerate(heads):
        widest = max(len(word) for row in rows for word in [head, *row[i].split()])
        table.add_column(
            head,
            justify="right" if head == "line" else "left",
            min_width=widest,
            style="dim" if head == "fix" else "",
        )
    for severity, *cells in rows:
        table.add_row(Text(severity, style=_SEVERITY_STYLE.get(severity, "")), *cells)
    return table


def _diagnostic_block(d: Diagnostic) -> Group:
    """One diagnostic for a narrow terminal: its severity, line and place on a line, then its
    problem and fix indented below, each wrapped at word boundaries."""
    head = Text(d.severity, style=_SEVERITY_STYLE.get(d.severity, ""))
    if d.line is not None:
        head.append(f"  line {d.line}")
    head.append(f"  {d.subject}")
    return Group(
        head,
        Padding(Text(d.message), (0, 0, 0, 2)),
        Padding(Text(f"fix: {d.fix}", "dim"), (0, 0, 0, 2)),
    )


# --- rrcli stats ----------------------------------------------------------------------------

_BARS = " ▁▂▃▄▅▆▇█"
_STATS_LABEL = 16
_STATS_TAIL = 34


def stats_plot_bins() -> int:
    """How many time slices the in-flight plot has room for on this terminal."""
    return max(10, _console().width - _STATS_LABEL - _STATS_TAIL - 2)


# rich lays a table out at about 1 ms a row: past this many groups the table is plain text
# (50,000 groups: 75 s as a rich table, under a second as text)
_RICH_ROWS = 1000
_KEY_MIN = 16  # a key column wider than this may wrap to fit the terminal; a number never does


def render_stats(
    summary: dict[str, Any], columns: tuple[Column, ...] = DEFAULT, *, fit: bool = True
) -> None:
    """The stats table: one row per group, then the total, the jobs, the runs read and the
    malformed lines. On a terminal the default columns that do not fit are left out (and named),
    and columns asked for (``--wide``, ``--columns``) that do not fit in one table are drawn as
    tables one under another, each with the group column and as many columns as fit; a table
    written to a pipe is drawn whole however wide."""
    console = _console()
    title = f"rrcli stats by {summary['by']}"
    if fit:
        columns = defaults_for(summary)
    if len(summary["groups"]) > _RICH_ROWS:
        console.file.write(plain_table(title, summary, columns))
        _print_footer(console, summary, ())
        return
    hidden: tuple[Column, ...] = ()
    if console.is_terminal and fit:
        columns, hidden = _fitting(console, summary, columns)
    table = _stats_table(title, summary, columns)
    if console.is_terminal and _needed(console, table, summary) > console.width:
        for i, part in enumerate(_stacked(console, summary, columns)):
            if i:
                console.print()
            console.print(_stats_table(title if i == 0 else "", summary, part))
        _print_footer(console, summary, hidden)
        return
    if not console.is_terminal:
        console = _stats_console(_natural_width(console, table))
    console.print(table)
    _print_footer(console, summary, hidden)


def _stacked(
    console: Console, summary: dict[str, Any], columns: tuple[Column, ...]
) -> list[tuple[Column, ...]]:
    """``columns`` in order, cut into runs that each fit the terminal beside the group column
    (a column too wide for any is a run of its own)."""
    parts: list[tuple[Column, ...]] = []
    run: tuple[Column, ...] = ()
    for column in columns:
        wider = (*run, column)
        if run and _needed(console, _stats_table("", summary, wider), summary) > console.width:
            parts.append(run)
            wider = (column,)
        run = wider
    return [*parts, run]


def _stats_table(title: str, summary: dict[str, Any], columns: tuple[Column, ...]) -> Table:
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column(summary["by"], overflow="fold")
    for column in columns:
        table.add_column(column.head, justify="right", no_wrap=True)
    for group in summary["groups"]:
        table.add_row(key_cell(group), *(column.cell(group) for column in columns))
    table.add_section()
    total = summary["total"]
    table.add_row(key_cell(total), *(column.cell(total) for column in columns), style="bold")
    return table


def _natural_width(console: Console, table: Table) -> int:
    """The table's width with no cell wrapped or cut."""
    return Measurement.get(console, console.options.update_width(1 << 16), table).maximum


def _fitting(
    console: Console, summary: dict[str, Any], columns: tuple[Column, ...]
) -> tuple[tuple[Column, ...], tuple[Column, ...]]:
    """The default columns that fit the terminal, dropping the lowest ranked first; and those
    left out."""
    keep = sorted(columns, key=lambda column: column.rank)
    while (
        len(keep) > 1
        and _needed(console, _stats_table("", summary, tuple(keep)), summary) > console.width
    ):
        keep.pop()
    shown = tuple(column for column in columns if column in keep)
    return shown, tuple(column for column in columns if column not in keep)


def _needed(console: Console, table: Table, summary: dict[str, Any]) -> int:
    """The width the table needs: its natural width, less what its key column may wrap away
    above _KEY_MIN."""
    key = max(len(key_cell(group)) for group in [*summary["groups"], summary["total"]])
    return _natural_width(console, table) - max(0, key - _KEY_MIN)


def _stats_console(width: int) -> Console:
    return Console(soft_wrap=True, width=width)


def _print_footer(console: Console, summary: dict[str, Any], hidden: tuple[Column, ...]) -> None:
    """Under the table, as many to a line as fit: the jobs, the cost, the runs read, the
    malformed lines, the columns a narrow terminal left out."""
    jobs = " · ".join(f"{count:,} {name}" for name, count in summary["jobs"].items())
    parts = [Text(f"jobs: {jobs}")]
    cost = cost_line(summary["total"])
    if cost is not None:
        parts.append(Text(cost, "" if summary["total"]["cost_usd"] is not None else "yellow"))
    estimated = estimated_line(summary["total"])
    if estimated is not None:
        parts.append(Text(estimated, "yellow"))
    parts.append(_runs_part(summary))
    malformed = summary["malformed_lines"]
    parts.append(Text(f"malformed lines: {malformed:,}", "red" if malformed else ""))
    if hidden:
        names = ", ".join(column.name for column in hidden)
        parts.append(Text(f"not shown: {names} (--wide: all; --columns: pick)", "dim"))
    line = Text()
    for part in parts:
        if line and len(line) + 3 + len(part) > console.width:
            console.print(line)
            line = Text()
        line.append_text(Text("   ") + part if line else part)
    console.print(line)


def _runs_part(summary: dict[str, Any]) -> Text:
    """How many runs the numbers cover, and which were cut short."""
    runs = summary["runs"]
    open_runs = sum(not r["ended"] for r in runs)
    interrupted = sum(bool(r["interrupted"]) for r in runs)
    text = Text(f"runs: {len(runs)}")
    if len(runs) > 1:
        text.append(", counted together (--run latest or --run ID for one)")
    if open_runs or interrupted:
        text.append(f" ({open_runs} without run_end, {interrupted} interrupted)", "yellow")
    return text


def render_stats_plot(summary: dict[str, Any]) -> None:
    """Calls in flight per deployment over time: one strip per deployment, each cell the mean
    in flight over a time slice, full height at the backend's cap (or its peak if no cap)."""
    console = _console()
    timeline = summary["timeline"]
    if not timeline["series"]:
        console.print("no calls to plot")
        return
    console.print(f"calls in flight over time, {timeline['bin_ms'] / 1000:.3g} s a cell")
    console.print(f"from {timeline['start']} to {timeline['end']}")
    for series in timeline["series"]:
        means = series["mean_in_flight"]
        top = series["cap"] or series["peak_in_flight"] or 1
        strip = "".join(_BARS[min(8, round(8 * m / top))] for m in means)
        average = sum(means) / len(means)
        cap = "?" if series["cap"] is None else series["cap"]
        line = Text(f"{series['deployment'][:_STATS_LABEL]:<{_STATS_LABEL}} ")
        line.append(strip, "cyan on grey11")
        line.append(
            f" peak {series['peak_in_flight']}/{cap} mean {average:.1f} ({average / top:.0%})"
        )
        console.print(line, no_wrap=True, overflow="ellipsis")
