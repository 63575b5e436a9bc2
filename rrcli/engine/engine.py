"""What happens to one job: route, attempt, retry on the same backend, write the result
once.

``Engine.worker`` is one of the run's ``concurrency`` coroutines, all pulling from one job
iterator (``Engine.submit``: one job a program hands in). Each HTTP attempt becomes one frozen
``Attempt`` that every observer reads, in the order the assembly lists them
(engine/observers.py: the cashier, the trace, health, the log, the router, which alone drives
the gates). On a transient failure the slot is released, the policy's delay slept, and a slot on the
SAME backend taken again; with ``failover`` a spent budget routes the call among the backends not
yet tried. A job ends as one ``CallOutcome``, its result line's only input: one failing job never
cancels its siblings. With --cache, a call the cache answers (engine/cached.py) is traced and never
routed. The front-ends get the engine from ``assembly.open_engine`` and drive it: the batch
runner with its workers, ``rrcli.Pool`` with ``submit``."""

from __future__ import annotations

import asyncio
import random
import time
from asyncio import current_task
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from msgspec import structs

from rrcli.config.models import cap_param
from rrcli.config.profile import Backend, Profile
from rrcli.engine.attempts import MOVES, decide, sent
from rrcli.engine.cached import ANSWERED, ResponseCache
from rrcli.engine.echo import Echo, OnText, echo_for
from rrcli.engine.failures import log_failure, log_repeated
from rrcli.engine.money import budget_parts, final_halt, output_caps
from rrcli.engine.observers import Observer
from rrcli.engine.quiet import debug_logged
from rrcli.engine.summary import RunSummary
from rrcli.engine.turns import assistant_message, bounded, join_paused, paused_call
from rrcli.errors import (
    Cancelled,
    EngineClosed,
    Halted,
    NoBackendError,
    NoHealthyBackend,
    ProviderError,
    Unaffordable,
)
from rrcli.logs import get_logger
from rrcli.providers.base import Call, Provider, Reply
from rrcli.providers.translate import dialect_of
from rrcli.records.attempt import Attempt, CallOutcome, Decision
from rrcli.records.jobs import InvalidJob, Job
from rrcli.records.origins import ResponseOrigins
from rrcli.records.result_line import result_line
from rrcli.records.results import ResultSink
from rrcli.records.trace import TraceWriter
from rrcli.registry import UNSTREAMED
from rrcli.routing.budget import Budget
from rrcli.routing.cashier import Cashier
from rrcli.routing.control import RunControl
from rrcli.routing.costs import NO_OUTPUT
from rrcli.routing.health import Health
from rrcli.routing.lease import BackendState, Lease
from rrcli.routing.retry import RetryPolicy
from rrcli.routing.router import Router
from rrcli.routing.serving import RouteRules
from rrcli.routing.status import EngineStatus, status_of
from rrcli.routing.tally import Tally
from rrcli.tokens import (
    CAP_WORDS,
    cap_fault,
    cap_word,
    estimate_prompt_tokens,
    one_cap,
    output_cap,
)

if TYPE_CHECKING:
    from rrcli.engine.parts import Reassembly

__all__ = ["Engine", "Reloaded", "ResultSink"]

log = get_logger("rrcli")


@dataclass(slots=True, eq=False, kw_only=True)
class Engine:
    """One run's live state: the router, the providers, the writers and the counters, built
    whole by ``engine.assembly.open_engine`` and ended by ``close``.
    ``stream``: every call streamed; ``on_text`` takes text as it arrives (--prompt --stream);
    ``keep_response``: result lines carry the provider's body; ``cache``: the response cache;
    ``budget``: the run's, when it has one; ``cashier``: what each deployment was charged;
    ``observers``: each attempt's (engine/observers.py), ``tally`` among them; ``health``: the one
    among them that takes backends down and probes them back (its probes cancelled by ``close``);
    ``results`` None: no result lines are made (a pool whose caller takes none); ``caps``: a
    budget's output caps (engine.money); ``origins``: the backend that created each Responses
    answer already known (a resumed file's); ``gates``: the router's, given back at the end;
    ``sending``: when kept (a set, for a front-end that closes with calls in flight), the
    tasks whose call has an attempt sent, from its admission until the call ends or backs off."""

    profile: Profile
    router: Router
    providers: dict[str, Provider]
    results: ResultSink | None
    traces: TraceWriter
    summary: RunSummary
    control: RunControl
    rng: random.Random
    cashier: Cashier
    observers: tuple[Observer, ...]
    health: Health | None = None
    tally: Tally | None = None
    budget: Budget | None = None
    gates: Mapping[str, Any] = field(default_factory=dict)
    stream: bool = False
    on_text: Callable[[str], None] | None = None
    keep_response: bool = False
    cache: ResponseCache | None = None
    caps: Mapping[str, int] = field(default_factory=dict)
    origins: ResponseOrigins = field(default_factory=ResponseOrigins)
    sending: set[asyncio.Task[Any]] | None = None
    reassembly: Reassembly | None = None
    policy: RetryPolicy = field(init=False)
    session_binding: bool = field(init=False)
    rules: RouteRules = field(init=False)
    _log_calls: bool = field(init=False)
    _continuations: int = field(init=False)  # [retry] max_continuations
    _closed: bool = field(init=False, default=False)
    _drains: set[asyncio.Task[None]] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self.policy = RetryPolicy(self.profile.retry, self.rng)
        self.session_binding = self.profile.binding == "session"
        self.rules = RouteRules(self.profile.backends)
        self._log_calls = debug_logged()
        self._continuations = self.profile.retry.max_continuations

    def stop_sending(self) -> frozenset[asyncio.Task[Any]]:
        """No attempt is sent from now on: a call about to be admitted raises EngineClosed
        instead. The tasks whose call has an attempt in flight (``sending``, when kept) are
        returned: they may finish."""
        self._closed = True
        return frozenset(self.sending or ())

    def reload(self, profile: Profile) -> Reloaded:
        """The pool of ``profile`` from now on, without a call dropped: a new backend joins, a
        removed one drains (no new call goes there; its calls in flight finish, then its
        connections close), a changed one is both (removed, and added under its id: its
        sessions stay bound to the new one); an unchanged one keeps its state. Raises UsageError
        (the engine unchanged) when a key is unset, a budget's backend has no price, or
        ``profile`` differs in more than its backends."""
        parts = self.reassembly
        if parts is None:
            raise RuntimeError("this engine was not assembled to reload")
        checked = parts.check(self.profile, profile)
        before = {b.id: b for b in self.profile.backends}
        fresh = [b for b in profile.backends if before.get(b.id) != b]
        gates = parts.gates(self.profile, profile, self.gates)
        providers = parts.providers(profile, fresh, checked.keys)
        if self.budget is not None:
            assert checked.prices is not None
            self.budget.reprice(checked.prices, *budget_parts(profile))
            self.caps = output_caps(profile)[0]
        ids = {b.id for b in profile.backends}
        kept = profile.backends
        gone = tuple(bid for bid, b in before.items() if bid not in ids or b not in kept)
        retired = self.router.reload(profile, gates)
        if self.health is not None:
            self.health.forget(gone)
        old = {bid: self.providers[bid] for bid in gone}
        self.providers.update(providers)
        for bid in set(gone) - ids:
            del self.providers[bid]
        self.profile, self.gates, self.rules = profile, gates, RouteRules(profile.backends)
        if old:
            drain = asyncio.ensure_future(_drained(retired, old))
            self._drains.add(drain)
            drain.add_done_callback(self._drains.discard)
        return Reloaded(
            tuple(b.id for b in fresh if b.id not in before),
            tuple(bid for bid in gone if bid not in ids),
            tuple(bid for bid in gone if bid in ids),
        )

    async def close(self) -> None:
        """The run's end, however it ended: the run_end record, outputs flushed, connections and
        shared leases given back, the end logged."""
        summary, budget = self.summary, self.budget
        for drain in list(self._drains):  # a reload's backends still draining: closed now
            drain.cancel()
        await asyncio.gather(*self._drains, return_exceptions=True)
        if self.health is not None:
            await self.health.close()
        halted = None if summary.halted is None else summary.halted.reason
        self.traces.run_end(summary.jobs, summary.interrupted, budget and budget.record(), halted)
        if budget is not None:
            await budget.ledger.close()
        self.traces.flush()  # first: a result on disk has its calls' records on disk
        if self.results is not None:
            self.results.flush()
        for provider in self.providers.values():
            await provider.aclose()
        close_gates = getattr(self.gates, "close", None)  # shared gates hold connections, leases
        if close_gates is not None:
            await close_gates()
        log_repeated(summary.failures)
        log.info(
            "rrcli.run_finished",
            run_id=summary.run_id,
            interrupted=summary.interrupted,
            **summary.jobs,
        )

    def status(self) -> EngineStatus:
        """The engine now, as one frozen picture (routing/status.py), built when asked."""
        router, cashier = self.router, self.cashier
        hits = () if router.pictured is None else router.pictured.hits
        return status_of(router.states, cashier.spent, self.budget, self.control, self.tally, hits)

    def ended(self, rest: Iterator[object] | None) -> None:
        """How the run ended, on its summary: interrupted, or halted (a budget's halt says the
        spend and the jobs not run once the calls in flight finished; ``rest``: the jobs never
        handed out, None when they are not to be read)."""
        summary, control, budget = self.summary, self.control, self.budget
        summary.halted = control.halted
        refused = budget is not None and budget.refused and not control.stopping
        if budget and (refused or (summary.halted and summary.halted.reason == "budget")):
            summary.halted = final_halt(budget, summary, rest)
        summary.interrupted = control.stopping and control.halted is None

    @property
    def warmth(self) -> Router | None:
        """The router, when its strategy pictures what each backend holds warm (cache_aware):
        what a lookahead reads; else None."""
        return self.router if self.router.warm else None

    @property
    def bindings(self) -> dict[str, str]:
        """The sessions bound now: ``{session: deployment id}``."""
        return self.router.bindings

    def forget(self, session: str) -> None:
        """Drop the binding of a session no later call can use."""
        self.router.forget(session)

    def restore_bindings(self, mapping: Mapping[str, str]) -> None:
        """Bindings ``{session: deployment id}`` saved by an earlier run or another worker."""
        self.router.restore_bindings(mapping)

    async def worker(self, jobs: Iterator[Job | InvalidJob]) -> None:
        """Jobs one after the other until none is left or the run stops; a job the halted run
        refuses (a spent budget, no healthy backend left) ends without a result line."""
        for n, job in enumerate(jobs, 1):
            if self.control.stopping:
                return
            if job is ANSWERED:  # jobs the cache's read-ahead finished: the loop runs a while
                await asyncio.sleep(0)
                continue
            # calls that never suspend (sim at zero latency) must not starve the loop
            if n % 64 == 0:
                await asyncio.sleep(0)
            if isinstance(job, InvalidJob):
                self.finish(CallOutcome(job, "invalid"))
                continue
            try:
                outcome = await self._run(job)
            except (Halted, NoHealthyBackend):  # the job has no result line: --resume runs it
                return
            if outcome.status == "invalid" and outcome.error is not None:
                outcome = in_run_words(outcome)
            self.finish(outcome)

    async def submit(
        self, job: Job, exclude: frozenset[str], on_text: OnText | None
    ) -> CallOutcome:
        """A job run and finished as a line is, never on ``exclude``; a stream's text to
        ``on_text(deployment, text)`` (then neither retried nor moved). A job no backend may
        take ends ``invalid``, its ``error`` saying why (``reason``, ``endpoint``, ``message``).
        A call of a session it names is the session's next turn (from 0). Raises Halted,
        NoHealthyBackend."""
        turn = 0
        if job.session is not job.key and job.kind != "session":
            turn = self.router.turn(job.session)
        self.finish(outcome := await self._run(job, exclude, on_text, turn))
        return outcome

    async def _run(
        self,
        job: Job,
        exclude: frozenset[str] = frozenset(),
        on_text: OnText | None = None,
        turn: int = 0,
    ) -> CallOutcome:
        """One job's calls, as its kind asks; ``on_text``: a submitted stream's reader; ``turn``:
        its session's turn (a session job numbers its own)."""
        excluded, refusal = self.rules.check(job)
        if exclude:
            excluded |= exclude
        if refusal is not None:  # no backend serves its endpoint or can express its params
            return refused_job(job, "unserved", refusal)
        if (fault := cap_fault(job.params)) is not None:  # a cap no reservation can read
            return refused_job(job, "bad_cap", fault)
        try:
            if job.kind == "session":
                return await self._run_session(job, excluded, on_text)
            if job.endpoint == "responses" and "previous_response_id" in job.params:
                return await self._continue_response(job, excluded, on_text, turn)
            return await self._call(job, list(job.messages), turn, excluded, on_text)
        except Unaffordable as exc:  # its worst case alone is more than the whole budget
            return refused_job(job, "unaffordable", str(exc))

    def finish(self, outcome: CallOutcome) -> None:
        """A job ended: its one result line, the counters, a failure logged, and a binding no
        later job can use forgotten."""
        if self.results is not None:
            self.results.write(result_line(outcome, self.keep_response), body=outcome.body)
        job = outcome.job
        if outcome.status == "ok":
            self.summary.ok += 1
        elif outcome.status == "error":
            self.summary.error += 1
            log_failure(outcome, self.summary.failures, every=self._log_calls)
        else:
            self.summary.invalid += 1
            return
        # a line that names no session has its own key as session (the same str object):
        # no other line can share it; a session named by the line may have more jobs to come
        if self.session_binding and isinstance(job, Job) and job.session is job.key:
            self.router.forget(job.session)

    async def _run_session(
        self, job: Job, excluded: frozenset[str], on_text: OnText | None
    ) -> CallOutcome:
        """A session's turns in order, each a call with the whole history so far."""
        history = list(job.messages)
        turns: list[CallOutcome] = []
        for turn, text in enumerate(job.turns):
            history.append({"role": "user", "content": text})
            outcome = await self._call(job, history, turn, excluded, on_text)
            if outcome.status == "error":
                return structs.replace(outcome, turns=tuple(turns))
            assert outcome.reply is not None
            history.append(assistant_message(outcome.reply))
            turns.append(outcome)
        return structs.replace(turns[-1], turns=tuple(turns))

    async def _continue_response(
        self, job: Job, excluded: frozenset[str], on_text: OnText | None, turn: int
    ) -> CallOutcome:
        """A Responses job continuing ``previous_response_id``: on the backend that created it
        when this run knows which (its own responses, a resumed file's), else routed as any."""
        response_id = job.params["previous_response_id"]
        origin = self.origins.origin(response_id)
        if origin is not None:
            excluded, gone = self.rules.serving.pinned(response_id, origin)
            if gone is not None:
                error = {"type": "response_origin_gone", "message": gone}
                return CallOutcome(job, "error", error=error, session=self._session_of(job))
        return await self._call(job, [], turn, excluded, on_text)

    def _call(
        self,
        job: Job,
        messages: list[dict[str, Any]],
        turn: int,
        excluded: frozenset[str],
        on_text: OnText | None,
    ) -> Awaitable[CallOutcome]:
        """One call of a job, awaited: answered by the response cache when it holds the answer
        (traced, never routed), else routed and sent, its ok answer then stored
        (engine/cached.py). Without a cache the routed call itself: no coroutine between."""
        if self.cache is None:
            return self._routed(job, messages, turn, excluded, on_text)
        return self._cached_call(self.cache, job, messages, turn, excluded, on_text)

    async def _cached_call(
        self,
        cache: ResponseCache,
        job: Job,
        messages: list[dict[str, Any]],
        turn: int,
        excluded: frozenset[str],
        on_text: OnText | None,
    ) -> CallOutcome:
        hit, keys = cache.lookup(job, messages, turn, excluded, self.keyed)
        if hit is not None:
            self.traces.call(hit, None)
            return self._outcome(job, hit, hit.reply)
        outcome = await self._routed(job, messages, turn, excluded, on_text)
        cache.keep(outcome, keys, messages, self.keyed)
        return outcome

    async def _routed(
        self,
        job: Job,
        messages: list[dict[str, Any]],
        turn: int,
        excluded: frozenset[str],
        on_text: OnText | None,
    ) -> CallOutcome:
        """One call of a job: its attempts on the routed backend (never one of ``excluded``);
        routed again when that backend goes down, and, when its budget is spent on a transient
        error before any text, to a backend not yet tried: with ``failover``, and for a session
        it names (bound again there). NoHealthyBackend: none is left."""
        tried = excluded
        outcome: CallOutcome | None = None
        # a session the job names moves off a backend that fails it, with or without failover
        moves = self.profile.retry.failover or (self.session_binding and job.session is not job.key)
        while True:
            queued = time.monotonic()  # queue_ms counts the wait for a slot from here
            last = None if outcome is None or outcome.attempt is None else outcome.attempt.error
            try:
                lease = await self.router.acquire(
                    session=job.session if self.session_binding else None,
                    exclude=tried,
                    messages=messages,
                    params=job.params,
                    moved_for=None if last is None else last.type,
                )
            except NoHealthyBackend:
                raise
            except NoBackendError as exc:
                # no backend left to try: the last real error is the job's
                if outcome is not None:
                    return outcome
                error = {"type": "no_backend", "message": str(exc)}
                return CallOutcome(job, "error", error=error, session=self._session_of(job))
            failover = moves and len(tried) + 1 < len(self.router.states)
            before = 0 if outcome is None else outcome.attempts
            try:
                outcome = await self._attempts(
                    job, messages, turn, lease, before, queued, failover, on_text
                )
            finally:
                if lease.held:  # cancelled while holding the slot
                    await asyncio.shield(self.router.release(lease))
            if outcome.attempt is None or outcome.attempt.decision not in MOVES:
                return outcome
            tried |= {lease.state.backend.id}

    async def _attempts(
        self,
        job: Job,
        messages: list[dict[str, Any]],
        turn: int,
        lease: Lease,
        before: int,
        queued: float,
        failover: bool,
        on_text: OnText | None,
    ) -> CallOutcome:
        """The attempts of one call on the leased backend, numbered on from ``before`` (retries,
        a pause_turn continued on its slot; ``failover``: it may move on; a stream's text to
        ``on_text``; never once a turn paused: it goes on where it began), its slot then
        freed."""
        provider = self.providers[(backend := lease.state.backend).id]
        call = self._request(job, messages, backend, lease.cache_key)
        estimate = (call.input_tokens or 0) + (output_cap(call.params) or 0)  # estimate_call_tokens
        echo = echo_for(self.on_text, on_text, backend.id) if call.stream else None
        number, first_try, paused, continued = before, time.monotonic(), None, 0
        attempt: Attempt | None = None
        sending = self.sending
        try:
            while True:
                number += 1
                if await self._admitted(lease, estimate, call, number - 1):
                    assert attempt is not None  # a retry whose backend left meanwhile: route again
                    return self._outcome(job, attempt, None)
                if sending is not None:
                    sending.add(current_task())
                started, ts_start = time.monotonic(), time.time()
                reply, error, ended = await sent(provider, call, echo, estimate)
                if reply is not None and reply.continuation is not None:
                    reply, error, continued = bounded(reply, error, continued, self._continuations)
                backoff, decision = None, "ok"
                if error is not None:
                    backoff, decision = self._judged(
                        error, echo, number - before, ended - first_try, failover and paused is None
                    )
                attempt = Attempt(
                    job_id=job.id,
                    session=job.session,
                    turn=turn,
                    number=number,
                    backend=backend,
                    binding=lease.binding,
                    rebound_for=lease.rebound_for,
                    stream=call.stream,
                    endpoint=job.endpoint,
                    ts_start=ts_start,
                    started=started,
                    ended=ended,
                    queue_s=started - queued,
                    estimate=estimate,
                    reply=reply,
                    error=error,
                    decision=decision,
                    backoff_s=backoff,
                )
                await self._observed(attempt, lease)
                if backoff is not None:
                    await self._back_off(lease, attempt, backoff)
                    queued = time.monotonic()
                    continue
                if reply is not None and paused is not None:  # the end of a paused turn
                    reply = join_paused(paused, reply)
                if reply is None or reply.continuation is None:
                    await self.router.release(lease)
                    return self._outcome(job, attempt, reply)
                paused = reply  # Anthropic pause_turn: the turn goes on, on this backend and slot
                call, estimate = paused_call(call, reply, job.input)
                queued = time.monotonic()
        finally:
            if sending is not None:
                sending.discard(current_task())

    async def _admitted(self, lease: Lease, estimate: int, call: Call, tried: int) -> bool:
        """The leased backend's gate passed for one more attempt (``tried`` made before); True
        when its backend left while it waited. Raises EngineClosed once the engine is closed;
        an attempt that ends unsent gives its budget room back."""
        if self._closed:
            raise EngineClosed("the engine was closed before the call was sent", attempts=tried)
        try:
            return await self.router.admit(lease, estimate, call)
        except BaseException:  # it ends unsent (cancelled while it waited for its gate)
            await self.router.refund(lease)
            raise

    async def _observed(self, attempt: Attempt, lease: Lease) -> None:
        """Each observer in turn sees the attempt, its step (if any) awaited."""
        for observe in self.observers:
            step = observe(attempt, lease)
            if step is not None:
                await step

    def keyed(self, job: Job, messages: list[dict[str, Any]], backend: Backend) -> Call:
        """The call as ``_request`` makes it, for its cache key only: its tokens not counted."""
        return self._request(job, messages, backend, None, False)

    def _request(
        self,
        job: Job,
        messages: list[dict[str, Any]],
        backend: Backend,
        key: str | None = None,
        count: bool = True,
    ) -> Call:
        """The call as sent to ``backend``: its params under the job's (the job wins), merged
        once, ``key`` the prompt_cache_key unless they name one; streamed with --stream, the
        job's ``stream`` or the backend's ``stream = true`` unless its endpoint has no streamed
        form; in the job's dialect; its input tokens counted unless not ``count``."""
        params = {**backend.params, **job.params}
        if key is not None:
            params.setdefault("prompt_cache_key", key)
        dialect, endpoint = dialect_of(job.kind), job.endpoint
        default = self.caps.get(backend.id) if self.caps else None  # a budget's cap
        if endpoint not in NO_OUTPUT and (
            default is not None or not params.keys().isdisjoint(CAP_WORDS)
        ):
            # sent in one spelling, at the cap a budget reserves (tokens.one_cap)
            fallback = cap_param(endpoint, backend.model)
            one_cap(params, cap_word(params, endpoint, dialect, fallback), default)
        stream = self.stream or bool(job.stream) or bool(params.pop("stream", False))
        stream = stream and endpoint not in UNSTREAMED
        prompt = estimate_prompt_tokens(messages, job.input) if count else 0
        return Call(messages, params, stream, dialect, endpoint, job.input, prompt)

    def _judged(
        self, error: ProviderError, echo: Echo | None, retry: int, elapsed: float, failover: bool
    ) -> tuple[float | None, Decision]:
        """(the sleep before retry ``retry`` here, None for a final error or text already
        printed; what follows the failed attempt: ``attempts.decide``)."""
        printed = echo is not None and echo.printed
        backoff = None if printed else self.policy.delay(retry, error, elapsed)
        return backoff, decide(error, backoff, failover and not printed)

    async def _back_off(self, lease: Lease, attempt: Attempt, delay: float) -> None:
        """Give the slot back and sleep before the retry (a waiting job holds no slot, and has
        no attempt in flight)."""
        if self.sending is not None:
            self.sending.discard(current_task())
        await self.router.release(lease)
        log.info(
            "rrcli.retry_scheduled",
            job_id=attempt.job_id,
            backend=attempt.backend.id,
            attempt=attempt.number,
            delay_s=round(delay, 3),
            error_type=attempt.error_type,
        )
        await asyncio.sleep(delay)

    def _outcome(self, job: Job, attempt: Attempt, reply: Reply | None) -> CallOutcome:
        """How the call ended at ``attempt``; a cancelled call (traced, its slot given back)
        has no outcome: its cancellation goes on."""
        session = job.session if (self.session_binding or job.kind == "session") else None
        if reply is None:  # the session as _session_of names it
            assert attempt.error is not None
            if isinstance(attempt.error, Cancelled):
                raise attempt.error.cancel
            error = attempt.error.as_dict()
            return CallOutcome(job, "error", attempt, error=error, session=session)
        if reply.response_id is not None:  # a Responses answer: its continuations come here
            self.origins.remember(reply.response_id, attempt.backend.id)
        return CallOutcome(job, "ok", attempt, reply, None, session)

    def _session_of(self, job: Job) -> str | None:
        """The session a result line names: when bindings must survive --resume, and always
        for a session."""
        return job.session if (self.session_binding or job.kind == "session") else None


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a reload changed, by backend id: the backends ``added``, ``removed`` and
    ``changed`` (removed and added again under the same id)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]


DRAIN_POLL = 0.5  # seconds between looks at a removed backend's calls in flight


async def _drained(states: tuple[BackendState, ...], providers: Mapping[str, Provider]) -> None:
    """Close ``providers`` (a reload removed or changed their backends) once the calls in
    flight on ``states`` ended (or the engine closes)."""
    try:
        while any(state.in_flight for state in states):
            await asyncio.sleep(DRAIN_POLL)
    finally:
        for provider in providers.values():
            await asyncio.shield(provider.aclose())


#: what ``rrcli run`` adds to a refusal of each ``reason``: its flag
_RUN_FIX = {"unaffordable": " (--max-cost)"}


def refused_job(job: Job, reason: str, message: str) -> CallOutcome:
    """The ``invalid`` end of a job no backend may take: ``unserved`` (none serves its endpoint
    or can express its params) or ``unaffordable`` (its worst case alone is more than the
    whole budget); ``error`` says it apart (``reason``, ``endpoint``, ``message``) for each
    front-end to put in its own words."""
    error = {"reason": reason, "endpoint": job.endpoint, "message": message}
    return CallOutcome(InvalidJob(job.id, job.line, message), "invalid", error=error)


def in_run_words(outcome: CallOutcome) -> CallOutcome:
    """A refused job as ``rrcli run`` says it: its line named, the flag that fixes it."""
    error, job = outcome.error, outcome.job
    assert error is not None
    message = f"line {job.line}: {error['message']}{_RUN_FIX.get(error['reason'], '')}"
    return structs.replace(outcome, job=InvalidJob(job.id, job.line, message))
