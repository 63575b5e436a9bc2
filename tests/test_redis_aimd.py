"""The Redis gate's shared adaptive cap follows the local gate's rule, step for step.

``gate.aimd_step`` is the specification (halve on a 429 and remember the load that drew it, the
ceiling; regrow by one a success below it; reach it again only after ``probe`` runs, a repeated
429 there setting the cap just below it and doubling ``probe``; forget the ceiling after
``probe`` runs at it; ignore 429s of calls already in flight). The Lua script
``_scripts.AIMD`` runs the same rule atomically in a real redis-server, fed through
``RedisGate.record`` as the runner feeds it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest
import redis.asyncio as aredis
from hypothesis import given, settings
from hypothesis import strategies as st
from test_redis_gate import RedisServer, _server, profile

from rrcli.fleet.redis_gate import make_redis_gates
from rrcli.routing.gate import PROBE_INITIAL, Aimd, aimd_step


def key(max_cap: int) -> str:
    """The shared adaptive state of scope "b" whose cap is ``max_cap``."""
    return f"rrcli:{{b}}:aimd:{max_cap}"


Event = tuple[bool, bool]  # (rate_limited, held)


@pytest.fixture(scope="module")
def aimd_redis() -> Iterator[RedisServer]:
    """One redis-server for this module; each example flushes it."""
    yield from _server()


async def shared_states(url: str, max_cap: int, events: list[Event]) -> list[Aimd]:
    """Feed ``events`` to one scope's Redis gate; the shared state read back after each step.

    ``held`` is set as the script's own ``hold`` count (1: this report comes from a call that
    was in flight when the cap last halved), which is what ``aimd_step``'s ``held`` means."""
    client = aredis.Redis.from_url(url, decode_responses=True)
    await client.flushall()
    gates = make_redis_gates(profile(url, cap=max_cap, adaptive=True), rng=random.Random(0))
    gate = gates["b"]
    states = []
    for rate_limited, held in events:
        await client.hset(key(max_cap), "hold", int(held))
        gate.record(rate_limited)
        await asyncio.gather(*gate.hub._tasks)
        fields = ("cap", "streak", "ceiling", "probe")
        cap, streak, ceiling, probe = await client.hmget(key(max_cap), *fields)
        states.append(Aimd(int(cap), int(streak), int(ceiling), int(probe)))
        assert states[-1].cap == gate.cap  # what this process sees is the shared cap
    await gates.close()
    await client.aclose()
    return states


def local_states(max_cap: int, events: list[Event]) -> list[Aimd]:
    state, states = Aimd(max_cap), []
    for rate_limited, held in events:
        state = aimd_step(state, max_cap, rate_limited, held)
        states.append(state)
    return states


@st.composite
def event_sequences(draw: st.DrawFn) -> tuple[int, list[Event]]:
    """A cap and runs of successes each ended by a 429 (sometimes from a call in flight), long
    enough to regrow to a ceiling, probe it, and forget it."""
    max_cap = draw(st.integers(1, 6))
    events: list[Event] = []
    for _ in range(draw(st.integers(0, 8))):
        held_ok = draw(st.booleans())  # held means nothing to a success: both must ignore it
        events += [(False, held_ok)] * draw(st.integers(0, 2 * max_cap * PROBE_INITIAL))
        events.append((True, draw(st.booleans())))
    events += [(False, False)] * draw(st.integers(0, 30))
    return max_cap, events


@settings(max_examples=30, deadline=None)
@given(case=event_sequences())
def test_the_redis_script_and_aimd_step_agree_after_every_event(aimd_redis, case):
    """Any sequence of (rate_limited, held) reports leaves the shared state in Redis (cap, streak,
    ceiling, probe) exactly where ``aimd_step`` leaves the local one, after every report."""
    max_cap, events = case
    assert local_states(max_cap, events) == asyncio.run(
        shared_states(aimd_redis.url, max_cap, events)
    )


def test_two_processes_share_the_ceiling_and_its_probe(aimd_redis):
    """With cap 4, a 429 seen by one process halves the shared cap to 2; successes reported by
    either process regrow it to 3 at the first (below the ceiling), but to 4 (where the 429
    came) only after 3 × PROBE_INITIAL; a second 429 there sets it just below (3) and doubles
    the probe; as many runs of 4 successes at the ceiling as the probe forget it."""

    async def main() -> list[tuple[int, int, int]]:
        url = aimd_redis.url
        client = aredis.Redis.from_url(url, decode_responses=True)
        await client.flushall()
        a, b = (
            make_redis_gates(profile(url, cap=4, adaptive=True), rng=random.Random(i))
            for i in range(2)
        )
        seen = []

        async def report(rate_limited: bool, times: int = 1) -> None:
            for i in range(times):
                gate = (a, b)[i % 2]["b"]
                gate.record(rate_limited)
                await asyncio.gather(*gate.hub._tasks)
            cap, ceiling, probe = await client.hmget(key(4), "cap", "ceiling", "probe")
            seen.append((int(cap), int(ceiling), int(probe)))

        await report(True)
        await report(False, 2)
        await report(False, 3 * PROBE_INITIAL - 2)
        await report(False)
        await report(True)
        await report(False, 3 * 2 * PROBE_INITIAL)
        await report(False, 4 * 2 * PROBE_INITIAL)
        for s in (a, b):
            await s.close()
        await client.aclose()
        return seen

    assert [
        (2, 4, PROBE_INITIAL),
        (3, 4, PROBE_INITIAL),
        (3, 4, PROBE_INITIAL),
        (4, 4, PROBE_INITIAL),
        (3, 4, 2 * PROBE_INITIAL),
        (4, 4, 2 * PROBE_INITIAL),
        (4, 0, PROBE_INITIAL),
    ] == asyncio.run(main())
