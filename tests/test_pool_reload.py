"""``rrcli.Pool.reload``: the backends a reloaded profile names, the sessions bound to them, and
what a reload refuses. Real sim servers on 127.0.0.1, the pool in this process."""

from __future__ import annotations

import asyncio

import pytest
from runkit import calls, write_profile
from test_redis_gate import _server

from rrcli import Pool
from rrcli.config.load import load_profile
from rrcli.errors import UsageError

HI = [{"role": "user", "content": "hi"}]


def _backends(*sims, **extra) -> list[dict]:
    return [{"id": f"b{i}", "base_url": s.openai_url, **extra} for i, s in enumerate(sims)]


def test_a_session_stays_on_a_changed_backend_and_moves_off_a_removed_one(tmp_path, sim_server):
    """A session bound to b0; the profile reloaded with b0's cap changed and b1 added: the
    session's next turn stays on b0 (its binding as made); reloaded again without b0: its next
    turn is answered by b1, traced ``rebound`` for ``removed``; each reload says what it
    changed."""
    first, second = sim_server(), sim_server()
    path = tmp_path / "pool.toml"
    traces = tmp_path / "t.jsonl"
    write_profile(path, _backends(first), binding="session")
    both = _backends(first, second, max_concurrency=3)

    async def main():
        async with Pool.from_profile(path, traces=traces) as pool:
            await pool.chat(HI, session="s")
            write_profile(path, both, binding="session")
            said = [pool.reload(load_profile(path))]
            await pool.chat(HI, session="s")
            write_profile(path, both[1:], binding="session")
            said.append(pool.reload(load_profile(path)))
            await pool.chat(HI, session="s")
            return [(r.added, r.removed, r.changed) for r in said]

    said = asyncio.run(main())
    turns = [(c["deployment"], c["binding"], c["rebound_for"]) for c in calls(traces)]
    assert [(("b1",), (), ("b0",)), ((), ("b0",), ())] == said
    assert [("b0", "new", None), ("b0", "new", None), ("b1", "rebound", "removed")] == turns


def test_a_reload_changing_more_than_the_backends_is_refused(tmp_path, sim_server):
    """A profile whose strategy changed, or whose new backend's key variable is unset: the
    reload raises UsageError naming what to fix, and the pool goes on with its backends."""
    first, second = sim_server(), sim_server()
    path = tmp_path / "pool.toml"
    write_profile(path, _backends(first))
    keyed = {"id": "b1", "base_url": second.openai_url, "auth": "key",
             "credentials": {"api_key_env": "RRCLI_TEST_UNSET_KEY"}}  # fmt: skip

    async def main():
        async with Pool.from_profile(path) as pool:
            errors = []
            for changed in ({"strategy": "least_loaded"}, {}):
                backends = _backends(first) + ([] if changed else [keyed])
                write_profile(path, backends, **changed)
                with pytest.raises(UsageError) as caught:
                    pool.reload(load_profile(path, environ={}))
                errors.append(str(caught.value))
            answered = await pool.chat(HI)
            return errors, answered["deployment"], [b.id for b in pool.profile.backends]

    errors, deployment, ids = asyncio.run(main())
    assert ("b0", ["b0"]) == (deployment, ids)
    assert "strategy changed" in errors[0] and "restart" in errors[0]
    assert "RRCLI_TEST_UNSET_KEY" in errors[1]


@pytest.fixture
def redis_server():
    yield from _server()


def test_a_reload_on_a_redis_gate_gives_new_and_changed_backends_their_caps(
    tmp_path, sim_server, redis_server
):
    """A pool on a Redis gate over b0 (cap 1), reloaded with b0's cap raised to 2 and b1 (cap
    2) added, then sent 12 calls at once: every call is answered, by both backends, each
    server having at most, and at some moment, as many calls at once as its new cap."""
    sims = sim_server(latency_ms=100), sim_server(latency_ms=100)
    gate = {"kind": "redis", "url": redis_server.url, "lease": 5.0}
    path = tmp_path / "pool.toml"
    write_profile(path, _backends(sims[0], max_concurrency=1), gate=gate)

    async def main():
        async with Pool.from_profile(path) as pool:
            await pool.chat(HI)
            write_profile(path, _backends(*sims, max_concurrency=2), gate=gate)
            pool.reload(load_profile(path))
            answers = await asyncio.gather(*(pool.chat(HI) for _ in range(12)))
            return sorted({a["deployment"] for a in answers}), len(answers)

    used, answered = asyncio.run(main())
    peaks = [s.stats()["peak_concurrency"] for s in sims]
    assert (["b0", "b1"], 12) == (used, answered)
    assert [2, 2] == peaks
