"""The Redis gate (issue 7) against a real redis-server this module starts on loopback.

Gates of separate "processes" are separate ``make_redis_gates`` sets here (each its own
connection, renewal and token space); tests/test_redis_gate_procs.py runs real processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis
from structlog.testing import capture_logs

from rrcli.config.profile import Backend, GateSettings, Profile
from rrcli.errors import GateUnavailableError, WaitEnded
from rrcli.fleet.redis_gate import make_redis_gates
from rrcli.routing.gate import make_gates

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server of our own on 127.0.0.1, no persistence (unless ``persist`` names
    redis-server options, e.g. an AOF in a folder); can be restarted (empty without them)."""

    def __init__(self, port: int | None = None, persist: tuple[str, ...] = ()) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.persist = persist or ("--appendonly", "no")

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             *self.persist],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)
        client.close()
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


def _server() -> Iterator[RedisServer]:
    if shutil.which(REDIS_SERVER) is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server); CI installs it")
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One redis-server for the session; tests flush it before use."""
    yield from _server()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    return redis_server.url


def profile(url: str, *, cap: int = 1, lease: float = 1.0, adaptive: bool = False, **kw) -> Profile:
    backend = Backend(id="b", provider="sim", max_concurrency=cap, **kw)
    return Profile(backends=(backend,), gate=GateSettings("redis", url, lease, adaptive))


async def until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def crowded(spans: list[tuple[float, float]], most) -> list[tuple[float, float, int]]:
    """The windows (start, seconds, starts) that surely held more rate-limited starts than
    ``most(seconds)`` allows. Each start is known as the span it lies in, from asking to being
    let go (epoch seconds): a window counts only the starts whose whole span lies in it, so a
    loaded machine, which widens the spans, never crowds a window; a bucket that lets too many
    go at once still does."""
    spans = sorted(spans)
    over = []
    for i, (left, _) in enumerate(spans):
        for inside, right in enumerate(sorted(got for _, got in spans[i:]), 1):
            if inside > most(right - left):
                over.append((left, right - left, inside))
    return over


def slots(url: str, scope: str = "b") -> int:
    with redis.Redis.from_url(url) as client:
        return client.zcard(f"rrcli:{{{scope}}}:slots")


def test_unreachable_redis_at_start_names_the_url():
    """A Redis that does not answer at start is a GateUnavailableError (exit 2) naming the url."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(GateUnavailableError) as info:
        make_redis_gates(profile(url), rng=random.Random(0))
    assert url in str(info.value)
    assert 2 == info.value.exit_code


def test_the_password_in_the_url_never_reaches_the_message():
    """A password in [gate] url is redacted from the error message."""
    url = f"redis://user:s3cret-pw@127.0.0.1:{free_port()}/0"
    with pytest.raises(GateUnavailableError) as info:
        make_redis_gates(profile(url), rng=random.Random(0))
    assert "s3cret-pw" not in str(info.value)
    assert f"redis://user:***@127.0.0.1:{url.rsplit(':', 1)[1]}" in str(info.value)


def test_cap_holds_across_gate_sets_and_is_reached(redis_url):
    """Three 'processes' with four workers each on a cap of 3: never more than 3 hold, and 3 do."""

    async def main() -> int:
        sets = [make_redis_gates(profile(redis_url, cap=3), rng=random.Random(i)) for i in range(3)]
        holders = peak = 0

        async def worker(gate) -> None:
            nonlocal holders, peak
            for _ in range(5):
                await gate.acquire()
                holders += 1
                peak = max(peak, holders)
                await asyncio.sleep(0.005)
                holders -= 1
                await gate.release()

        await asyncio.gather(*(worker(s["b"]) for s in sets for _ in range(4)))
        for s in sets:
            await s.close()
        return peak

    assert 3 == asyncio.run(main())
    assert 0 == slots(redis_url)


def test_waiters_are_served_in_arrival_order_across_processes(redis_url):
    """With cap 1, waiters from different processes get the slot in the order they arrived."""

    async def main() -> list[str]:
        a, b, c = (make_redis_gates(profile(redis_url), rng=random.Random(i)) for i in range(3))
        await a["b"].acquire()
        order: list[str] = []

        async def wait(name: str, gate) -> None:
            await gate.acquire()
            order.append(name)
            await asyncio.sleep(0.01)
            await gate.release()

        tasks = []
        for name, gate in [("b1", b["b"]), ("c1", c["b"]), ("b2", b["b"]), ("c2", c["b"])]:
            tasks.append(asyncio.create_task(wait(name, gate)))
            queued = len(tasks)
            await until(lambda n=queued: n == b["b"].waiting + c["b"].waiting)
            await asyncio.sleep(0.02)  # the ticket is in Redis once the first admission step ran
        await a["b"].release()
        await asyncio.gather(*tasks)
        for s in (a, b, c):
            await s.close()
        return order

    assert ["b1", "c1", "b2", "c2"] == asyncio.run(main())


def test_try_acquire_never_overtakes_a_waiter_of_another_process(redis_url):
    """A slot freed while another process's ticket waits is not taken by try_acquire."""

    async def main() -> tuple[bool, bool, bool]:
        a, b, c = (make_redis_gates(profile(redis_url), rng=random.Random(i)) for i in range(3))
        await a["b"].acquire()
        ticket = b.hub.token()
        queued = await b["b"]._admit(ticket, ticket)  # one admission step: B now waits
        await a["b"].release()
        overtook = await c["b"].try_acquire()
        admitted = await b["b"]._admit(ticket, ticket)  # B's next step takes the freed slot
        await b["b"].release()
        free = await c["b"].try_acquire()  # nobody waits and the slot is free
        for s in (a, b, c):
            await s.close()
        return queued[0], overtook, admitted[0] and free

    assert (False, False, True) == asyncio.run(main())


def test_a_later_ticket_is_not_admitted_before_an_earlier_one(redis_url):
    """A waiter whose ticket came later cannot take the slot an earlier ticket waits for."""

    async def main() -> list[bool]:
        a, b, c = (make_redis_gates(profile(redis_url), rng=random.Random(i)) for i in range(3))
        await a["b"].acquire()
        first, second = b.hub.token(), c.hub.token()
        await b["b"]._admit(first, first)
        await c["b"]._admit(second, second)
        await a["b"].release()
        steps = [
            (await c["b"]._admit(second, second))[0],  # the later ticket asks first: refused
            (await b["b"]._admit(first, first))[0],
        ]
        for s in (a, b, c):
            await s.close()
        return steps

    assert [False, True] == asyncio.run(main())


def test_a_cancelled_waiter_leaves_the_queue(redis_url):
    """A waiter cancelled while queued no longer blocks try_acquire once the slot frees."""

    async def main() -> bool:
        a, b, c = (make_redis_gates(profile(redis_url), rng=random.Random(i)) for i in range(3))
        await a["b"].acquire()
        waiter = asyncio.create_task(b["b"].acquire())
        await until(lambda: 1 == b["b"].waiting)
        await asyncio.sleep(0.05)
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        await b.hub.close()  # lets the abandon step finish
        await a["b"].release()
        taken = await c["b"].try_acquire()
        for s in (a, c):
            await s.close()
        return taken

    assert asyncio.run(main())


def test_a_waiter_sent_away_leaves_the_queue(redis_url):
    """``wake_waiters`` ends a Redis wait at once with WaitEnded, holding nothing, and its
    ticket leaves the queue: another process takes the slot once it frees."""

    async def main() -> list[object]:
        a, b, c = (make_redis_gates(profile(redis_url), rng=random.Random(i)) for i in range(3))
        await a["b"].acquire()
        waiter = asyncio.create_task(b["b"].acquire())
        await until(lambda: 1 == b["b"].waiting)
        await asyncio.sleep(0.05)
        started = time.monotonic()
        b["b"].wake_waiters()
        with contextlib.suppress(WaitEnded):
            await waiter
        took = time.monotonic() - started
        await b.hub.close()  # lets the abandon step finish
        await a["b"].release()
        taken = await c["b"].try_acquire()
        for s in (a, c):
            await s.close()
        return [type(waiter.exception()), took < 0.5, b["b"].in_flight, taken]

    assert [WaitEnded, True, 0, True] == asyncio.run(main())


def test_renewal_puts_back_leases_an_emptied_redis_lost(redis_url):
    """After Redis loses its state (FLUSHALL, as a restart would), held slots are re-registered."""

    async def main() -> tuple[int, bool]:
        a, b = (
            make_redis_gates(profile(redis_url, lease=0.6), rng=random.Random(i)) for i in range(2)
        )
        await a["b"].acquire()
        with redis.Redis.from_url(redis_url) as client:
            client.flushall()
        await asyncio.sleep(0.5)  # more than one renewal period (lease / 3)
        held = slots(redis_url)
        overtook = await b["b"].try_acquire()
        for s in (a, b):
            await s.close()
        return held, overtook

    assert (1, False) == asyncio.run(main())


def test_rpm_paces_starts_with_a_bounded_burst(redis_url):
    """rpm = 600 across two processes: a burst of at most 10, then one start every 0.1 s."""

    async def main() -> list[float]:
        sets = [
            make_redis_gates(profile(redis_url, rpm=600), rng=random.Random(i)) for i in range(2)
        ]
        starts: list[float] = []

        async def worker(gate) -> None:
            for _ in range(7):
                await gate.reserve(1)
                starts.append(time.monotonic())

        await asyncio.gather(*(worker(s["b"]) for s in sets))
        for s in sets:
            await s.close()
        return sorted(starts)

    starts = asyncio.run(main())
    assert 14 == len(starts)
    worst = max(
        sum(1 for t in starts[i:] if t - starts[i] < window) - (10 + window / 0.1)
        for i in range(len(starts))
        for window in (0.05, 0.25, 0.5)
    )
    assert worst <= 1  # one start of slack for the moment a start is observed
    assert 0.3 <= starts[-1] - starts[0]  # 14 starts need at least (14 - 10) * 0.1 s


def test_tpm_refund_frees_the_budget(redis_url):
    """tpm = 600 (10 tokens/s): a second 10-token call waits ~1 s unless settle refunded."""

    async def main() -> tuple[bool, float]:
        a, b = (
            make_redis_gates(profile(redis_url, tpm=600), rng=random.Random(i)) for i in range(2)
        )
        await a["b"].reserve(10)
        await a["b"].settle(10, 0)  # the response used nothing: refund
        refunded = True
        try:
            await asyncio.wait_for(b["b"].reserve(10), 0.5)
        except TimeoutError:
            refunded = False
        t0 = time.monotonic()
        await b["b"].reserve(10)  # the budget is spent now: waits about one second
        waited = time.monotonic() - t0
        for s in (a, b):
            await s.close()
        return refunded, waited

    refunded, waited = asyncio.run(main())
    assert refunded
    assert 0.8 <= waited


def test_a_pause_holds_every_process_and_is_never_shortened(redis_url):
    """pause_until in one process holds acquires everywhere; a shorter later pause is ignored."""

    async def main() -> float:
        a, b = (make_redis_gates(profile(redis_url), rng=random.Random(i)) for i in range(2))
        now = time.monotonic()
        a["b"].pause_until(now + 1.0)
        a["b"].pause_until(now + 0.2)
        await until(lambda: redis.Redis.from_url(redis_url).exists("rrcli:{b}:pause"))
        await b["b"].acquire()
        waited = time.monotonic() - now
        for s in (a, b):
            await s.close()
        return waited

    assert 0.9 <= asyncio.run(main())


def test_adaptive_cap_is_shared(redis_url):
    """With adaptive, a 429 seen by one process halves the cap every process admits up to."""

    async def main() -> tuple[int, int, list[bool]]:
        a, b = (
            make_redis_gates(profile(redis_url, cap=4, adaptive=True), rng=random.Random(i))
            for i in range(2)
        )
        a["b"].record(True)
        await until(lambda: 2 == a["b"].cap)
        taken = [await b["b"].try_acquire() for _ in range(3)]
        cap_b = b["b"].cap
        for _ in range(2):  # `cap` successes in a row grow it by one
            a["b"].record(False)
        await until(lambda: 3 == a["b"].cap)
        for s in (a, b):
            await s.close()
        return a["b"].cap, cap_b, taken

    assert (3, 2, [True, True, False]) == asyncio.run(main())


def test_429s_of_calls_already_in_flight_halve_the_shared_cap_once(redis_url):
    """Three calls in flight answer 429: the cap falls once, halved but below the load that
    drew it (8 -> 2, the ceiling 3); a later 429 lowers it again (1)."""

    async def main() -> tuple[int, int]:
        a, b = (
            make_redis_gates(profile(redis_url, cap=8, adaptive=True), rng=random.Random(i))
            for i in range(2)
        )
        for gate in (a["b"], a["b"], b["b"]):
            await gate.acquire()
        for gate in (a["b"], a["b"], b["b"]):
            gate.record(True)
        await asyncio.gather(*a.hub._tasks, *b.hub._tasks)
        with redis.Redis.from_url(redis_url) as client:
            after_burst = int(client.hget("rrcli:{b}:aimd:8", "cap"))
        b["b"].record(True)
        await until(lambda: 1 == b["b"].cap)
        for s in (a, b):
            await s.close()
        return after_burst, b["b"].cap

    assert (2, 1) == asyncio.run(main())


def test_every_key_of_a_scope_shares_one_hash_tag(redis_url):
    """All keys of a scope carry {scope}, so the scripts also run on Redis Cluster."""

    async def main() -> None:
        gates = make_redis_gates(profile(redis_url, rpm=60, tpm=1000), rng=random.Random(0))
        waiter = None
        await gates["b"].acquire()
        await gates["b"].reserve(5)
        waiter = asyncio.create_task(gates["b"].acquire())
        await until(lambda: 1 == gates["b"].waiting)
        await asyncio.sleep(0.05)
        with redis.Redis.from_url(redis_url, decode_responses=True) as client:
            keys.extend(client.keys("*"))
        await gates["b"].release()
        await waiter
        await gates.close()

    keys: list[str] = []
    asyncio.run(main())
    assert {"slots", "queue", "qexp", "seq", "gcra"} <= {k.rsplit(":", 1)[1] for k in keys}
    assert [] == [k for k in keys if not k.startswith("rrcli:{b}:")]


def test_a_shared_scope_takes_the_smallest_limits_and_warns_like_the_local_gate(redis_url):
    """Backends sharing a gate_scope but not their limits: the Redis gate enforces the smallest
    cap, rpm and tpm, and warns exactly as make_gates does (rrcli.gate_scope_mismatch)."""
    backends = (
        Backend("a", provider="sim", max_concurrency=4, gate_scope="key1", tpm=900),
        Backend("b", provider="sim", max_concurrency=2, gate_scope="key1", rpm=100),
    )
    shared = Profile(backends=backends, gate=GateSettings("redis", redis_url, 1.0, False))
    local = Profile(backends=backends)
    with capture_logs() as redis_logs:
        gates = make_redis_gates(shared, rng=random.Random(0))
    with capture_logs() as local_logs:
        make_gates(local, clock=time.monotonic)
    limits = gates["key1"].limits
    assert (["key1"], 2, 100, 900) == (list(gates), limits.max_cap, limits.rpm, limits.tpm)
    assert ["rrcli.gate_scope_mismatch"] == [entry["event"] for entry in redis_logs]
    assert local_logs == redis_logs
    asyncio.run(gates.close())
