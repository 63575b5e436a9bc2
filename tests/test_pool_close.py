"""``Pool.close`` with calls in flight, against a server that counts what it is sent and bills
it (tests/billing.py): calls not yet sent never are and end in ``CallError`` of type ``closed``;
calls in flight finish, or past the close's timeout are cancelled; every call sent has its
record in the trace and its charge in the run_end's spend."""

from __future__ import annotations

import asyncio
import time

from billing import GPT_4O
from runkit import calls, read_jsonl, write_profile

import rrcli

HI = [{"role": "user", "content": "Hi"}]


def _capped_pool(tmp_path, server):
    entry = {"id": "b0", "base_url": server.openai_url, "model": "gpt-4o", "max_concurrency": 2}
    entry["price"] = GPT_4O
    return write_profile(tmp_path / "pool.toml", [entry])


async def _when(condition, within=10.0):
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def _close_with_five_calls(tmp_path, server, timeout):
    """Five chat calls on a pool of 2 in flight, the pool closed once two were sent: how each
    call ended (a record or a CallError) and the trace."""
    traces = tmp_path / "pool.traces.jsonl"

    async def main():
        pool = rrcli.Pool.from_profile(_capped_pool(tmp_path, server), traces=traces, max_cost=5)
        await pool.open()
        five = [asyncio.ensure_future(pool.chat(HI)) for _ in range(5)]
        await _when(lambda: len(server.requests) == 2)
        await asyncio.sleep(0.05)  # the three others wait for a slot
        await pool.close(timeout=timeout)
        return await asyncio.gather(*five, return_exceptions=True)

    return asyncio.run(main()), traces


def test_closing_sends_no_waiting_call_and_lets_the_two_in_flight_finish(tmp_path, billing_server):
    """Closed with two calls in flight and three waiting on a cap of 2: the two answer, the
    three end in CallError ``closed`` and the server never saw them; the trace holds the two
    call records, and the run_end's spend is what the server billed."""
    server = billing_server(latency_s=0.4)
    ended, traces = _close_with_five_calls(tmp_path, server, timeout=10)
    answered = [e["status"] for e in ended if isinstance(e, dict)]
    closed = [e.type for e in ended if isinstance(e, rrcli.CallError)]
    assert (["ok", "ok"], ["closed"] * 3) == (answered, closed)
    assert (2, 2) == (len(server.requests), server.ledger.calls)
    assert ["ok", "ok"] == [c["outcome"] for c in calls(traces)]
    (end,) = [r for r in read_jsonl(traces) if r["event"] == "run_end"]
    assert round(server.billed(), 12) == round(end["budget"]["spent"], 12)
    assert server.billed() > 0


def test_calls_in_flight_past_the_timeout_are_cancelled_and_traced(tmp_path, billing_server):
    """Closed with a timeout shorter than the calls: the two in flight are cancelled, each
    traced ``cancelled`` with the reason ``closed``; all five end in CallError ``closed`` and
    the three waiting were never sent."""
    server = billing_server(latency_s=5)
    ended, traces = _close_with_five_calls(tmp_path, server, timeout=0.2)
    assert ["closed"] * 5 == [e.type for e in ended if isinstance(e, rrcli.CallError)]
    assert 2 == len(server.requests)
    records = [(c["outcome"], c["error_type"]) for c in calls(traces)]
    assert [("cancelled", "closed")] * 2 == records


def test_a_call_made_while_the_pool_closes_is_never_sent(tmp_path, billing_server):
    """A call made once ``close`` began ends in CallError ``closed`` at once, unsent."""
    server = billing_server(latency_s=0.3)
    traces = tmp_path / "pool.traces.jsonl"

    async def main():
        pool = rrcli.Pool.from_profile(_capped_pool(tmp_path, server), traces=traces)
        await pool.open()
        first = asyncio.ensure_future(pool.chat(HI))
        await _when(lambda: len(server.requests) == 1)
        closing = asyncio.ensure_future(pool.close())
        await asyncio.sleep(0.01)
        late = await asyncio.gather(pool.chat(HI), return_exceptions=True)
        await closing
        return (await first)["status"], late[0]

    status, late = asyncio.run(main())
    assert ("ok", "closed") == (status, late.type)
    assert 1 == len(server.requests)


def test_a_call_in_flight_that_fails_is_not_retried_once_the_pool_closes(tmp_path, billing_server):
    """A call whose attempt in flight fails (a 503, which is retried) while the pool closes
    sends no retry: it ends in CallError ``closed`` after its one attempt, which is traced."""
    server = billing_server(latency_s=0.3, fail_every=1)
    traces = tmp_path / "pool.traces.jsonl"

    async def main():
        pool = rrcli.Pool.from_profile(_capped_pool(tmp_path, server), traces=traces)
        await pool.open()
        call = asyncio.ensure_future(pool.chat(HI))
        await _when(lambda: len(server.requests) == 1)
        await pool.close(timeout=10)
        return (await asyncio.gather(call, return_exceptions=True))[0]

    error = asyncio.run(main())
    assert ("closed", 1) == (error.type, error.result["attempts"])
    assert 1 == len(server.requests)
    assert [("retry", "http_503")] == [(c["outcome"], c["error_type"]) for c in calls(traces)]
