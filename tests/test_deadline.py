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


def test_a_passed_deadline_ends_the_attempt_as_a_timeout_on_the_first_tick_past_it():
    """An attempt that would wait 10 s under a deadline of 0.1 s ends as a timeout, never before
    0.1 s, and before a task woken a tick past the deadline runs again: the timer cancels it on
    its first tick past the deadline, however late a loaded machine runs the loop (both wait on
    the same loop). Its task goes on (no cancellation left pending)."""
    tick = 0.01

    async def go():
        loop = asyncio.get_running_loop()
        deadlines, order = Deadlines(tick), []

        async def woken_a_tick_past(deadline) -> None:
            wake = loop.create_future()
            loop.call_at(deadline.when + tick, wake.set_result, None)
            await wake
            order.append("a tick past the deadline")

        async def slow(deadline) -> None:
            watcher = asyncio.create_task(woken_a_tick_past(deadline))
            await asyncio.sleep(10)
            await watcher

        started = time.monotonic()
        outcome = await attempt(deadlines, 0.1, slow)
        order.append(outcome)
        took = time.monotonic() - started
        await asyncio.sleep(0.05)  # would raise if a cancellation were still pending
        return outcome, took, asyncio.current_task().cancelling(), order

    outcome, took, cancelling, order = asyncio.run(go())
    assert ("timeout", 0) == (outcome, cancelling)
    assert ["timeout", "a tick past the deadline"] == order
    assert took >= 0.1


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
    """An attempt that moves its deadline 0.3 s on every 0.02 s lives for 0.4 s under a first
    deadline of 0.3 s, and many attempts at once each keep their own: the slow ones time out,
    the moving ones finish. Each move leaves 0.28 s of room, so a loaded machine's late wake-up
    does not pass a moved deadline."""

    async def steady(deadline):
        loop = asyncio.get_running_loop()
        for _ in range(20):
            await asyncio.sleep(0.02)
            deadline.when = loop.time() + 0.3

    async def go():
        deadlines = Deadlines(0.01)
        slow = [attempt(deadlines, 0.3, lambda _: asyncio.sleep(10)) for _ in range(20)]
        moving = [attempt(deadlines, 0.3, steady) for _ in range(20)]
        return await asyncio.gather(*slow, *moving)

    assert ["timeout"] * 20 + ["done"] * 20 == asyncio.run(go())
