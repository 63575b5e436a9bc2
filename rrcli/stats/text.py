"""A summary's money as text: a group's cost with its priced share, and the lines
under the table (the cost, the calls whose usage was estimated). A call without a price is
never shown as free: a cost covers the priced calls and says what share of the calls they are.
Plain strings, no numpy: the renderer draws them."""

from __future__ import annotations

from typing import Any

from rrcli.records.dollars import usd

__all__ = ["cost_cell", "cost_line", "estimated_line", "priced_share"]


def cost_cell(group: dict[str, Any]) -> str:
    """A group's cost in USD, with the share of its calls priced when some had no price."""
    if group["cost_usd"] is None:
        return "-"
    text = usd(group["cost_usd"], 4)
    if group["priced_calls"] < group["calls"]:
        text += f" ({priced_share(group)} priced)"
    return text


def cost_line(total: dict[str, Any]) -> str | None:
    """The line under the table: ``cost 1.23 (94 % of calls priced)``, and how many of the
    charges stand for a usage rrcli did not know; None without calls."""
    if total["cost_usd"] is None:
        return "cost unknown (no call priced)" if total["calls"] else None
    text = f"cost {usd(total['cost_usd'])} ({priced_share(total)} of calls priced"
    estimated = total["cost_estimated_calls"]
    return text + (f", {estimated:,} charged an estimate)" if estimated else ")")


def estimated_line(total: dict[str, Any]) -> str | None:
    """How many calls' tokens are rrcli's estimate (their server reported no usage); None when
    every server reported its usage."""
    count = total["usage_estimated_calls"]
    if not count:
        return None
    return f"usage estimated: {count:,} of {total['calls']:,} calls (the server reported none)"


def priced_share(group: dict[str, Any]) -> str:
    """The share of a group's calls that had a price, in whole percent (99 % until all are,
    "<1 %" while any is)."""
    share = group["priced_calls"] / group["calls"] * 100
    if 0 < share < 1:
        return "<1 %"
    return f"{min(round(share), 99) if share < 100 else 100} %"
