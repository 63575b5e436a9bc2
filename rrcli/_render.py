"""Everything rich: the only module that imports it, so ``rrcli --help`` stays light.

Each feature has its own function (validation diagnostics here; progress and stats tables join
later). Functions take a ``Console`` so tests can render into a string.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rrcli.profile import ValidationReport

__all__ = ["print_validation"]

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}


def print_validation(report: ValidationReport, console: Console | None = None) -> None:
    """``rrcli validate`` on a terminal: one table row per diagnostic, then the verdict."""
    console = console or Console()
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
