"""The columns of the ``rrcli stats`` table: each one's name (what ``--columns`` calls it), its
heading and its cell as text, from a group of the summary.

Why it exists: the summary has more numbers than an 80-column terminal holds. The default columns
fit there (with a deployment name of a dozen characters); ``--wide`` shows them all and
``--columns`` picks. A cell is never cut: numbers are rounded to three significant figures or
more (``21.4``, ``153``, ``1,234``) so they stay narrow, and the renderer drops whole columns,
lowest ``rank`` first, rather than squeeze one. Plain strings, no rich: the renderer draws them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from rrcli.errors import UsageError
from rrcli.records.dollars import usd
from rrcli.stats.text import cost_cell

__all__ = [
    "COLUMNS",
    "DEFAULT",
    "Column",
    "defaults_for",
    "key_cell",
    "pick",
    "plain_table",
    "short",
]


@dataclass(frozen=True, slots=True)
class Column:
    """``rank``: the order in which a narrow terminal keeps the default columns (1 first)."""

    name: str
    head: str
    cell: Callable[[dict[str, Any]], str]
    rank: int = 0  # 0: not a default column


def short(value: float | None) -> str:
    """A number rounded to stay narrow: two decimals under 10, one under 100, none above."""
    if value is None:
        return "-"
    if abs(value) < 10:
        return f"{value:.2f}"
    if abs(value) < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def _count(field: str) -> Callable[[dict[str, Any]], str]:
    return lambda group: f"{group[field]:,}"


def _percentile(field: str, at: str) -> Callable[[dict[str, Any]], str]:
    return lambda group: short(group[field].get(at))


def _share(group: dict[str, Any]) -> str:
    share = group["share"]
    return "-" if share is None else f"{share:.1%}"


def _hit(group: dict[str, Any]) -> str:
    rate = group["cache_hit_rate"]
    return "-" if rate is None else f"{rate:.1%}"


def _saved(group: dict[str, Any]) -> str:
    saved = group["cache_saved_usd"]
    return "-" if saved is None else usd(saved, 4)


COLUMNS = (
    Column("calls", "calls", _count("calls"), 1),
    Column("ok", "ok", _count("ok")),
    Column("retried", "retried", _count("retried"), 7),
    Column("errors", "errors", _count("errors"), 2),
    Column("cached", "cached", _count("cached")),
    Column("share", "share", _share, 3),
    Column("p50", "p50\nms", _percentile("latency_ms", "p50"), 4),
    Column("p95", "p95\nms", _percentile("latency_ms", "p95"), 5),
    Column("p99", "p99\nms", _percentile("latency_ms", "p99")),
    Column("ttft", "TTFT\np50 ms", _percentile("ttft_ms", "p50"), 8),
    Column("ttft_p95", "TTFT\np95 ms", _percentile("ttft_ms", "p95")),
    Column("tpot", "TPOT\np50 ms", _percentile("tpot_ms", "p50")),
    Column("tokens_in", "tokens\nin", _count("input_tokens")),
    Column("tokens_out", "tokens\nout", _count("output_tokens")),
    Column("estimated", "usage\nestimated", _count("usage_estimated_calls")),
    Column("cost", "cost\nUSD", cost_cell),
    Column("hit", "cache\nhit", _hit),
    Column("saved", "cache saved\nUSD", _saved),
    Column("tok_s", "out\ntok/s", lambda group: short(group["output_tokens_per_s"]), 6),
    Column("peak", "peak in\nflight", _count("peak_in_flight"), 9),
)
DEFAULT = tuple(column for column in COLUMNS if column.rank)
#: Columns the default table adds where the traces have something in them (the summary field
#: that must be non-zero in the total), ranked last so a narrow terminal drops them first: a
#: run without the response cache or a prompt cache keeps its 80 columns for the rest.
_WHEN_PRESENT = (("cached", "cached", 10), ("hit", "cached_input_tokens", 11))
_BY_NAME = {column.name: column for column in COLUMNS}


def pick(names: str | Iterable[str] | None, *, wide: bool = False) -> tuple[Column, ...]:
    """The columns asked for: ``names`` (comma-separated, in the order given), every column
    with ``wide``, else the default ones. UsageError names an unknown column and the known."""
    if names is None:
        return COLUMNS if wide else DEFAULT
    if isinstance(names, str):
        names = names.split(",")
    wanted = [name.strip() for name in names if name.strip()]
    unknown = [name for name in wanted if name not in _BY_NAME]
    if unknown or not wanted:
        raise UsageError(
            f"--columns {','.join(unknown) or repr('')}: expected names from "
            f"{', '.join(_BY_NAME)} (comma-separated), or --wide for all"
        )
    return tuple(_BY_NAME[name] for name in dict.fromkeys(wanted))


def defaults_for(summary: dict[str, Any]) -> tuple[Column, ...]:
    """The default columns for ``summary``: ``DEFAULT``, and the cache's where it has any."""
    total = summary["total"]
    extra = {name: rank for name, field, rank in _WHEN_PRESENT if total.get(field)}
    return tuple(
        replace(column, rank=extra[column.name]) if column.name in extra else column
        for column in COLUMNS
        if column.rank or column.name in extra
    )


def key_cell(group: dict[str, Any]) -> str:
    key = group["key"]
    return "(none)" if key is None else str(key)


def plain_table(title: str, summary: dict[str, Any], columns: tuple[Column, ...]) -> str:
    """The stats table as aligned plain text (for thousands of groups, where a rich table
    takes minutes): the key left, the numbers right, every cell whole."""
    head = [summary["by"], *(column.head.replace("\n", " ") for column in columns)]

    def cells(group: dict[str, Any]) -> list[str]:
        return [key_cell(group), *(column.cell(group) for column in columns)]

    rows = [cells(group) for group in summary["groups"]]
    total = cells(summary["total"])
    widths = [max(map(len, column)) for column in zip(head, total, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        key = cells[0].ljust(widths[0])
        return "  ".join([key, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([title, line(head), rule, *map(line, rows), rule, line(total)]) + "\n"
