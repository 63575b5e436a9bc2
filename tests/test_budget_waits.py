"""Attempts waiting for budget room: served first come, first served, and room granted to an
attempt cancelled before it could use it goes back to the budget."""

from __future__ import annotations

import asyncio
import time

from billing import GPT_4O
from runkit import write_profile

import rrcli
from rrcli.config.profile import Backend, Price
from rrcli.providers.base import Call
from rrcli.routing.budget import Budget, LocalLedger
from rrcli.routing.control import RunControl
from rrcli.routing.lease import BackendState, Lease

DOLLAR_A_TOKEN = Price(input=0.0, output=1e6)  # USD per million: an output token costs $1


def _lease() -> Lease:
    state = BackendState(Backend(id="b", provider="sim"), None, 0, time.monotonic)  # type: ignore[arg-type]
    return Lease(state)


def _call(cap: int) -> Call:
    """A call whose worst case at DOLLAR_A_TOKEN is ``cap`` dollars (its input costs nothing)."""
    return Call([{"role": "user", "content": "q"}], {"max_tokens": cap}, False, "openai", "chat")


def test_room_granted_to_an_attempt_cancelled_at_once_goes_back_to_the_budget():
    """A $10 budget, an attempt of $6 in flight and one of $6 waiting: when the first settles,
    the room goes to the second, which is cancelled before it runs (its caller went away).
    Its $6 is given back: nothing stays reserved, and an attempt of the whole $10 is granted
    at once."""

    async def main() -> tuple[float, object]:
        ledger = LocalLedger(10.0)
        budget = Budget(10.0, {"b": DOLLAR_A_TOKEN}, ledger, RunControl())
        first = _lease()
        assert budget.reserve(first, 0, _call(6)) is None  # granted now
        waiting = asyncio.ensure_future(budget.reserve(_lease(), 0, _call(6)))  # type: ignore[arg-type]
        await asyncio.sleep(0)  # it waits in line
        budget.settle(first, 0.0)  # the room goes to the waiting attempt...
        waiting.cancel()  # ...cancelled before it could run
        try:
            await waiting
        except asyncio.CancelledError:
            pass
        return ledger.reserved, budget.reserve(_lease(), 0, _call(10))

    assert (0.0, None) == asyncio.run(main())


def test_a_new_call_never_takes_budget_room_ahead_of_one_waiting(tmp_path, billing_server):
    """Through ``rrcli.Pool``: a call of $0.005 in flight, then one of $0.008 that must wait for
    it ($0.0125 budget), then one of $0.003 that would fit beside the first: the small one waits
    its turn behind the waiting one (first come, first served), so the server gets the waiting
    call before the newer one; all three are answered."""
    server = billing_server(writes=5, latency_s=0.4)
    entry = {"id": "b0", "base_url": server.openai_url, "model": "gpt-4o", "price": GPT_4O,
             "max_concurrency": 8}  # fmt: skip
    path = write_profile(tmp_path / "pool.toml", [entry], name="pool")

    async def main() -> list[dict]:
        async with rrcli.Pool.from_profile(path, max_cost=0.0125) as pool:

            def ask(word: str, cap: int) -> asyncio.Future[dict]:
                messages = [{"role": "user", "content": word}]
                return asyncio.ensure_future(pool.chat(messages, max_tokens=cap))

            calls = [ask("first", 500)]
            await asyncio.sleep(0.1)  # the first is in flight
            calls.append(ask("waiting", 800))
            await asyncio.sleep(0.1)  # the second waits for the first's room
            calls.append(ask("newer", 300))
            return await asyncio.gather(*calls)

    records = asyncio.run(main())
    assert ["ok"] * 3 == [r["status"] for r in records]
    said = [body["messages"][0]["content"] for body in server.requests]
    assert ["first", "waiting", "newer"] == said


def test_a_call_cancelled_while_it_waits_for_its_rate_limit_gives_its_budget_room_back(
    tmp_path, billing_server
):
    """Through ``rrcli.Pool`` on a backend of one request a minute: a second call sets its
    worst case aside, then waits for the rate limit; cancelled there (its caller went away),
    it was never sent, and the budget holds nothing for it any more."""
    server = billing_server(writes=5)
    entry = {"id": "b0", "base_url": server.openai_url, "model": "gpt-4o", "price": GPT_4O,
             "rpm": 1}  # fmt: skip
    path = write_profile(tmp_path / "pool.toml", [entry], name="pool")

    async def main() -> tuple[float, float]:
        async with rrcli.Pool.from_profile(path, max_cost=1.0) as pool:
            await pool.chat([{"role": "user", "content": "first"}], max_tokens=100)
            second = asyncio.ensure_future(
                pool.chat([{"role": "user", "content": "second"}], max_tokens=100)
            )
            while pool.engine.status().budget.reserved == 0.0:  # its room is set aside
                await asyncio.sleep(0.01)
            waiting = pool.engine.status().budget.reserved
            second.cancel()
            await asyncio.gather(second, return_exceptions=True)
            return waiting, pool.engine.status().budget.reserved

    waiting, after = asyncio.run(main())
    assert waiting > 0.0
    assert 0.0 == after
    assert ["first"] == [body["messages"][0]["content"] for body in server.requests]
