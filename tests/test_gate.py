"""The local gate: slots, FIFO hand-off, rate budgets (GCRA), adaptive caps and pauses."""

from __future__ import annotations

import asyncio
import time

from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from rrcli.config.profile import Backend, GateSettings, Profile
from rrcli.errors import WaitEnded
from rrcli.routing.gate import PROBE_INITIAL, Aimd, LocalGate, aimd_step, make_gates
from tests.test_gate_fakes import FakeTime


def _gate(cap: int = 2, **kw) -> LocalGate:
    return LocalGate("b", cap, clock=kw.pop("clock", time.monotonic), **kw)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_acquire_up_to_cap_then_waits():
    """A gate of cap 2 admits two calls; the third waits until one is released."""

    async def main() -> list[object]:
        gate = _gate(2)
        await gate.acquire()
        await gate.acquire()
        third = asyncio.ensure_future(gate.acquire())
        await _settle()
        seen = [gate.in_flight, gate.waiting, third.done()]
        await gate.release()
        await _settle()
        return [*seen, gate.in_flight, gate.waiting, third.done()]

    assert [2, 1, False, 2, 0, True] == asyncio.run(main())


def test_try_acquire_never_overtakes_a_waiter():
    """With a request waiting, try_acquire refuses even at the moment a slot frees; the slot goes
    straight to the waiter."""

    async def main() -> list[object]:
        gate = _gate(1)
        await gate.acquire()
        waiter = asyncio.ensure_future(gate.acquire())
        await _settle()
        refused_while_full = await gate.try_acquire()
        await gate.release()
        refused_after_release = await gate.try_acquire()  # the waiter holds the slot now
        await _settle()
        return [refused_while_full, refused_after_release, waiter.done(), gate.in_flight]

    assert [False, False, True, 1] == asyncio.run(main())


def test_release_hands_the_slot_to_the_longest_waiter_first():
    """A busy worker that releases and re-acquires at once queues behind earlier waiters; they are
    served in arrival order."""

    async def main() -> list[str]:
        gate = _gate(1)
        order: list[str] = []
        await gate.acquire()

        async def wait(name: str) -> None:
            await gate.acquire()
            order.append(name)

        tasks = [asyncio.ensure_future(wait(n)) for n in ("w1", "w2")]
        await _settle()
        await gate.release()
        worker = asyncio.ensure_future(wait("worker"))  # takes its slot back at once
        for _ in range(3):
            await _settle()
            await gate.release()
        await asyncio.gather(*tasks, worker)
        return order

    assert ["w1", "w2", "worker"] == asyncio.run(main())


OPS = ("acquire", "try", "release", "cancel", "429", "ok")


@settings(max_examples=60, deadline=None)
@given(
    cap=st.integers(1, 4),
    adaptive=st.booleans(),
    ops=st.lists(st.sampled_from(OPS), max_size=40),
)
def test_caps_hold_under_random_acquire_release_cancel(cap, adaptive, ops):
    """Under any interleaving of acquire, try_acquire, release, cancellation and AIMD reports,
    no admission happens at or above the effective cap, in_flight equals the slots really held,
    and at the end nothing is held or waiting."""

    async def main() -> None:
        gate = _gate(cap, adaptive=adaptive)
        holders: list[str] = []
        pending: list[asyncio.Task[None]] = []

        async def take() -> None:
            await gate.acquire()
            holders.append("slot")

        for op in ops:
            before = gate.in_flight
            if op == "acquire":
                pending.append(asyncio.ensure_future(take()))
            elif op == "try":
                admitted_below_cap = gate.in_flight < gate.cap and not gate.waiting
                assert admitted_below_cap == await gate.try_acquire()
                if admitted_below_cap:
                    holders.append("slot")
            elif op == "release" and holders:
                holders.pop()
                await gate.release()
            elif op == "cancel" and pending:
                pending.pop(0).cancel()
            elif op in ("429", "ok"):
                gate.record(op == "429")
            await _settle()
            assert len(holders) == gate.in_flight
            assert gate.in_flight <= max(before, gate.cap)  # admissions only below the cap
            assert 1 <= gate.cap <= gate.max_cap
        for task in pending:
            task.cancel()
        await _settle()
        while holders:
            holders.pop()
            await gate.release()
            await _settle()
            assert len(holders) == gate.in_flight
        assert (0, 0) == (gate.in_flight, gate.waiting)

    asyncio.run(main())


def test_cancelled_waiter_holds_nothing_and_loses_no_slot():
    """A waiter cancelled in the same step its slot was handed over passes the slot on."""

    async def main() -> list[int]:
        gate = _gate(1)
        await gate.acquire()
        first = asyncio.ensure_future(gate.acquire())
        second = asyncio.ensure_future(gate.acquire())
        await _settle()
        await gate.release()  # hands the slot to `first` ...
        first.cancel()  # ... which is cancelled before it runs
        await _settle()
        return [gate.in_flight, gate.waiting, int(second.done()), int(first.cancelled())]

    assert [1, 0, 1, 1] == asyncio.run(main())


def _starts(gate: LocalGate, fake: FakeTime, sizes: list[int]) -> list[float]:
    """Planned start times of concurrent reserves on a frozen clock (each is now + its sleep)."""

    async def one(tokens: int) -> float:
        before = len(fake.sleeps)
        await gate.reserve(tokens)
        return fake.now + (fake.sleeps[before] if len(fake.sleeps) > before else 0.0)

    async def main() -> list[float]:
        return list(await asyncio.gather(*(one(n) for n in sizes)))

    return asyncio.run(main())


def test_concurrent_reserves_never_overrun_tpm():
    """50 reserves of 100 tokens fired together on tpm = 60,000 (1,000 tokens/s, a burst of one
    second's worth): only 10 start at once, the rest are paced every 0.1 s, and no one-second
    window holds more than two seconds' worth of tokens (LiteLLM #5783 let all 50 start)."""
    fake = FakeTime(frozen=True)
    gate = _gate(64, tpm=60_000, clock=fake.clock, sleep=fake.sleep)
    starts = sorted(_starts(gate, fake, [100] * 50))
    assert 10 == sum(1 for s in starts if s == 0.0)
    assert [round(0.1 * i, 6) for i in range(1, 41)] == [round(s, 6) for s in starts[10:]]
    for left in starts:
        window = sum(100 for s in starts if left <= s < left + 1.0)
        assert window <= 2_000


def test_rpm_paces_starts_evenly_after_one_burst():
    """rpm = 600: a burst of 10 (one second's worth), then one start every 0.1 s; over 5 s no
    more than 10 + 50 starts."""
    fake = FakeTime()
    gate = _gate(1, rpm=600, clock=fake.clock, sleep=fake.sleep)

    async def main() -> list[float]:
        starts = []
        for _ in range(60):
            await gate.reserve(0)
            starts.append(round(fake.clock(), 6))
        return starts

    starts = asyncio.run(main())
    assert [0.0] * 10 + [round(0.1 * i, 6) for i in range(1, 51)] == starts


def test_rpm_below_60_allows_a_burst_of_one():
    """rpm = 30: burst max(1, 30/60) = 1, so starts are 2 s apart from the first."""
    fake = FakeTime()
    gate = _gate(1, rpm=30, clock=fake.clock, sleep=fake.sleep)

    async def main() -> list[float]:
        out = []
        for _ in range(3):
            await gate.reserve(10)
            out.append(fake.clock())
        return out

    assert [0.0, 2.0, 4.0] == asyncio.run(main())


def test_request_bigger_than_the_tpm_burst_is_admitted_and_charged():
    """tpm = 600 (10 tokens/s, burst 10): a 100-token call still starts (the bucket is idle), and
    the next call waits until most of those 100 tokens' 10 s have drained."""
    fake = FakeTime()
    gate = _gate(1, tpm=600, clock=fake.clock, sleep=fake.sleep)

    async def main() -> list[float]:
        await gate.reserve(100)
        first = fake.clock()
        await gate.reserve(5)
        return [first, round(fake.clock(), 6)]

    assert [0.0, 9.5] == asyncio.run(main())


def test_settle_corrects_the_tpm_charge_by_real_usage():
    """A call estimated at 100 tokens that used 10 gives 90 back: the next 100-token call starts
    at 0.1 s instead of 1.0 s (tpm = 6,000)."""

    def second_start(actual: int | None) -> float:
        fake = FakeTime()
        gate = _gate(1, tpm=6_000, clock=fake.clock, sleep=fake.sleep)

        async def main() -> float:
            await gate.reserve(100)
            if actual is not None:
                await gate.settle(100, actual)
            await gate.reserve(100)
            return round(fake.clock(), 6)

        return asyncio.run(main())

    assert [1.0, 0.1, 2.0] == [second_start(None), second_start(10), second_start(200)]


def test_aimd_halves_once_for_calls_failing_together_then_regrows():
    """cap 8, 8 calls in flight all get a 429: the cap halves once (to 4), not to 1. A 429 after
    those reports halves again (2). Then each run of `cap` successes grows it by one, up to 8."""

    async def main() -> list[int]:
        gate = _gate(8, adaptive=True)
        for _ in range(8):
            await gate.acquire()
        caps = []
        for _ in range(8):
            gate.record(True)
            await gate.release()
        caps.append(gate.cap)
        gate.record(True)
        caps.append(gate.cap)
        for _ in range(2 + 3 + 4 + 5 + 6 + 7 + 8 + 20):
            gate.record(False)
        caps.append(gate.cap)
        return caps

    assert [4, 2, 8] == asyncio.run(main())


def test_aimd_regrowth_counts_successes_in_a_row_and_never_below_one():
    """A 429 halves the cap and restarts the run of successes; below the ceiling each success
    adds one; growing back to the ceiling from cap c takes c × PROBE_INITIAL successes in a
    row; a cap of 1 is never lowered."""
    gate = _gate(4, adaptive=True)
    caps = []
    probe = 2 * PROBE_INITIAL  # successes at cap 2 to grow back to 3, where the last 429 came
    for rate_limited in (True, False, False, True, True, False, *[False] * probe):
        gate.record(rate_limited)
        caps.append(gate.cap)
    assert [2, 3, 3, 1, 1, 2, *[2] * (probe - 1), 3] == caps


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 16), extra=st.integers(1, 48))
def test_aimd_against_a_hidden_capacity_few_429s_and_most_of_the_throughput(capacity, extra):
    """A closed loop against a server that answers 429 to calls beyond its capacity C, with the
    cap configured above C (each round's calls start one after the other, the k-th with k in
    flight, as the gate admits them): over 3000 calls, under 5 % draw a 429 and the throughput
    (successes per round; each round sends ``cap`` calls) is at least 80 % of C. Plain AIMD, growing
    back to the failed level after every run, draws ~10 % 429s at C = 4."""
    max_cap = capacity + extra
    state, calls, limited, served, rounds = Aimd(max_cap), 0, 0, 0, 0
    while calls < 3000:
        cap = state.cap
        outcomes = [False] * min(cap, capacity) + [True] * max(0, cap - capacity)
        hold = 0
        for load, rate_limited in enumerate(outcomes, 1):  # the calls in flight as each began
            held = hold > 0
            hold -= held
            before = state.cap
            state = aimd_step(state, max_cap, rate_limited, held, load)
            if state.cap < before:
                hold = len(outcomes) - 1
        calls += len(outcomes)
        limited += sum(outcomes)
        served += min(cap, capacity)
        rounds += 1
    assert limited / calls < 0.05, (limited, calls)
    assert served / rounds >= 0.8 * capacity, (served / rounds, capacity)


def test_aimd_learns_the_load_that_drew_a_429_and_probes_it_without_halving():
    """cap 20, a 429 with 17 calls in flight: the ceiling is 17 (not 20) and the cap 10; six
    successes regrow it to 16, where it stays until the probe (16 × PROBE_INITIAL successes);
    a 429 at 17 again puts the cap back at 16 (the level that held), not at 8."""

    async def main() -> list[tuple[int, int]]:
        gate = _gate(20, adaptive=True)
        for _ in range(17):
            await gate.acquire()
        gate.record(True)
        for _ in range(17):
            await gate.release()
        seen = [(gate.cap, gate._aimd.ceiling)]
        for _ in range(6):
            gate.record(False)
        seen.append((gate.cap, gate._aimd.ceiling))
        for _ in range(16 * PROBE_INITIAL):
            gate.record(False)
        seen.append((gate.cap, gate._aimd.ceiling))
        gate.record(True)
        seen.append((gate.cap, gate._aimd.ceiling))
        return seen

    assert [(10, 17), (16, 17), (17, 17), (16, 17)] == asyncio.run(main())


def test_lowering_the_cap_keeps_held_slots_and_blocks_new_admissions():
    """4 calls held at cap 4; a 429 halves the cap to 2: nothing is revoked, and a new call is
    admitted only once in_flight has dropped below 2."""

    async def main() -> list[object]:
        gate = _gate(4, adaptive=True)
        for _ in range(4):
            await gate.acquire()
        gate.record(True)
        new = asyncio.ensure_future(gate.acquire())
        seen = []
        for _ in range(3):
            await _settle()
            seen.append((gate.in_flight, new.done()))
            await gate.release()
        await _settle()
        seen.append((gate.in_flight, new.done()))
        return [gate.cap, *seen]

    assert [2, (4, False), (3, False), (2, False), (2, True)] == asyncio.run(main())


def test_record_does_nothing_without_adaptive():
    """A gate without `adaptive` keeps its cap whatever the outcomes."""
    gate = _gate(4)
    for _ in range(5):
        gate.record(True)
    assert 4 == gate.cap


def test_pause_until_holds_admissions_until_the_deadline_and_never_shortens():
    """A pause to t=5 then to t=2 (ignored) then to t=8 (extends): a call waiting at the gate is
    admitted at t=8, and try_acquire refuses while paused."""
    fake = FakeTime()
    gate = _gate(2, clock=fake.clock, sleep=fake.sleep)

    async def main() -> list[object]:
        gate.pause_until(5.0)
        gate.pause_until(2.0)
        refused = await gate.try_acquire()
        gate.pause_until(8.0)
        await gate.acquire()
        return [refused, gate.paused_until, fake.clock(), gate.in_flight]

    assert [False, 8.0, 8.0, 1] == asyncio.run(main())


def test_release_listeners_hear_freed_slots():
    """A listener is called when a slot frees and nobody waits for it; once removed, it is not."""

    async def main() -> int:
        gate = _gate(1)
        heard = []

        def listener() -> None:
            heard.append(1)

        gate.add_release_listener(listener)
        await gate.acquire()
        await gate.release()
        await gate.acquire()
        gate.remove_release_listener(listener)
        await gate.release()
        return len(heard)

    assert 1 == asyncio.run(main())


def test_make_gates_one_gate_per_scope_with_the_smallest_cap():
    """Two backends sharing a scope get one gate with the smaller cap and a warning naming the
    scope; a backend of its own scope gets its own gate."""
    profile = Profile(
        gate=GateSettings(adaptive=True),
        backends=(
            Backend("a", max_concurrency=4, gate_scope="key1"),
            Backend("b", max_concurrency=2, gate_scope="key1", rpm=100),
            Backend("c", max_concurrency=3),
        ),
    )
    with capture_logs() as logs:
        gates = make_gates(profile, clock=time.monotonic)
    assert ["key1", "c"] == list(gates)
    assert [2, 3] == [g.max_cap for g in gates.values()]
    assert [
        {
            "event": "rrcli.gate_scope_mismatch",
            "scope": "key1",
            "backends": ["a", "b"],
            "max_concurrency": 2,
            "rpm": 100,
            "tpm": None,
            "log_level": "warning",
        }
    ] == logs


def test_waiters_sent_away_hold_nothing_and_the_next_waiter_is_served():
    """``wake_waiters`` ends every wait for a slot with WaitEnded, holding nothing: the slot in
    use is the only one held, and a later waiter gets it when it is released."""

    async def main() -> list[object]:
        gate = LocalGate("g", 1, clock=time.monotonic)
        await gate.acquire()
        waiters = [asyncio.ensure_future(gate.acquire()) for _ in range(3)]
        await asyncio.sleep(0)
        gate.wake_waiters()
        ended = await asyncio.gather(*waiters, return_exceptions=True)
        later = asyncio.ensure_future(gate.acquire())
        await asyncio.sleep(0)
        await gate.release()
        await later
        return [{type(e) for e in ended}, gate.in_flight, gate.waiting]

    assert [{WaitEnded}, 1, 0] == asyncio.run(main())
