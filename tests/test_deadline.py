"""The attempts' deadlines (rrcli/providers/_deadline.py): one timer keeps them all, a passed
deadline is told apart from any other cancellation, and a moved deadline holds."""

from __future__ import annotations

import asyncio
import time

from rrcli.providers._deadline import Deadlines


async def attempt(deadlines: Deadlines, seconds: float, work) -> str:
    """What an attempt under a deadline of ``seconds`` ended as: "done", "timeout" or
    "cancelled" (a cancellation that was not its deadline, passed on)."""
    deadline = deadlines.enter(seconds)
    try:
        await work(deadline)
        return "done"
    except asyncio.CancelledError:
        if deadlines.leave(deadline):
            return "timeout"
        raise
    finally:
        deadlines.leave(deadline)


def test_a_passed_deadline_ends_the_attempt_as_a_timeout_within_a_tick():
    """An attempt that would wait 10 s under a deadline of 0.1 s ends as a timeout within
    0.1 s and a tick, and its task goes on (no cancellation left pending)."""

    async def go():
        deadlines = Deadlines(0.01)
        started = time.monotonic()
        outcome = await attempt(deadlines, 0.1, lambda _: asyncio.sleep(10))
        took = time.monotonic() - started
        await asyncio.sleep(0.05)  # would raise if a cancellation were still pending
        return outcome, took, asyncio.current_task().cancelling()

    outcome, took, cancelling = asyncio.run(go())
    assert ("timeout", 0) == (outcome, cancelling)
    assert 0.1 <= took < 0.3


def test_another_cancellation_is_passed_on_not_taken_for_a_timeout():
    """A task cancelled from outside (a second Ctrl-C) before its deadline: the attempt ends
    with CancelledError, not a timeout."""

    async def go():
        deadlines = Deadlines(0.01)
        task = asyncio.create_task(attempt(deadlines, 5.0, lambda _: asyncio.sleep(10)))
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            return "cancelled"

    assert "cancelled" == asyncio.run(go())


def test_a_deadline_moved_on_holds_the_attempt_past_its_first_time():
    """An attempt that moves its deadline 0.1 s on every 0.05 s lives for 0.4 s under a first
    deadline of 0.1 s, and many attempts at once each keep their own."""

    async def steady(deadline):
        loop = asyncio.get_running_loop()
        for _ in range(8):
            await asyncio.sleep(0.05)
            deadline.when = loop.time() + 0.1

    async def go():
        deadlines = Deadlines(0.01)
        slow = [attempt(deadlines, 0.1, lambda _: asyncio.sleep(10)) for _ in range(20)]
        moving = [attempt(deadlines, 0.1, steady) for _ in range(20)]
        return await asyncio.gather(*slow, *moving)

    assert ["timeout"] * 20 + ["done"] * 20 == asyncio.run(go())
