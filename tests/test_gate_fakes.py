"""A virtual clock for the routing tests, and the checks that it keeps time as they assume.

``FakeTime.sleep(d)`` records the wait and moves the clock to the sleeper's wake time (never
back), then yields once: a lone task sees exact times; concurrent sleepers see a clock that only
runs ahead. With ``frozen=True`` the clock never moves, so a test can read each sleeper's planned
start (``now + d``) straight from ``sleeps``.
"""

from __future__ import annotations

import asyncio


class FakeTime:
    def __init__(self, now: float = 0.0, *, frozen: bool = False) -> None:
        self.now = now
        self.frozen = frozen
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        wake = self.now + seconds
        await asyncio.sleep(0)
        if not self.frozen:
            self.now = max(self.now, wake)


def test_fake_time_advances_a_lone_sleeper_exactly():
    """Two sleeps in a row move the clock by their sum; a frozen clock records but stays."""
    fake = FakeTime(10.0)
    frozen = FakeTime(10.0, frozen=True)

    async def main() -> None:
        for t in (fake, frozen):
            await t.sleep(1.5)
            await t.sleep(2.0)

    asyncio.run(main())
    assert 13.5 == fake.clock()
    assert 10.0 == frozen.clock()
    assert [1.5, 2.0] == frozen.sleeps
