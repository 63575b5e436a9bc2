"""The router when a backend goes down (SPEC §15): no strategy chooses it again, calls waiting
for it are routed again, a retry waiting for it is told, and with no backend left the waiting
requests fail at once instead of waiting forever."""

from __future__ import annotations

import asyncio

import pytest

from rrcli.config.profile import STRATEGIES
from rrcli.errors import BackendDown, NoBackendError, NoHealthyBackend
from tests.test_router import _ids, _profile, _router, _run, _settle


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_strategy_chooses_a_down_backend(strategy):
    """Once b1 is down, every strategy routes 30 decisions among b0 and b2 only."""

    async def main() -> set[str]:
        router = _router(_profile(strategy))
        assert router.states[1] is router.take_down("b1", "http_401")
        assert None is router.take_down("b1", "http_401")  # once
        chosen = set()
        for _ in range(30):
            lease = await router.acquire()
            chosen.add(lease.state.backend.id)
            await router.release(lease)
        return chosen

    assert {"b0", "b2"} >= _run(main())


def test_a_call_waiting_at_a_down_backends_gate_is_routed_again():
    """Round robin sends the third decision to b0, full: it waits at b0's gate. When b0 goes
    down the wait ends at once and the call gets a slot on another backend, though b0's own
    call still holds its slot (calls in flight finish); every counter ends at zero."""

    async def main() -> list[object]:
        router = _router(_profile(caps=(1, 2)))
        first = await router.acquire()
        second = await router.acquire()
        third = asyncio.ensure_future(router.acquire())
        await _settle()
        waited = not third.done()
        router.take_down("b0", "http_401")
        moved = await third
        held = [s.in_flight for s in router.states]
        for lease in (first, second, moved):
            await router.release(lease)
        return [waited, _ids([moved]), held, [s.gate.in_flight for s in router.states]]

    assert [True, ["b1"], [1, 2], [0, 0]] == _run(main())


def test_a_retry_waiting_for_its_down_backend_is_told_and_holds_nothing():
    """A retry takes its slot again on the same backend: when that backend is down, or goes
    down while the retry waits at its gate, ``reacquire`` raises BackendDown holding nothing."""

    async def main() -> list[object]:
        router = _router(_profile(caps=(1, 1)))
        holder = await router.acquire()
        retry = await router.acquire(exclude=frozenset({"b0"}))
        await router.release(retry)
        blocker = await router.acquire(exclude=frozenset({"b0"}))
        waiting = asyncio.ensure_future(router.reacquire(retry))
        await _settle()
        router.take_down("b1", "insufficient_quota")
        with pytest.raises(BackendDown):
            await waiting
        with pytest.raises(BackendDown):
            await router.reacquire(retry)
        await router.release(blocker)
        await router.release(holder)
        return [retry.held, [s.gate.in_flight for s in router.states]]

    assert [False, [0, 0]] == _run(main())


def test_a_cancel_from_elsewhere_is_kept_when_the_backend_goes_down_too():
    """A waiting call cancelled by the run (Ctrl-C) in the same moment its backend goes down
    is cancelled: the router takes back only its own wake-up."""

    async def main() -> bool:
        router = _router(_profile(caps=(1, 1)))
        await router.acquire()
        waiting = asyncio.ensure_future(router.acquire(exclude=frozenset({"b1"})))
        await _settle()
        router.take_down("b0", "http_401")
        waiting.cancel()
        try:
            await waiting
        except asyncio.CancelledError:
            return True
        return False

    assert _run(main())


def test_first_available_waiters_fail_at_once_when_no_backend_is_left():
    """first_available requests queued for a slot fail when their backends go down: with
    NoBackendError naming the down backend while others are healthy for other jobs, and with
    NoHealthyBackend once the whole pool is down."""

    async def main() -> list[object]:
        router = _router(_profile("first_available", caps=(1, 1)))
        await router.acquire()
        await router.acquire()
        only_b0 = asyncio.ensure_future(router.acquire(exclude=frozenset({"b1"})))
        anywhere = asyncio.ensure_future(router.acquire())
        await _settle()
        router.take_down("b0", "http_404")
        await _settle()
        first = only_b0.exception()
        pending = anywhere.done()
        router.take_down("b1", "http_401")
        await _settle()
        return [type(first), str(first), pending, type(anywhere.exception()), router.healthy]

    kind, message, pending, last, healthy = _run(main())
    assert (NoBackendError, False, NoHealthyBackend, 0) == (kind, pending, last, healthy)
    assert "b0 (http_404)" in message


def test_a_session_bound_to_a_down_backend_is_rebound():
    """A session bound to a backend that went down routes again, tagged ``rebound``."""

    async def main() -> list[object]:
        router = _router(_profile(caps=(2, 2), binding="session"))
        first = await router.acquire(session="s")
        await router.release(first)
        router.take_down(first.state.backend.id, "http_401")
        again = await router.acquire(session="s")
        return [first.state.backend.id, again.state.backend.id, again.binding]

    assert ["b0", "b1", "rebound"] == _run(main())
