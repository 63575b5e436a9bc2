"""The run's budget set up from its options: the prices it reserves at, the ledger it keeps
its spend in (this process's, or one shared in Redis by every process on the gate), and the
halt message once a budget-halted run has drained. The budget itself is routing's
(``routing.budget``): the check before every attempt."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rrcli.config.models import media_tokens, output_ceiling
from rrcli.config.prices import pool_prices, unpriced_budget
from rrcli.config.profile import Backend, Price, Profile
from rrcli.errors import UsageError
from rrcli.records.ledger import LEDGER_NAME, RENEW_S, FileLedger
from rrcli.records.spend import traces_cost
from rrcli.registry import ANTHROPIC_MAX_TOKENS
from rrcli.routing.budget import Budget, Ledger, LocalLedger
from rrcli.routing.control import Halt, RunControl
from rrcli.tokens import MediaTokens, output_cap

if TYPE_CHECKING:
    from rrcli.engine.options import EngineOptions
    from rrcli.engine.summary import RunSummary

__all__ = ["budget_parts", "budget_prices", "final_halt", "make_budget", "output_caps", "sent_cap"]


def final_halt(budget: Budget, summary: RunSummary, rest: Iterator[object] | None) -> Halt:
    """The halt message once the run drained: the spend then, and the jobs left without a
    result: those an attempt refused ended, and ``rest``, the selected jobs never handed out
    (counted here; None when they came from a pipe, which is not read further). Reading
    ``rest`` counts in ``summary`` the jobs it skips: those the results file holds already."""
    left = 0 if rest is None else sum(1 for _ in rest)
    return budget.halt(budget.refused + left)


def budget_prices(profile: Profile, options: EngineOptions) -> dict[str, Price] | None:
    """The prices a budget reserves at, by backend id; None when the run has no budget
    (``--max-cost``, else the profile's ``[budget] max_cost_usd``). Raises UsageError when a
    backend has no price: checked before anything is sent or written."""
    if _limit(profile, options) is None:
        return None
    prices = pool_prices(profile.backends)
    unpriced = [bid for bid, price in prices.items() if price is None]
    if unpriced:
        raise UsageError(" — ".join(unpriced_budget(unpriced)))
    return {bid: price for bid, price in prices.items() if price is not None}


def _limit(profile: Profile, options: EngineOptions) -> float | None:
    return options.max_cost if options.max_cost is not None else profile.budget.max_cost_usd


async def make_budget(
    profile: Profile,
    options: EngineOptions,
    prices: Mapping[str, Price] | None,
    control: RunControl,
    gates: Mapping[str, Any],
) -> Budget | None:
    """The run's budget at ``prices`` (``budget_prices``; None: no budget). With ``--resume``
    the spend of the earlier runs of the same results file in the traces counts. The ledger is
    shared in Redis on a Redis gate (the profile's budget), and always in queue mode (the
    queue's budget, on the queue's Redis whatever the gate), each results file its own share.
    A front-end that lasts (serve, Pool) keeps its budget in the ledger file beside its traces
    under the profile's budget key (in this process only without traces; in Redis on a Redis
    gate), its spend started again at each of the budget's periods, and its budget
    refuses each call on its own, never halting: ``rrcli run``'s budget is its results file's
    (its earlier spend read from the traces on ``--resume``), the ledger file not read."""
    limit = _limit(profile, options)
    if prices is None or limit is None:
        return None
    earlier = traces_cost(options.traces, prices, options.results) if options.resume else 0.0
    uncapped, media = budget_parts(profile)
    hub = getattr(gates, "hub", None)
    key = profile.budget.key or profile.label
    ledger: LocalLedger | Ledger
    if hub is None and options.queue is None and options.lasting and options.traces is not None:
        ledger = _file_ledger(options.traces, key, limit, profile.budget.period)
    elif hub is None and options.queue is None:
        ledger = LocalLedger(limit, earlier)
    else:
        from rrcli.fleet.ledger import RedisLedger, budget_hub

        own = hub is None
        if hub is None:
            hub = budget_hub(profile.queue_url)
        name = key if options.queue is None else f"queue:{options.queue}"
        owner = str(options.out.resolve()) if options.out is not None else hub.process
        period = profile.budget.period if options.queue is None and options.lasting else ""
        ledger = await RedisLedger.join(hub, profile, limit, earlier, name, owner, period)
        ledger.owns_hub = own
    halts = not options.lasting
    return Budget(limit, prices, ledger, control, uncapped, media, options.queue, halts)


def _file_ledger(traces: Path, key: str, limit: float, period: str) -> FileLedger:
    """The ledger file beside ``traces`` (every process whose traces share a folder shares
    it), renewing this process's reservations while it lives. Raises UsageError when the file
    cannot be opened."""
    path = traces.parent / LEDGER_NAME
    try:
        ledger = FileLedger(path, key, limit, period)
    except sqlite3.Error as exc:
        raise UsageError(f"{path}: the budget's ledger cannot be opened ({exc})") from exc
    ledger.renewing = asyncio.create_task(_renewing(ledger), name="rrcli.budget.renew")
    return ledger


async def _renewing(ledger: FileLedger) -> None:
    while True:
        await asyncio.sleep(RENEW_S)
        with contextlib.suppress(sqlite3.Error):
            ledger.renew()


def budget_parts(profile: Profile) -> tuple[frozenset[str], dict[str, MediaTokens]]:
    """What a budget knows of each backend beside its price: the backends whose most output
    nothing tells, and the tokens a media part is reserved at, by backend id."""
    return output_caps(profile)[1], {b.id: media_tokens(b) for b in profile.backends}


def output_caps(profile: Profile) -> tuple[dict[str, int], frozenset[str]]:
    """What a budgeted call without an output cap is sent with, by backend id (Anthropic's
    default ``max_tokens``, else the model's most output), and the backends whose most output
    nothing tells. A backend whose params cap the output is in neither."""
    caps: dict[str, int] = {}
    unknown = set()
    for backend in profile.backends:
        if output_cap(backend.params) is not None:
            continue
        cap = sent_cap(backend)
        if cap is None:
            unknown.add(backend.id)
        else:
            caps[backend.id] = cap
    return caps, frozenset(unknown)


def sent_cap(backend: Backend) -> int | None:
    """The most output a call on ``backend`` can have when neither it nor the backend caps it:
    Anthropic's default ``max_tokens`` (always sent), else the model's most (``None``: unknown)."""
    return ANTHROPIC_MAX_TOKENS if backend.provider == "anthropic" else output_ceiling(backend)
