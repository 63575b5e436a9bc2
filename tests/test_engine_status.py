"""``Engine.status()``: one frozen picture of the engine, per deployment (state, load, cap,
cooldown, spend, sessions, counts), the budget and the run's switch, read through a real pool
over ``rrcli sim`` servers; and ``/metrics``, ``/ready`` and the gateway's cooling check, which
read nothing else of the engine."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from runkit import calls, write_profile

import rrcli
from rrcli.routing.status import BudgetStatus, DeploymentStatus, EngineStatus

HI = [{"role": "user", "content": "Hi"}]
PRICE = {"input": 200.0, "output": 1000.0}  # USD per million tokens
CHAT = {"model": "pool", "messages": HI}


def _profile(tmp_path, bad, good, **top):
    """``bad`` answers every call 503 (retried twice, cooled after 3 failures in a row for a
    minute); ``good`` answers; both priced."""
    backends = [
        {"id": "bad", "base_url": bad.openai_url, "headers": {"x-sim-status": "503"}},
        {"id": "good", "base_url": good.openai_url},
    ]
    for backend in backends:
        backend.update(price=PRICE, max_concurrency=4, params={"max_tokens": 40})
    top.setdefault("cooldown", {"consecutive_failures": 3, "duration": 60.0})
    return write_profile(
        tmp_path / "pool.toml", backends, name="pool", retry={"max_retries": 2}, **top
    )


def _pool(path, traces, work, **options):
    async def main():
        async with rrcli.Pool.from_profile(path, traces=traces, **options) as pool:
            return await work(pool)

    return asyncio.run(main())


async def _chats(pool, n):
    """``n`` calls one after the other, each ``ok`` or its error's type."""
    outcomes = []
    for _ in range(n):
        try:
            outcomes.append((await pool.chat(HI))["status"])
        except rrcli.CallError as exc:
            outcomes.append(exc.type)
    return outcomes


def _traced(traces):
    """Per deployment from the trace: (ok, retry, error attempts, USD charged)."""
    seen: dict[str, list] = {}
    for call in calls(traces):
        counts = seen.setdefault(call["deployment"], [0, 0, 0, 0.0])
        counts[["ok", "retry", "error"].index(call["outcome"])] += 1
        counts[3] += call["cost_usd"] or 0.0
    return {k: (ok, retry, error, round(usd, 6)) for k, (ok, retry, error, usd) in seen.items()}


def test_after_a_run_with_failures_the_status_counts_what_the_trace_holds(tmp_path, sim_server):
    """Four calls, round robin over a failing and a good backend: each deployment's ok,
    retried and error counts and its spend are the trace's; the failing one is cooling (why,
    and a cooldown left of at most a minute), the good one is up; the budget spent is the
    engine's spend, and the engine is still running."""
    traces = tmp_path / "t.jsonl"
    path = _profile(tmp_path, sim_server(), sim_server())

    async def work(pool):
        return await _chats(pool, 4), pool.engine.status()

    outcomes, status = _pool(path, traces, work, max_cost=10.0)
    assert ["http_503", "ok", "http_503", "ok"] == outcomes
    by_id = {d.id: d for d in status.deployments}
    counted = {d.id: (d.ok, d.retried, d.errors, round(d.spent, 6)) for d in status.deployments}
    assert _traced(traces) == counted
    bad, good = by_id["bad"], by_id["good"]
    assert ("cooling", "consecutive_failures", True) == (
        bad.state,
        bad.why,
        0.0 < bad.cooldown_s <= 60.0,
    )
    assert ("up", None, 0.0, 0, 4) == (
        good.state,
        good.why,
        good.cooldown_s,
        good.in_flight,
        good.cap,
    )
    assert good.spent > 0.0
    assert isinstance(status.budget, BudgetStatus)
    assert (10.0, round(status.spent, 9), 0.0) == (
        status.budget.limit,
        round(status.budget.spent, 9),
        status.budget.reserved,
    )
    assert round(10.0 - status.spent, 9) == round(status.budget.left, 9)
    assert ("running", None, False) == (status.control, status.halt, status.stopping)


def test_a_status_taken_during_a_call_shows_it_and_never_changes(tmp_path, sim_server):
    """A picture taken while a call is in flight says so (its deployment's load, nothing
    counted yet); after the call it is unchanged and a new one counts the call; no field of
    either can be set."""
    good = sim_server(latency_ms=300)
    path = write_profile(
        tmp_path / "pool.toml", [{"id": "good", "base_url": good.openai_url, "price": PRICE}]
    )

    async def work(pool):
        call = asyncio.create_task(pool.chat(HI))
        before = pool.engine.status()
        while before.in_flight == 0:
            await asyncio.sleep(0.01)
            before = pool.engine.status()
        kept = (before.in_flight, before.deployments[0].ok, before.spent)
        await call
        return before, kept, pool.engine.status()

    before, kept, after = _pool(path, tmp_path / "t.jsonl", work)
    assert (1, 0, 0.0) == kept
    assert kept == (before.in_flight, before.deployments[0].ok, before.spent)
    assert (0, 1, True) == (after.in_flight, after.deployments[0].ok, after.spent > 0.0)
    assert (None, "running") == (after.budget, after.control)
    for record, field in ((before, "control"), (before.deployments[0], "ok")):
        with pytest.raises(AttributeError):
            setattr(record, field, None)
    assert (EngineStatus, DeploymentStatus) == (type(after), type(after.deployments[0]))


def _gateway(tmp_path, sim_server, backends, work, **top):
    """``work(pool, http)`` with the pool open and an httpx2 client over the gateway's app in
    this process (``rrcli.PoolTransport``)."""
    path = write_profile(tmp_path / "pool.toml", backends, name="pool", **top)

    async def main():
        pool = rrcli.Pool.from_profile(path, traces=tmp_path / "t.jsonl")
        async with pool, httpx2.AsyncClient(transport=rrcli.PoolTransport(pool)) as http:
            return await work(pool, http)

    return asyncio.run(main())


def test_metrics_report_each_deployments_calls_in_flight_from_the_status(tmp_path, sim_server):
    """``/metrics`` scraped while a request is in flight: the deployment's calls in flight
    gauge is the status's in_flight then; after the answer, 0."""
    slow = sim_server(latency_ms=300)
    backends = [{"id": "b0", "base_url": slow.openai_url}]

    async def work(pool, http):
        answer = asyncio.create_task(http.post("http://pool/v1/chat/completions", json=CHAT))
        while pool.engine.status().in_flight == 0:
            await asyncio.sleep(0.01)
        during = (await http.get("http://pool/metrics")).text
        seen = pool.engine.status().deployments[0].in_flight
        status = (await answer).status_code
        return during, seen, status, (await http.get("http://pool/metrics")).text

    during, seen, status, after = _gateway(tmp_path, sim_server, backends, work)
    gauge = 'rrcli_deployment_calls_in_flight{deployment="b0"}'
    assert (200, 1) == (status, seen)
    assert f"{gauge} 1.0" in during.splitlines()
    assert f"{gauge} 0.0" in after.splitlines()


def test_ready_follows_the_control_state_in_the_status(tmp_path, sim_server):
    """``/ready`` says ready while the engine runs, and 503 once its status says it drains."""
    backends = [{"id": "b0", "base_url": sim_server().openai_url}]

    async def work(pool, http):
        ready = await http.get("http://pool/ready")
        pool.engine.control.stop()
        draining = pool.engine.status().control
        stopped = await http.get("http://pool/ready")
        return ready.status_code, ready.json(), draining, stopped.status_code, stopped.json()

    result = _gateway(tmp_path, sim_server, backends, work)
    assert (200, {"ready": True}, "draining", 503, {"ready": False}) == result


def test_the_gateway_answers_429_at_once_while_the_status_says_every_backend_cools(
    tmp_path, sim_server
):
    """One backend that fails three times in a row cools for a minute: the next request is
    answered 429 with a Retry-After of the cooldown the status shows, and never sent."""
    bad = sim_server()
    backends = [{"id": "b0", "base_url": bad.openai_url, "headers": {"x-sim-status": "503"}}]

    async def work(pool, http):
        failed = await http.post("http://pool/v1/chat/completions", json=CHAT)
        sent = len(bad.received())
        cooling = pool.engine.status()
        refused = await http.post("http://pool/v1/chat/completions", json=CHAT)
        return failed.status_code, sent, cooling, refused, len(bad.received())

    failed, sent, cooling, refused, sent_after = _gateway(
        tmp_path,
        sim_server,
        backends,
        work,
        retry={"max_retries": 2, "backoff_initial": 0.01, "backoff_max": 0.05},
        cooldown={"consecutive_failures": 3, "duration": 60.0},
    )
    left = cooling.cooling()
    assert (3, 3, True) == (sent, sent_after, left is not None and 59.0 < left <= 60.0)
    assert (502, 429, "60") == (failed, refused.status_code, refused.headers["retry-after"])
