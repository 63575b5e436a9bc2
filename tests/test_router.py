"""The router: decisions that return holding one slot, live counters, cooldowns, sessions,
failover exclusions and first_available's queue (SPEC §6, §8)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rrcli.config.profile import STRATEGIES, Backend, CooldownSettings, GateSettings, Profile
from rrcli.errors import NoBackendError, ProviderError
from rrcli.providers.base import Reply
from rrcli.records.attempt import Attempt
from rrcli.routing.gate import PROBE_INITIAL, LocalGate, make_gates
from rrcli.routing.lease import BackendState, Lease
from rrcli.routing.router import Router
from tests.test_gate_fakes import FakeTime

T = TypeVar("T")


def _profile(strategy: str = "round_robin", caps=(2, 2, 2), **kw) -> Profile:
    backends = tuple(Backend(f"b{i}", max_concurrency=c) for i, c in enumerate(caps))
    return Profile(strategy=strategy, backends=backends, **kw)


def _router(profile: Profile, fake: FakeTime | None = None, gates=None, seed: int = 0) -> Router:
    clock = fake.clock if fake else time.monotonic
    sleep = fake.sleep if fake else asyncio.sleep
    gates = gates or make_gates(profile, clock=clock, sleep=sleep)
    return Router(profile, gates, rng=random.Random(seed), clock=clock, sleep=sleep)


def _rate_limited(retry_after: float | None = None) -> ProviderError:
    return ProviderError(
        "slow down",
        type="http_429",
        transient=True,
        status_code=429,
        retry_after=retry_after,
        rate_limited=True,
    )


def _attempt(
    state: BackendState,
    *,
    error: ProviderError | None = None,
    latency_ms: float = 10.0,
    retried: bool = False,
) -> Attempt:
    """An attempt on ``state``'s backend: failed with ``error`` (``retried``: another attempt
    follows), else a success in ``latency_ms``."""
    reply = None if error is not None else Reply("ok", http_status=200)
    decision = "ok" if error is None else "retry" if retried else "error"
    ended = latency_ms / 1000.0
    return Attempt(
        job_id="j",
        session="j",
        turn=0,
        number=1,
        backend=state.backend,
        binding=None,
        stream=False,
        endpoint="chat",
        ts_start=0.0,
        started=0.0,
        ended=ended,
        queue_s=0.0,
        estimate=0,
        reply=reply,
        error=error,
        decision=decision,
    )


def _run(main: Coroutine[object, object, T]) -> T:
    """Run a test's coroutine; a regression that deadlocks fails after 10 s instead of hanging."""
    return asyncio.run(asyncio.wait_for(main, 10.0))


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _ids(leases: list[Lease]) -> list[str]:
    return [lease.state.backend.id for lease in leases]


def test_round_robin_through_the_router():
    """Six decisions over three backends go b0 b1 b2 b0 b1 b2, each holding one slot."""

    async def main() -> tuple[list[str], list[int]]:
        router = _router(_profile())
        leases = [await router.acquire() for _ in range(6)]
        return _ids(leases), [s.in_flight for s in router.states]

    assert (["b0", "b1", "b2", "b0", "b1", "b2"], [2, 2, 2]) == _run(main())


def test_round_robin_waits_for_its_backend_when_full():
    """Round robin stays strict: the third decision belongs to b0 (full) and waits for it, though
    b1 has a free slot."""

    async def main() -> list[object]:
        router = _router(_profile(caps=(1, 2)))
        first = await router.acquire()
        await router.acquire()
        third = asyncio.ensure_future(router.acquire())
        await _settle()
        waited = third.done()
        await router.release(first)
        lease = await third
        return [waited, lease.state.backend.id]

    assert [False, "b0"] == _run(main())


OPS = st.lists(st.sampled_from(("acquire", "release", "cancel")), max_size=30)


@settings(max_examples=25, deadline=None)
@given(strategy=st.sampled_from(STRATEGIES), ops=OPS, seed=st.integers(0, 1000))
def test_caps_hold_and_counters_never_drift_under_cancellation(strategy, ops, seed):
    """For every strategy, under random acquires, releases and cancellations: no gate ever holds
    more than its cap, each backend's in_flight equals the leases really held on it, and when
    everything is released or cancelled every counter is back to zero."""
    fake = FakeTime()
    rng = random.Random(seed)

    async def main() -> None:
        router = _router(_profile(strategy, caps=(1, 2, 1)), fake, seed=seed)
        held: list[Lease] = []
        pending: list[asyncio.Task[Lease]] = []

        async def take() -> Lease:
            lease = await router.acquire(session=None)
            held.append(lease)
            return lease

        def check() -> None:
            for s in router.states:
                assert s.gate.in_flight <= s.gate.cap
                assert sum(1 for lease in held if lease.state is s) == s.in_flight
                assert s.in_flight == s.gate.in_flight

        for op in ops:
            if op == "acquire":
                pending.append(asyncio.ensure_future(take()))
            elif op == "release" and held:
                await router.release(held.pop(rng.randrange(len(held))))
            elif op == "cancel" and pending:
                pending.pop(rng.randrange(len(pending))).cancel()
            await _settle()
            check()
        for task in pending:
            task.cancel()
        await _settle()
        while held:
            await router.release(held.pop())
            await _settle()
            check()
        assert [0, 0, 0] == [s.in_flight for s in router.states]
        assert [0, 0, 0] == [s.gate.in_flight + s.gate.waiting for s in router.states]

    _run(main())


def test_least_loaded_share_stays_even_after_cancellations():
    """After 40 requests of which half are cancelled while waiting, least_loaded still spreads
    the next 300 sequential calls evenly (no drift like LiteLLM #39322's 94 %)."""

    async def main() -> list[int]:
        router = _router(_profile("least_loaded", caps=(2, 2, 2)))
        held = [await router.acquire() for _ in range(6)]
        waiting = [asyncio.ensure_future(router.acquire()) for _ in range(40)]
        await _settle()
        for task in waiting[::2]:
            task.cancel()
        for lease in held:
            await router.release(lease)
        await _settle()
        for task in waiting[1::2]:
            await router.release(await task)
        counts = {s.backend.id: 0 for s in router.states}
        for _ in range(300):
            lease = await router.acquire()
            counts[lease.state.backend.id] += 1
            await router.release(lease)
        return [*counts.values(), *(s.in_flight for s in router.states)]

    assert [100, 100, 100, 0, 0, 0] == _run(main())


def test_cooldown_extends_never_shortens_and_pauses_the_gate():
    """A 429 with Retry-After 10 cools b0 until t=10; a later 429 asking 2 s leaves it at 10;
    one asking 20 s extends it to 20. The gate takes no new call until then."""
    fake = FakeTime()
    router = _router(_profile("least_loaded"), fake)
    b0 = router.states[0]

    async def main() -> tuple[list[float], tuple[bool, bool]]:
        seen = []
        for retry_after in (10.0, 2.0, 20.0):
            await router.observe(_attempt(b0, error=_rate_limited(retry_after)))
            seen.append(b0.cooldown_until)
        return seen, (b0.cooling, router.states[1].cooling)  # before the fake clock moves on

    seen, cooling = _run(main())
    assert [10.0, 10.0, 20.0] == seen
    assert 20.0 == b0.gate.paused_until
    assert (True, False) == cooling


def test_consecutive_failures_cool_a_backend_and_a_success_resets_the_count():
    """cooldown.consecutive_failures = 2, duration 5: fail, succeed, fail leaves b0 warm; a second
    failure in a row cools it for 5 s."""
    fake = FakeTime(100.0)
    profile = _profile("least_loaded", cooldown=CooldownSettings(consecutive_failures=2))
    router = _router(profile, fake)
    b0 = router.states[0]
    error = ProviderError("down", type="http_503", transient=True, status_code=503)

    async def main() -> bool:
        await router.observe(_attempt(b0, error=error))
        await router.observe(_attempt(b0, latency_ms=10.0))
        await router.observe(_attempt(b0, error=error))
        warm = b0.cooling
        await router.observe(_attempt(b0, error=error))
        return warm

    warm = _run(main())
    assert (False, True, 105.0) == (warm, b0.cooling, b0.cooldown_until)


def test_cooling_backends_skipped_by_load_aware_not_by_strict_round_robin():
    """With b0 cooling, least_loaded never picks it; round robin still does unless
    cooldown.round_robin is set."""

    async def picks(strategy: str, cooldown: CooldownSettings) -> list[str]:
        router = _router(_profile(strategy, caps=(8, 8, 8), cooldown=cooldown), FakeTime())
        await router.observe(_attempt(router.states[0], error=_rate_limited(60.0)))
        router.states[0].gate.pause_until(0.0)  # keep only the cooldown in play
        return _ids([await router.acquire() for _ in range(4)])

    async def main() -> list[list[str]]:
        return [
            await picks("least_loaded", CooldownSettings()),
            await picks("round_robin", CooldownSettings()),
            await picks("round_robin", CooldownSettings(round_robin=True)),
        ]

    least, strict, skipping = _run(main())
    assert "b0" not in least
    assert ["b0", "b1", "b2", "b0"] == strict
    assert ["b1", "b1", "b2", "b1"] == skipping


def test_all_cooling_waits_for_the_earliest_recovery():
    """b0 cools until t=5, b1 until t=3: a request waits (no error) and is routed to b1 at t=3."""
    fake = FakeTime()
    router = _router(_profile("least_loaded", caps=(1, 1)), fake)

    async def main() -> tuple[str, float]:
        await router.observe(_attempt(router.states[0], error=_rate_limited(5.0)))
        await router.observe(_attempt(router.states[1], error=_rate_limited(3.0)))
        lease = await router.acquire()
        return lease.state.backend.id, fake.clock()

    assert ("b1", 3.0) == _run(main())


class CountingGate(LocalGate):
    """A real local gate that counts try_acquire calls."""

    tries = 0

    async def try_acquire(self) -> bool:
        CountingGate.tries += 1
        return await super().try_acquire()


def test_first_available_waiters_poll_at_a_bounded_rate_and_are_served_in_order():
    """20 requests wait on a full first_available pool of two gates for 1 s: only the head of the
    queue polls (30 ms doubling to 1 s), so the gates see at most 20 try_acquire calls, not one
    stream per request; freed slots go to the waiters in arrival order."""
    profile = _profile("first_available", caps=(1, 1))
    gates = {b.id: CountingGate(b.id, 1, clock=time.monotonic) for b in profile.backends}
    CountingGate.tries = 0

    async def main() -> tuple[int, list[int]]:
        router = _router(profile, gates=gates)
        held = [await router.acquire(), await router.acquire()]
        served: list[int] = []

        async def wait(i: int) -> Lease:
            lease = await router.acquire(session=f"s{i}")
            served.append(i)
            return lease

        tasks = []
        for i in range(20):
            tasks.append(asyncio.ensure_future(wait(i)))
            await _settle()
        CountingGate.tries = 0
        await asyncio.sleep(1.0)
        tries = CountingGate.tries
        for lease in held:
            await router.release(lease)
        await _settle()
        for task in tasks[2:]:
            task.cancel()
        await _settle()
        for task in tasks[:2]:
            await router.release(await task)
        assert [0, 0] == [s.in_flight + s.gate.in_flight for s in router.states]
        return tries, served

    tries, served = _run(main())
    assert tries <= 20
    assert [0, 1] == served


def test_first_available_serves_waiters_before_new_and_retrying_requests():
    """On a one-slot first_available pool with one request waiting, a release hands the slot to
    the waiter: neither a new request nor the releasing call's own retry (reacquire) overtakes."""

    async def main() -> list[object]:
        router = _router(_profile("first_available", caps=(1,)))
        lease = await router.acquire()
        waiter = asyncio.ensure_future(router.acquire())
        await _settle()
        await router.release(lease)
        newcomer = asyncio.ensure_future(router.acquire())
        retry = asyncio.ensure_future(router.reacquire(lease))
        await _settle()
        state = router.states[0]
        seen = [waiter.done(), newcomer.done(), retry.done(), state.in_flight, state.gate.in_flight]
        await router.release(await waiter)
        await retry
        await router.release(lease)
        await router.release(await newcomer)
        return [*seen, state.in_flight, state.gate.in_flight]

    assert [True, False, False, 1, 1, 0, 0] == _run(main())


def test_first_available_takes_one_admission_per_request():
    """The slot taken while choosing is the request's slot: one call, one slot held."""

    async def main() -> list[int]:
        router = _router(_profile("first_available"))
        await router.acquire()
        return [s.gate.in_flight for s in router.states]

    assert 1 == sum(_run(main()))


def test_session_binding_new_kept_rebound_and_request_binding_none():
    """binding = session: a session's calls stay where it first landed ("new"); a saved binding
    whose backend is in the pool is "kept"; one whose backend left is "rebound". With binding =
    request, the tag is None and calls rotate."""

    async def main() -> list[tuple[str, str | None]]:
        router = _router(_profile(binding="session"))
        router.restore_bindings({"old": "b2", "gone": "b9"})
        out = []
        for session in ("s1", "s1", "s2", "s1", "old", "old", "gone"):
            lease = await router.acquire(session=session)
            out.append((lease.state.backend.id, lease.binding))
            await router.release(lease)
        plain = _router(_profile())
        for _ in range(2):
            lease = await plain.acquire(session="s1")
            out.append((lease.state.backend.id, lease.binding))
        return out

    assert [
        ("b0", "new"),
        ("b0", "new"),
        ("b1", "new"),
        ("b0", "new"),
        ("b2", "kept"),
        ("b2", "kept"),
        ("b2", "rebound"),
        ("b0", None),
        ("b1", None),
    ] == _run(main())


def test_new_sessions_avoid_a_backend_held_at_its_cap():
    """least_loaded with binding = session: while b0 is held at its cap, new sessions bind to b1
    and b2 only."""

    async def main() -> list[str]:
        router = _router(_profile("least_loaded", caps=(1, 4, 4), binding="session"))
        first = await router.acquire(session="busy")
        leases = [await router.acquire(session=f"s{i}") for i in range(6)]
        return [first.state.backend.id, *_ids(leases)]

    ids = _run(main())
    assert ("b0", []) == (ids[0], [i for i in ids[1:] if i == "b0"])


def test_exclude_routes_among_the_others_and_fails_clearly_when_none_is_left():
    """Failover excludes tried backends; when all are excluded the error names them."""

    async def main() -> list[str]:
        router = _router(_profile("least_loaded", caps=(4, 4)))
        picks = [(await router.acquire(exclude=frozenset({"b0"}))).state.backend.id for _ in "xyz"]
        with pytest.raises(NoBackendError) as info:
            await router.acquire(exclude=frozenset({"b0", "b1"}))
        return [*picks, str(info.value)]

    assert ["b1", "b1", "b1", "no backend left to route to: already tried b0, b1"] == _run(main())


def test_rate_limits_counted_per_attempt_for_aimd():
    """With adaptive gates each 429 attempt observed counts: cap 8 → 4 → 2; then 2 successes
    regrow it to 3, and 3 × PROBE_INITIAL more to 4, the cap of the last 429."""
    router = _router(_profile(caps=(8,), gate=GateSettings(adaptive=True)))
    b0 = router.states[0]

    async def main() -> list[int]:
        caps = []
        for _ in range(2):
            await router.observe(_attempt(b0, error=_rate_limited()))
            caps.append(b0.cap)
        for _ in range(2 + 3 * PROBE_INITIAL):
            await router.observe(_attempt(b0, latency_ms=50.0))
        caps.append(b0.cap)
        return caps

    caps = _run(main())
    assert [4, 2, 4] == caps


def test_display_counters_done_retries_errors_and_ewma():
    """A success counts done and seeds the EWMA; a failure then a retry counts one retry; a final
    failure counts one error. EWMA moves 30 % toward each new sample."""

    async def main() -> list[object]:
        router = _router(_profile(caps=(2,)))
        lease = await router.acquire()
        state = lease.state
        await router.observe(_attempt(state, latency_ms=100.0))
        await router.observe(_attempt(state, latency_ms=200.0))
        await router.observe(
            _attempt(state, error=ProviderError("x", type="timeout", transient=True), retried=True)
        )
        await router.release(lease)
        await router.reacquire(lease)
        await router.observe(
            _attempt(state, error=ProviderError("x", type="timeout", transient=True))
        )
        await router.release(lease)
        await router.release(lease)  # idempotent
        return [state.done, state.retries, state.errors, state.ewma_latency_ms, state.in_flight]

    assert [2, 1, 1, 130.0, 0] == _run(main())


def test_first_available_slot_freed_by_regrowth_goes_to_the_waiter_not_a_newcomer():
    """When a slot frees without a release (an adaptive cap growing back), the request already
    waiting gets it; a request arriving in the same instant queues behind it."""

    async def main() -> list[bool]:
        router = _router(_profile("first_available", caps=(2,), gate=GateSettings(adaptive=True)))
        state = router.states[0]
        await router.observe(_attempt(state, error=_rate_limited()))  # cap 2 -> 1
        held = await router.acquire()
        waiter = asyncio.ensure_future(router.acquire())
        await _settle()
        for _ in range(PROBE_INITIAL):  # a probe's run of successes at cap 1: cap -> 2
            await router.observe(_attempt(state, latency_ms=10.0))
        newcomer = asyncio.ensure_future(router.acquire())
        await _settle()
        seen = [waiter.done(), newcomer.done()]
        newcomer.cancel()
        await router.release(held)
        await router.release(await waiter)
        await _settle()
        return [*seen, state.in_flight == state.gate.in_flight == 0]

    assert [True, False, True] == _run(main())
