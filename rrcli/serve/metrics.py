"""``GET /metrics``: the gateway in Prometheus' text format (prometheus-client), one registry
per gateway so several in one process never mix; and ``Activity``, what the live display on a
terminal says of it.

Requests by API, endpoint and status; the seconds to the answer's first byte (a whole answer's
end; a stream's first text) by API and endpoint; requests in flight; and per deployment, its
calls in flight (read from its engine's status when scraped) and the answers it gave.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client import generate_latest as _latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

if TYPE_CHECKING:
    from rrcli.pool.pool import Pool
    from rrcli.routing.status import DeploymentStatus

__all__ = ["CONTENT_TYPE", "Activity", "Metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_LE = [*(str(float(b)) for b in _SECONDS), "+Inf"]


class Metrics:
    """The gateway's counters; ``observe`` once a request is answered. They are plain
    counts, counted without a lock (the gateway runs on one event loop), and made into
    Prometheus' metrics only when ``/metrics`` is read."""

    def __init__(self, pools: Sequence[Pool], in_flight: Callable[[], int]) -> None:
        self._requests: dict[tuple[str, str, str], int] = {}
        self._seconds: dict[tuple[str, str, str], list[float]] = {}  # counts by bucket, sum
        self._answers: dict[str, int] = {}
        self._in_flight = in_flight
        self._pools = pools
        self.registry = CollectorRegistry()
        self.registry.register(self)  # type: ignore[arg-type]

    def observe(
        self,
        api: str,
        endpoint: str,
        status: int,
        seconds: float,
        streamed: bool,
        deployment: str | None,
    ) -> None:
        key = (api, endpoint, str(status))
        self._requests[key] = self._requests.get(key, 0) + 1
        timed = (api, endpoint, "true" if streamed else "false")
        counts = self._seconds.get(timed)
        if counts is None:
            counts = self._seconds[timed] = [0.0] * (len(_SECONDS) + 2)
        counts[bisect_left(_SECONDS, seconds)] += 1
        counts[-1] += seconds
        if deployment:
            self._answers[deployment] = self._answers.get(deployment, 0) + 1

    def render(self) -> bytes:
        return _latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        """The metrics of the counts so far (prometheus-client's collector interface)."""
        requests = CounterMetricFamily(
            "rrcli_serve_requests", "Requests answered", labels=["api", "endpoint", "status"]
        )
        for labels, count in self._requests.items():
            requests.add_metric(labels, count)
        seconds = HistogramMetricFamily(
            "rrcli_serve_first_byte_seconds",
            "Seconds to the answer's first byte (a stream's first text)",
            labels=["api", "endpoint", "streamed"],
        )
        for labels, counts in self._seconds.items():
            cumulative, buckets = 0.0, []
            for le, count in zip(_LE, counts, strict=False):
                cumulative += count
                buckets.append((le, cumulative))
            seconds.add_metric(labels, buckets, counts[-1])
        in_flight = GaugeMetricFamily("rrcli_serve_in_flight", "Requests in flight")
        in_flight.add_metric([], self._in_flight())
        answers = CounterMetricFamily(
            "rrcli_deployment_answers", "Answers by deployment", labels=["deployment"]
        )
        for deployment, count in self._answers.items():
            answers.add_metric([deployment], count)
        calls = GaugeMetricFamily(
            "rrcli_deployment_calls_in_flight", "Calls in flight", labels=["deployment"]
        )
        for pool in self._pools:
            for deployment in pool.engine.status().deployments:
                calls.add_metric([deployment.id], deployment.in_flight)
        yield from (requests, seconds, in_flight, answers, calls)


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
        self._names = [
            f"{pool.profile.name or i}/" if named else "" for i, pool in enumerate(gateway.pools)
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
        budgets = [engine.status().budget for engine in engines]
        parts += [budget.line() for budget in budgets if budget is not None]
        if gateway.draining:
            parts.append("draining: letting the requests in flight finish")
        return "  ".join(parts)

    def rows(self) -> list[tuple[str, DeploymentStatus]]:
        return [
            (name + deployment.id, deployment)
            for name, engine in zip(self._names, self._engines, strict=True)
            for deployment in engine.status().deployments
        ]
