"""Everything rich: the one module that draws on the terminal.

Why it exists: the core returns plain data; how it looks (tables, plots, colours, widths) is
decided here only, so the core stays testable and the CLI stays thin. ``NO_COLOR`` is honoured
by rich itself. Output that is not a terminal (and no COLUMNS) gets a wide fixed width, so a
table piped to a file is not folded.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

_PIPE_WIDTH = 160


def _console() -> Console:
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=_PIPE_WIDTH)
    return console


# --- rrcli stats ----------------------------------------------------------------------------

_BARS = " ▁▂▃▄▅▆▇█"
_STATS_LABEL = 16
_STATS_TAIL = 34


def stats_plot_bins() -> int:
    """How many time slices the in-flight plot has room for on this terminal."""
    return max(10, _console().width - _STATS_LABEL - _STATS_TAIL - 2)


def render_stats(summary: dict[str, Any]) -> None:
    """The SPEC §10 table: one row per group, then the total, the jobs and malformed lines."""
    console = _console()
    table = Table(title=f"rrcli stats by {summary['by']}", title_justify="left")
    table.add_column(summary["by"], no_wrap=True)
    for name in ("calls", "ok", "retried", "errors", "share"):
        table.add_column(name, justify="right")
    table.add_column("latency ms\np50/p95/p99", justify="right")
    table.add_column("TTFT ms\np50/p95", justify="right")
    table.add_column("TPOT ms\np50", justify="right")
    table.add_column("tokens\nin/out", justify="right")
    table.add_column("cost\nUSD", justify="right")
    table.add_column("out tok/s", justify="right")
    table.add_column("peak in\nflight", justify="right")
    for group in summary["groups"]:
        table.add_row(*_stats_row(group))
    table.add_section()
    table.add_row(*_stats_row(summary["total"]), style="bold")
    console.print(table)
    console.print(_stats_footer(summary))


def _stats_row(group: dict[str, Any]) -> list[str]:
    key = group["key"]
    share = group["share"]
    return [
        "(none)" if key is None else str(key),
        f"{group['calls']:,}",
        f"{group['ok']:,}",
        f"{group['retried']:,}",
        f"{group['errors']:,}",
        "-" if share is None else f"{share:.1%}",
        _ms(group["latency_ms"]),
        _ms(group["ttft_ms"]),
        _ms(group["tpot_ms"]),
        f"{group['input_tokens']:,}/{group['output_tokens']:,}",
        "-" if group["cost_usd"] is None else f"{group['cost_usd']:.4f}",
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
