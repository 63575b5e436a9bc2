"""``GET /metrics``: the gateway in Prometheus' text format (prometheus-client), one registry
per gateway so several in one process never mix.

Requests by API, endpoint and status; the seconds to the answer's first byte (a whole answer's
end; a stream's first text) by API and endpoint; requests in flight; and per deployment, its
calls in flight (read from the router when scraped) and the answers it gave.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest as _latest

if TYPE_CHECKING:
    from rrcli.running.pool import Pool

__all__ = ["CONTENT_TYPE", "Metrics"]

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
