"""USD amounts as text, one way everywhere money is shown: the run's summary and budget
messages, the live display, ``stats``, ``--dry-run``.

An amount keeps the precision it needs: at least two significant figures (a $0.003 budget is
``0.003``, not ``0.00``), and at least ``places`` decimals (cents by default); a zero is
``0.00``. No ``$``: the caller says whether one goes in front (a table's column head says USD).
"""

from __future__ import annotations

import math

__all__ = ["usd"]


def usd(amount: float, places: int = 2) -> str:
    """``amount`` with thousands separators, ``places`` decimals, and more when it needs them
    for two significant figures (their trailing zeros dropped): 1,234.50, 0.12, 0.003, 0.0047."""
    if amount == 0 or not math.isfinite(amount):
        return f"{amount:,.{places}f}"
    needed = 1 - math.floor(math.log10(abs(amount)))  # decimals for two significant figures
    if needed <= places:
        return f"{amount:,.{places}f}"
    whole, _, decimals = f"{amount:,.{needed}f}".partition(".")
    return f"{whole}.{decimals.rstrip('0').ljust(places, '0')}"
