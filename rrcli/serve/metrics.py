"""``GET /metrics``: the gateway in Prometheus' text format (prometheus-client), one registry
per gateway so several in one process never mix; and ``Activity``, what the live display on a
terminal says of it.

Requests by API, endpoint and status; the seconds to the answer's first byte (a whole answer's
end; a stream's first text) by API and endpoint; requests in flight; and per deployment, its
calls in flight (read from the router when scraped) and the answers it gave.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest as _latest

if TYPE_CHECKING:
    from rrcli.routing.lease import BackendState
    from rrcli.running.pool import Pool

__all__ = ["CONTENT_TYPE", "Activity", "Metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """The gateway's counters; ``observe`` once a request is answered."""

    def __init__(self, pools: Sequence[Pool]) -> None:
        self.registry = registry = CollectorRegistry()
        self._requests = Counter(
            "rrcli_serve_requests", "Requests answered", ["api", "endpoint", "status"],
            registry=registry,
        )  # fmt: skip
        self._seconds = Histogram(
            "rrcli_serve_first_byte_seconds",
            "Seconds to the answer's first byte (a stream's first text)",
            ["api", "endpoint", "streamed"],
            buckets=_SECONDS,
            registry=registry,
        )
        self.in_flight = Gauge("rrcli_serve_in_flight", "Requests in flight", registry=registry)
        self._answers = Counter(
            "rrcli_deployment_answers", "Answers by deployment", ["deployment"], registry=registry
        )
        calls = Gauge(
            "rrcli_deployment_calls_in_flight", "Calls in flight", ["deployment"], registry=registry
        )
        for pool in pools:
            for state in pool.engine.router.states:
                calls.labels(state.backend.id).set_function(lambda s=state: s.in_flight)

    def observe(
        self,
        api: str,
        endpoint: str,
        status: int,
        seconds: float,
        streamed: bool,
        deployment: str | None,
    ) -> None:
        self._requests.labels(api, endpoint, str(status)).inc()
        self._seconds.labels(api, endpoint, "true" if streamed else "false").observe(seconds)
        if deployment:
            self._answers.labels(deployment).inc()

    def render(self) -> bytes:
        return _latest(self.registry)


class _Served(Protocol):
    pools: list[Pool]
    in_flight: int
    draining: bool


class Activity:
    """The live display's view of a gateway, read four times a second (also once its pools
    closed): ``line()`` says the requests in flight, those answered a second (over the last
    five seconds), answered ok and failed, and each pool's budget; ``rows()`` each deployment
    (after its pool's name when there are several)."""

    def __init__(self, gateway: _Served, clock: Callable[[], float] = time.monotonic) -> None:
        self._gateway = gateway
        self._clock = clock
        self._engines = [pool.engine for pool in gateway.pools]
        named = len(gateway.pools) > 1
        self._rows = [
            (f"{pool.profile.name or i}/{state.backend.id}" if named else state.backend.id, state)
            for i, pool in enumerate(gateway.pools)
            for state in pool.engine.router.states
        ]
        self._seen: deque[tuple[float, int]] = deque(maxlen=21)  # (when, answered) samples

    def line(self) -> str:
        gateway, engines = self._gateway, self._engines
        ok, failed = sum(e.summary.ok for e in engines), sum(e.summary.error for e in engines)
        now = self._clock()
        self._seen.append((now, ok + failed))
        then, before = self._seen[0]
        rate = (ok + failed - before) / (now - then) if now > then else 0.0
        parts = [f"in flight {gateway.in_flight:,}", f"{rate:,.1f} req/s"]
        parts += [f"ok {ok:,}", f"errors {failed:,}"]
        budgets = [engine.router.budget for engine in engines]
        parts += [budget.progress() for budget in budgets if budget is not None]
        if gateway.draining:
            parts.append("draining: letting the requests in flight finish")
        return "  ".join(parts)

    def rows(self) -> list[tuple[str, BackendState]]:
        return self._rows
