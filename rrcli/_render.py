"""Everything rich: the live run display, plans, summaries, diagnostics and stats tables.

The only module that imports rich; only the CLI imports it. Machine output goes to stdout, the
human display to stderr. ``NO_COLOR`` is honoured by rich itself.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rrcli.stats.text import cost_cell, cost_line

if TYPE_CHECKING:
    from rrcli.config.load import ValidationReport
    from rrcli.config.profile import Profile
    from rrcli.routing.control import RunControl
    from rrcli.routing.router import Router
    from rrcli.run.checks import CheckReport
    from rrcli.run.plan import Plan
    from rrcli.run.summary import RunSummary

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
            stderr.print(f"rrcli: {result['id']} failed: {error['type']}: {error['message']}",
                         markup=False, highlight=False)  # fmt: skip
        sys.stdout.flush()
        self.partial = False


class RunDisplay:
    """The live progress display of ``rrcli run`` on a terminal: totals and a row per deployment.

    It reads the run's counters four times a second from rich's refresh thread; the engine never
    calls into it, so it costs the hot path nothing. ``control`` (the run's switch) tells it the
    run is stopping. Jobs a resumed run skips count as done.
    """

    def __init__(self, *, enabled: bool, control: RunControl | None = None) -> None:
        self.enabled = enabled
        self.control = control
        self.live: Live | None = None
        self.summary: RunSummary | None = None
        self.router: Router | None = None

    def __enter__(self) -> RunDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()

    def start(self, summary: RunSummary, router: Router) -> None:
        self.summary, self.router = summary, router
        if self.enabled:
            self.live = Live(
                get_renderable=self._render,
                console=stderr,
                refresh_per_second=4,
                redirect_stdout=False,
                redirect_stderr=True,  # log lines print above the display (see _logging)
            )
            self.live.start()

    def _render(self) -> Group:
        summary, router = self.summary, self.router
        assert summary is not None and router is not None
        elapsed = max(time.monotonic() - summary.started, 1e-9)
        done = summary.done + summary.skipped
        rate = summary.done / elapsed
        head = f"jobs {done:,}"
        if summary.total:
            head += f"/{summary.total:,}"
            if rate > 0:
                remaining = max(summary.total - done, 0) / rate
                head += f"  ETA {_duration(remaining)}"
        head += f"  {rate:,.1f}/s  ok {summary.ok:,}  error {summary.error:,}"
        head += f"  invalid {summary.invalid:,}"
        if summary.skipped:
            head += f"  skipped {summary.skipped:,}"
        if router.budget is not None:
            head += f"  {router.budget.progress()}"
        table = Table(box=None, pad_edge=False)
        for name, justify in [
            ("deployment", "left"),
            ("in flight / cap", "right"),
            ("done", "right"),
            ("retries", "right"),
            ("errors", "right"),
            ("", "left"),
        ]:
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for state in router.states:
            gate = state.gate
            cap = f"{gate.cap}" if gate.cap == gate.max_cap else f"{gate.cap} (max {gate.max_cap})"
            mark = "[red]down[/]" if state.down else "[yellow]cooling[/]" if state.cooling else ""
            table.add_row(
                state.backend.id,
                f"{state.in_flight} / {cap}",
                f"{state.done:,}",
                f"{state.retries:,}",
                f"{state.errors:,}",
                mark,
            )
        lines = [Text(head, style="bold"), table]
        if self.control is not None and self.control.stopping:
            lines.append(Text(_stopping(self.control, router), style="yellow"))
        return Group(*lines)


def _stopping(control: RunControl, router: Router) -> str:
    """What the display says once Ctrl-C was pressed."""
    in_flight = sum(state.in_flight for state in router.states)
    calls = f"{in_flight:,} call" + ("" if in_flight == 1 else "s")
    if control.cancelled:
        return f"stopping: cancelling {calls}"
    return f"stopping: letting {calls} finish (Ctrl-C again to cancel them)"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


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


def print_plan(profile: Profile, plan: Plan) -> None:
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
    for message in plan.refused:
        stdout.print(f"invalid: {message}", markup=False, highlight=False)


_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}


def print_validation(report: ValidationReport, console: Console | None = None) -> None:
    """``rrcli validate`` on a terminal: one table row per diagnostic, then the verdict."""
    console = console or _console()
    if report.diagnostics:
        table = Table(title=report.source, title_justify="left", show_lines=False, expand=False)
        table.add_column("", no_wrap=True)
        table.add_column("line", justify="right", no_wrap=True)
        table.add_column("where", overflow="fold")
        table.add_column("problem", overflow="fold")
        table.add_column("fix", overflow="fold", style="dim")
        for d in report.diagnostics:
            table.add_row(
                Text(d.severity, style=_SEVERITY_STYLE.get(d.severity, "")),
                "" if d.line is None else str(d.line),
                d.subject,
                d.message,
                d.fix,
            )
        console.print(table)
    style = "bold green" if report.ok else "bold red"
    console.print(Text(report.summary(), style=style))


# --- rrcli stats ----------------------------------------------------------------------------

_BARS = " ▁▂▃▄▅▆▇█"
_STATS_LABEL = 16
_STATS_TAIL = 34


def stats_plot_bins() -> int:
    """How many time slices the in-flight plot has room for on this terminal."""
    return max(10, _console().width - _STATS_LABEL - _STATS_TAIL - 2)


_STATS_COLUMNS = (
    *("calls", "ok", "retried", "errors", "cached", "share"),
    *("latency ms\np50/p95/p99", "TTFT ms\np50/p95", "TPOT ms\np50", "tokens\nin/out"),
    *("cost\nUSD", "out tok/s", "peak in\nflight"),
)
# rich lays a table out at about 1 ms a row: past this many groups the table is plain text
# (50,000 groups: 75 s as a rich table, under a second as text)
_RICH_ROWS = 1000


def render_stats(summary: dict[str, Any]) -> None:
    """The SPEC §10 table: one row per group, then the total, the jobs and malformed lines."""
    console = _console()
    title = f"rrcli stats by {summary['by']}"
    if len(summary["groups"]) > _RICH_ROWS:
        _plain_stats(console, title, summary)
        console.print(_stats_footer(summary))
        return
    table = Table(title=title, title_justify="left")
    table.add_column(summary["by"], no_wrap=True)
    for name in _STATS_COLUMNS:
        table.add_column(name, justify="right")
    for group in summary["groups"]:
        table.add_row(*_stats_row(group))
    table.add_section()
    table.add_row(*_stats_row(summary["total"]), style="bold")
    console.print(table)
    console.print(_stats_footer(summary))


def _plain_stats(console: Console, title: str, summary: dict[str, Any]) -> None:
    """The stats table as aligned plain text: the key left, the numbers right."""
    head = [summary["by"], *(name.replace("\n", " ") for name in _STATS_COLUMNS)]
    rows = [_stats_row(group) for group in summary["groups"]]
    total = _stats_row(summary["total"])
    widths = [max(map(len, column)) for column in zip(head, total, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        key = cells[0].ljust(widths[0])
        return "  ".join([key, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])

    rule = "  ".join("-" * w for w in widths)
    text = "\n".join([title, line(head), rule, *map(line, rows), rule, line(total)])
    console.file.write(text + "\n")


def _stats_row(group: dict[str, Any]) -> list[str]:
    key = group["key"]
    share = group["share"]
    return [
        "(none)" if key is None else str(key),
        f"{group['calls']:,}",
        f"{group['ok']:,}",
        f"{group['retried']:,}",
        f"{group['errors']:,}",
        f"{group['cached']:,}",
        "-" if share is None else f"{share:.1%}",
        _ms(group["latency_ms"]),
        _ms(group["ttft_ms"]),
        _ms(group["tpot_ms"]),
        f"{group['input_tokens']:,}/{group['output_tokens']:,}",
        cost_cell(group),
        _number(group["output_tokens_per_s"]),
        str(group["peak_in_flight"]),
    ]


def _ms(percentiles: dict[str, float | None]) -> str:
    return "/".join(_number(v) for v in percentiles.values())


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _stats_footer(summary: dict[str, Any]) -> Text:
    jobs = " · ".join(f"{count:,} {name}" for name, count in summary["jobs"].items())
    runs = summary["runs"]
    open_runs = sum(not r["ended"] for r in runs)
    interrupted = sum(bool(r["interrupted"]) for r in runs)
    text = Text(f"jobs: {jobs}   runs: {len(runs)}")
    cost = cost_line(summary["total"])
    if cost is not None:
        text.append(f"   {cost}", "" if summary["total"]["cost_usd"] is not None else "yellow")
    if open_runs or interrupted:
        text.append(f" ({open_runs} without run_end, {interrupted} interrupted)", "yellow")
    malformed = summary["malformed_lines"]
    text.append(f"   malformed lines: {malformed:,}", "red" if malformed else "")
    return text


def render_stats_plot(summary: dict[str, Any]) -> None:
    """Calls in flight per deployment over time: one strip per deployment, each cell the mean
    in flight over a time slice, full height at the backend's cap (or its peak if no cap)."""
    console = _console()
    timeline = summary["timeline"]
    if not timeline["series"]:
        console.print("no calls to plot")
        return
    console.print(
        f"calls in flight over time, {timeline['start']} → {timeline['end']} "
        f"({timeline['bin_ms'] / 1000:.3g} s a cell)"
    )
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
