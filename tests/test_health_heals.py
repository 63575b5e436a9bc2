"""Health's probes of a backend down (routing/health.py): when they run, what brings the
backend back, and that closing the engine ends them. The probe and the sleep are handed in, as
the engine hands in the backend's own provider (tests/test_serve_heals.py drives them over
HTTP)."""

from __future__ import annotations

import asyncio
import itertools

import orjson
import pytest

from rrcli import CallError, Pool
from rrcli.errors import ProviderError
from rrcli.records.trace import TraceWriter
from rrcli.routing.control import RunControl
from rrcli.routing.health import Health, probe_waits
from rrcli.routing.status import BudgetStatus, DeploymentStatus, EngineStatus
from tests.runkit import calls, free_port, read_jsonl, rrcli, write_jobs, write_profile
from tests.test_router import _profile, _router, _run

REFUSED = ProviderError("connect error: refused", type="connect_error", transient=True)
REVOKED = ProviderError("HTTP 401", type="http_401", transient=False, backend_down=True)


def test_probe_waits_double_from_recover_after_up_to_ten_minutes():
    """The waits before each probe: recover_after, then doubling, never past 600 s."""
    assert [0.5, 1.0, 2.0, 4.0, 8.0] == list(itertools.islice(probe_waits(0.5), 5))
    assert [30.0, 60.0, 120.0, 240.0, 480.0, 600.0, 600.0] == list(
        itertools.islice(probe_waits(30.0), 7)
    )


def _health(router, answers, waits, lines, recover_after=0.5):
    async def probe(deployment: str) -> ProviderError | None:
        return answers.pop(0) if len(answers) > 1 else answers[0]  # the last one repeats

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    traces = TraceWriter(None, "run-1", tap=lines.append)
    health = Health(
        router, traces, RunControl(), recover_after=recover_after, probe=probe, sleep=sleep
    )
    return health, traces


def test_a_backend_down_is_back_after_the_first_probe_answered():
    """b1 down: probed after 0.5 s, then 1 s, then 2 s; the third probe is answered and b1 is
    chosen again, the trace saying down then up."""

    async def main():
        router = _router(_profile())
        waits: list[float] = []
        lines: list[bytes] = []
        health, _ = _health(router, [REFUSED, REFUSED, None], waits, lines)
        health.down("b1", REVOKED)
        out = [router.healthy]
        await asyncio.gather(*health._probes.values())
        out.append(router.healthy)
        chosen = set()
        for _ in range(3):
            lease = await router.acquire()
            chosen.add(lease.state.backend.id)
            await router.release(lease)
        states = [(r["state"], r["reason"]) for r in map(orjson.loads, lines)]
        return out, waits, sorted(chosen), states

    assert (
        [2, 3],
        [0.5, 1.0, 2.0],
        ["b0", "b1", "b2"],
        [("down", "http_401"), ("up", "probe_ok")],
    ) == _run(main())


def test_without_recover_after_a_backend_stays_down_and_an_empty_pool_halts():
    """recover_after 0 (a run's default): no probe; every backend down halts the run."""

    async def main():
        router = _router(_profile(caps=(1, 1)))
        health, _ = _health(router, [], [], [], recover_after=0.0)
        health.down("b0", REVOKED)
        health.down("b1", REVOKED)
        return dict(health._probes), router.healthy, health.control.halted.reason

    assert ({}, 0, "no_backend") == _run(main())


def test_closing_ends_the_probes_of_a_backend_that_never_answers():
    """A probe that keeps failing goes on until ``close`` cancels it; the backend stays down."""

    async def main():
        router = _router(_profile())
        waits: list[float] = []
        health, _ = _health(router, [REFUSED], waits, [])
        health.down("b2", REFUSED)
        (probing,) = health._probes.values()
        while len(waits) < 12:
            await asyncio.sleep(0)
        going = not probing.done()
        await health.close()
        return going, probing.cancelled(), dict(health._probes), router.states[2].down, waits[-1]

    assert (True, True, {}, "connect_error", 600.0) == _run(main())


def test_a_pool_closed_leaves_no_probe_running(tmp_path, sim_server):
    """rrcli.Pool over a backend whose server refuses its key: the backend goes down and is
    probed every 0.05 s (then 0.1, 0.2...); once the pool is closed no probe reaches the server
    any more, and no task of it is left running."""
    sim = sim_server(api_keys=("sk-the-servers-key-0123",))
    backends = [{"id": "b0", "base_url": sim.openai_url, "auth": "key",
                 "credentials": {"api_key": "sk-another-key-4567"}}]  # fmt: skip
    path = write_profile(tmp_path / "p.toml", backends, health={"recover_after": 0.05})

    def requests() -> int:  # the server's count, asked from a thread: the loop goes on meanwhile
        return sim.stats()["requests"]

    async def main():
        async with Pool.from_profile(path) as pool:
            with pytest.raises(CallError):
                await pool.chat([{"role": "user", "content": "hi"}])
            while await asyncio.to_thread(requests) < 3:  # the call, then probes
                await asyncio.sleep(0.05)
        closed = await asyncio.to_thread(requests)
        await asyncio.sleep(1.0)
        healing = [t for t in asyncio.all_tasks() if "_heal" in repr(t.get_coro())]
        return await asyncio.to_thread(requests) - closed, healing

    assert (0, []) == _run(main())


def test_the_status_is_ready_only_while_a_deployment_is_up_and_budget_is_left():
    """``EngineStatus.ready`` (what /ready says): a deployment up and the engine running with
    budget left; not while every deployment is down or cooling, nor once the budget is spent."""

    def deployment(state: str) -> DeploymentStatus:
        why = None if state == "up" else "http_401"
        return DeploymentStatus("b", state, why, 0, 1, 1, 0.0, 0.0, 0, 0, 0, 0)

    def ready(states, budget=None, control="running") -> bool:
        return EngineStatus(tuple(map(deployment, states)), budget, control).ready

    left, spent = BudgetStatus(1.0, 0.5, 0.1, 0.4), BudgetStatus(1.0, 1.0, 0.0, 0.0)
    assert [True, False, False, True, False, False] == [
        ready(["down", "up"]),
        ready(["down", "cooling"]),
        ready(["down", "down"]),
        ready(["up"], left),
        ready(["up"], spent),
        ready(["up"], None, "draining"),
    ]


def test_a_recover_after_past_ten_minutes_is_a_profile_error_naming_the_bound(tmp_path):
    """``[health] recover_after = 900``: validate names the key, the bound and the fix; 0.5 is
    valid and shown in the normalized profile."""
    backends = [{"id": "a", "base_url": "http://127.0.0.1:9/v1"}, {"id": "b", "provider": "sim"}]
    bad = write_profile(tmp_path / "bad.toml", backends, health={"recover_after": 900})
    good = write_profile(tmp_path / "good.toml", backends, health={"recover_after": 0.5})
    refused = rrcli("validate", bad, cwd=tmp_path)
    shown = rrcli("validate", "--json", good, cwd=tmp_path)
    assert 1 == refused.returncode
    assert "health.recover_after: must be between 0 and 600" in refused.stdout + refused.stderr
    assert {"recover_after": 0.5} == orjson.loads(shown.stdout)["profile"]["health"]


def test_rrcli_run_keeps_a_401_backend_down_unless_its_profile_says_recover_after(
    tmp_path, sim_server
):
    """The same run twice over a healthy backend and one whose key is refused: by default the
    refused backend is sent only the calls the trace records (no probe) and the trace has one
    ``backend`` record; with ``[health] recover_after = 0.1`` it is probed while the run lasts
    (requests the trace does not record), still down (the key is still wrong)."""
    healthy = sim_server(latency_ms=40)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 40)
    seen = []
    for health in ({}, {"health": {"recover_after": 0.1}}):
        dead = sim_server(api_keys=("sk-the-servers-key-0123",))
        backends = [
            {"id": "ok", "base_url": healthy.openai_url, "max_concurrency": 2},
            {"id": "dead", "base_url": dead.openai_url, "auth": "key",
             "credentials": {"api_key": "sk-another-key-4567"}},
        ]  # fmt: skip
        profile = write_profile(tmp_path / "p.toml", backends, **health)
        traces = tmp_path / f"t{len(seen)}.jsonl"
        result = rrcli(
            "run", jobs, "-p", profile, "-q", "--traces", traces,
            "--out", tmp_path / f"r{len(seen)}.jsonl", cwd=tmp_path,
        )  # fmt: skip
        assert 0 == result.returncode, result.stderr
        traced = sum(c["deployment"] == "dead" for c in calls(traces))
        states = [r["state"] for r in read_jsonl(traces) if r["event"] == "backend"]
        seen.append((dead.stats()["requests"] > traced, states))
    assert [(False, ["down"]), (True, ["down"])] == seen


def test_a_backend_whose_server_is_gone_is_said_to_need_its_server_not_its_key(tmp_path):
    """A backend whose every connection is refused (no server at its port), with a key in a
    variable: once its retries are spent it leaves the pool, and what the run says to check is
    that its server runs at its address, never its key."""
    port = free_port()
    backends = [
        {"id": "gone", "base_url": f"http://127.0.0.1:{port}/v1", "auth": "key",
         "credentials": {"api_key_env": "GONE_KEY"}},
    ]  # fmt: skip
    profile = write_profile(
        tmp_path / "p.toml", backends, health={"recover_after": 5}, retry={"max_retries": 1}
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2)
    result = rrcli(
        "run", jobs, "-p", profile, "--out", tmp_path / "r.jsonl", cwd=tmp_path,
        env={"GONE_KEY": "sk-a-key-for-the-gone-server-0123"},
    )  # fmt: skip
    said = result.stdout + result.stderr
    assert 1 == result.returncode, said
    assert f"check that the server at http://127.0.0.1:{port}/v1 is running" in said
    assert "GONE_KEY" not in said
