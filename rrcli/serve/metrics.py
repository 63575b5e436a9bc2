"""``GET /metrics``: the gateway in Prometheus' text format (prometheus-client), one registry
per gateway so several in one process never mix; and ``Activity``, what the live display on a
terminal says of it.

The gateway's own counts: requests by API, endpoint and status; the seconds to the answer's
first byte (a whole answer's end; a stream's first text) by API and endpoint; requests in
flight; requests refused before any backend was asked, by API and reason; the answers each
deployment gave. The rest is read from each pool's ``Engine.status()`` when scraped: per
deployment its state (up, cooling, down), calls in flight and cap, calls by outcome and failed
ones by error type, tokens, spend, sessions bound, admission waits and cache_aware's warm
choices; each pool's budget.
Every label's values are a closed set (APIs, endpoints, statuses, reasons, outcomes, error
types, states) or the profiles' own names (pools, deployments): never a client's words.
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
    from rrcli.routing.status import DeploymentStatus, EngineStatus

__all__ = ["CONTENT_TYPE", "REFUSALS", "Activity", "Metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_LE = [*(str(float(b)) for b in _SECONDS), "+Inf"]
_STATES = ("up", "cooling", "down")
#: why a request was refused before any backend was asked: the metric's ``reason`` values
REFUSALS = (
    "unauthorized",
    "too_large",
    "invalid_request",
    "unknown_model",
    "cooling",
    "draining",
    "budget",
    "no_healthy_backend",
)
#: the length a refused request's message is cut to in its trace record
_SAID = 300


class Metrics:
    """The gateway's counters; ``observe`` once a request is answered. They are plain
    counts, counted without a lock (the gateway runs on one event loop), and made into
    Prometheus' metrics only when ``/metrics`` is read."""

    def __init__(self, pools: Sequence[Pool], in_flight: Callable[[], int]) -> None:
        self._requests: dict[tuple[str, str, str], int] = {}
        self._seconds: dict[tuple[str, str, str], list[float]] = {}  # counts by bucket, sum
        self._answers: dict[str, int] = {}
        self._refused: dict[tuple[str, str], int] = {}
        self._traced: set[str] = set()  # the reasons of refusals written to the trace
        self._in_flight = in_flight
        self._pools = pools
        self._names = [pool.profile.name or str(i) for i, pool in enumerate(pools)]
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

    def refused(self, api: str, endpoint: str, reason: str, status: int, message: str) -> None:
        """A request refused before any backend was asked (``reason``: one of REFUSALS):
        counted; the first of each reason is also written to the first pool's trace."""
        key = (api, reason)
        self._refused[key] = self._refused.get(key, 0) + 1
        if reason not in self._traced:
            self._traced.add(reason)
            traces = self._pools[0].engine.traces
            traces.refused(api, endpoint, reason, status, message[:_SAID])
            traces.flush()

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
        refused = CounterMetricFamily(
            "rrcli_serve_refused",
            "Requests refused before any backend was asked",
            labels=["api", "reason"],
        )
        for labels, count in self._refused.items():
            refused.add_metric(labels, count)
        yield from (requests, seconds, in_flight, refused, answers)
        statuses = [pool.engine.status() for pool in self._pools]
        yield from _deployments(self._names, statuses)
        yield from _budgets(self._names, statuses)


def _deployments(names: list[str], statuses: list[EngineStatus]) -> Iterator[Metric]:
    """The metrics of each deployment of the pools named ``names`` (a deployment is named
    ``pool/id`` when there are several pools)."""
    d = ["deployment"]
    state = GaugeMetricFamily(
        "rrcli_deployment_state", "1 for the deployment's state now", labels=[*d, "state"]
    )
    in_flight = GaugeMetricFamily("rrcli_deployment_calls_in_flight", "Calls in flight", labels=d)
    cap = GaugeMetricFamily("rrcli_deployment_cap", "Calls it may have in flight now", labels=d)
    calls = CounterMetricFamily(
        "rrcli_deployment_calls",
        "Calls (HTTP attempts) by outcome: ok, retry (another attempt followed), error, cancelled",
        labels=[*d, "outcome"],
    )
    failures = CounterMetricFamily(
        "rrcli_deployment_call_errors", "Failed calls by error type", labels=[*d, "error_type"]
    )
    tokens = {
        kind: CounterMetricFamily(f"rrcli_deployment_{kind}_tokens", f"Tokens: {text}", labels=d)
        for kind, text in (
            ("input", "input of the answers"),
            ("output", "output of the answers"),
            ("cached_input", "input read from the provider's prompt cache"),
        )
    }
    cost = CounterMetricFamily("rrcli_deployment_cost_usd", "USD charged for its calls", labels=d)
    sessions = GaugeMetricFamily("rrcli_deployment_sessions", "Sessions bound to it", labels=d)
    waits = CounterMetricFamily(
        "rrcli_deployment_admission_waits", "Calls that waited to be admitted", labels=d
    )
    hits = CounterMetricFamily(
        "rrcli_deployment_cache_aware_hits",
        "Calls cache_aware sent to it for the prompt prefix it held warm",
        labels=d,
    )
    waited = CounterMetricFamily(
        "rrcli_deployment_admission_wait_seconds",
        "Seconds calls waited to be admitted (routing, a slot, the rate limits)",
        labels=d,
    )
    for name, status in zip(names, statuses, strict=True):
        prefix = f"{name}/" if len(names) > 1 else ""
        for dep in status.deployments:
            label = [prefix + dep.id]
            for each in _STATES:
                state.add_metric([*label, each], 1.0 if dep.state == each else 0.0)
            in_flight.add_metric(label, dep.in_flight)
            cap.add_metric(label, dep.cap)
            for outcome, count in (
                ("ok", dep.ok),
                ("retry", dep.retried),
                ("error", dep.errors),
                ("cancelled", dep.cancelled),
            ):
                calls.add_metric([*label, outcome], count)
            for kind, count in dep.failures:
                failures.add_metric([*label, kind], count)
            tokens["input"].add_metric(label, dep.input_tokens)
            tokens["output"].add_metric(label, dep.output_tokens)
            tokens["cached_input"].add_metric(label, dep.cached_input_tokens)
            cost.add_metric(label, dep.spent)
            sessions.add_metric(label, dep.sessions)
            waits.add_metric(label, dep.waits)
            waited.add_metric(label, dep.waited_s)
            hits.add_metric(label, dep.cache_hits)
    yield from (state, in_flight, cap, calls, failures, *tokens.values(), cost, sessions)
    yield from (waits, waited, hits)


def _budgets(names: list[str], statuses: list[EngineStatus]) -> Iterator[Metric]:
    """Each pool's budget in USD: its limit, spent so far and reserved for calls in flight."""
    families = {
        field: GaugeMetricFamily(f"rrcli_budget_{field}_usd", text, labels=["pool"])
        for field, text in (
            ("limit", "The budget's limit"),
            ("spent", "Spent of the budget (every process sharing it, earlier runs)"),
            ("reserved", "Reserved for the calls in flight"),
        )
    }
    for name, status in zip(names, statuses, strict=True):
        budget = status.budget
        if budget is not None:
            families["limit"].add_metric([name], budget.limit)
            families["spent"].add_metric([name], budget.spent)
            families["reserved"].add_metric([name], budget.reserved)
    yield from families.values()


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
