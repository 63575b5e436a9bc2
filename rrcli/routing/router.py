"""Live per-backend state and the routing decision that turns a call into a held slot.

The router owns what changes while a run goes: each backend's calls in flight, EWMA latency,
cooldown and display counters, the session bindings, and the queue of requests waiting for
``first_available`` (waiting.py). A strategy (strategies.py) picks among the eligible
backends; the router takes the slot on the chosen backend's gate and hands it back as a
``Lease``. It is the gates' one driver: every attempt starts at ``admit`` (slot, rate
budget) and is ``observe``d once.

A backend whose answer says it can serve no call leaves the pool (``take_down``; health.py)
until a probe brings it back (``bring_up``).
Counters cannot drift: ``in_flight`` goes up only in ``_grant`` and down only in ``release``,
each guarded by ``lease.held``; a request cancelled while waiting never got a lease, and a slot
handed to it as it was cancelled is passed on. Times are seconds unless a name ends in ``_ms``;
clock, rng and sleep are passed in.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from rrcli.config.profile import Backend, Profile
from rrcli.errors import BackendDown, ProviderError, WaitEnded
from rrcli.logs import get_logger
from rrcli.routing.down import no_backend
from rrcli.routing.gate import Clock, Gate, Sleep
from rrcli.routing.lease import BackendState, Lease
from rrcli.routing.prompts import Prepared, Prompt
from rrcli.routing.strategies import CacheAware, Candidate, FirstAvailable, make_strategy
from rrcli.routing.waiting import Waiting
from rrcli.tokens import plausible_call_tokens

if TYPE_CHECKING:
    from rrcli.providers.base import Call
    from rrcli.records.attempt import Attempt
    from rrcli.routing.budget import Budget

__all__ = ["EWMA_ALPHA", "REMOVED", "Router", "SharedBindings"]


log = get_logger()

EWMA_ALPHA = 0.3  # weight of the newest latency sample
#: why a backend a reload took out of the pool is out: its session binds again for it
REMOVED = "removed"


class SharedBindings(Protocol):
    """Session bindings shared with the other processes serving the pool
    (fleet/shared_pool.py): the deployment a session is bound to, set when it binds, kept
    while it is used."""

    async def bound(self, session: str) -> str | None: ...
    async def bind(self, session: str, deployment: str) -> None: ...
    def touch(self, session: str) -> None: ...


class Router:
    """Routes calls across the pool; see the module docstring."""

    def __init__(
        self,
        profile: Profile,
        gates: Mapping[str, Gate],
        *,
        rng: random.Random,
        clock: Clock,
        sleep: Sleep,
        budget: Budget | None = None,
        bindings: Mapping[str, str] | None = None,
        shared: SharedBindings | None = None,
    ) -> None:
        self._rng = rng
        self._clock = clock
        self._sleep = sleep
        states = [BackendState(b, gates[b.scope], i, clock) for i, b in enumerate(profile.backends)]
        self._pool(profile, states)
        self._cooled_until = 0.0  # the latest cooldown of any backend: none cools after it
        self.threshold = profile.cache_threshold  # what a lookahead's match must cover
        self.prompts = Prepared()  # the prompts a lookahead rendered, for the call's decision
        self._sessions = profile.binding == "session"
        self._max_pause = profile.retry.max_server_pause  # the longest a server may hold a backend
        #: each session's binding: its backend, tag (new | kept | rebound) and, rebound, why
        self._bindings: dict[str, tuple[BackendState, str, str | None]] = {}
        self._turns: dict[str, int] = {}  # the calls each session handed in so far (``turn``)
        self._saved: dict[str, str] = dict(bindings or {})  # --resume's {session: deployment}
        self.budget = budget  # the run's budget, when it has one: admission reserves from it
        #: the bindings of the other processes serving the pool, when shared (sessions only)
        self.shared = shared if self._sessions else None
        distinct = {id(s.gate): s.gate for s in self.states}.values()
        self._waiting = Waiting(self._sweep, len(distinct), rng, sleep)
        self._queued = isinstance(self._strategy, FirstAvailable)  # requests wait in line
        self._listened: set[int] = set()  # the gates whose releases serve the queue (their ids)
        self._listen(distinct)

    def _pool(self, profile: Profile, states: list[BackendState]) -> None:
        """The pool of ``states`` (in ``profile``'s order) and what is built once from it: the
        strategy, the backends it admits, the candidates of a strategy blind to load."""
        self.profile = profile
        self.states: tuple[BackendState, ...] = tuple(states)
        self._by_id = {s.backend.id: s for s in self.states}
        self._strategy = make_strategy(profile, self._rng)
        admits = self._strategy.admits
        self._admitted = tuple(s for s in self.states if s.down is None and admits(s.backend))
        # a strategy blind to load sees only what never changes: its candidates, built once
        fixed = tuple(Candidate(s.position, s.backend.weight) for s in self.states)
        self._fixed = None if self._strategy.load_aware else fixed
        self._skip_cooling = self._strategy.load_aware or profile.cooldown.round_robin
        #: the strategy that reads prompts, when it is the one
        self._prefixes = self._strategy if isinstance(self._strategy, CacheAware) else None

    def _listen(self, gates: Iterable[Gate]) -> None:
        """first_available: a release at any of ``gates`` serves the requests waiting."""
        if not self._queued:
            return
        for gate in gates:
            if id(gate) not in self._listened:
                self._listened.add(id(gate))
                gate.add_release_listener(self._waiting.on_capacity)

    # -- public API --------------------------------------------------------------------------

    def acquire(
        self,
        *,
        session: str | None = None,
        exclude: frozenset[str] = frozenset(),
        messages: Sequence[Mapping[str, Any]] | None = None,
        params: Mapping[str, Any] | None = None,
        moved_for: str | None = None,
    ) -> Awaitable[Lease]:
        """One routing decision, awaited: a lease holding ONE slot on the chosen backend's gate.

        With ``binding = "session"`` a session routes at its first call and stays there while
        its backend is up; ``exclude`` names backends not to use; ``messages`` and ``params``
        are the call's prompt, for a strategy that reads it (cache_aware: the call's prompt
        chosen by, and then recorded as sent to, the backend that takes it); ``moved_for``: the
        error that moved the call off its backend (``exclude`` names it), the reason its
        session binds again. A session bound again has the lease's ``rebound_for`` say why:
        that error, its backend's reason for being down, ``not_eligible`` (the call may not go
        there: its endpoint or model) or ``removed`` (a saved binding's backend no longer in the
        profile). Raises NoBackendError."""
        if self._prefixes is None or messages is None or not self._prefixes.reads():
            return self._acquire(session, exclude, None, None, moved_for)
        prompt = self.prompts.of(messages, params)
        return self._acquire(session, exclude, prompt, params, moved_for)

    async def _acquire(
        self,
        session: str | None,
        exclude: frozenset[str],
        prompt: Prompt | None,
        params: Mapping[str, Any] | None = None,
        moved_for: str | None = None,
    ) -> Lease:
        if not (self._sessions and session is not None):
            lease = self._grant(await self._route(exclude, prompt), None)
        else:
            state, tag, why = self._bound(session)
            if state is None and self.shared is not None:  # bound by another process?
                state, tag, why = await self._bound_elsewhere(session, exclude)
            if state is None or state.backend.id in exclude or not await self._slot(state):
                if state is not None:  # moved off its backend, or its backend went down
                    tag, why = "rebound", state.down or moved_for or "not_eligible"
                moved = None
                if tag == "rebound" and self.shared is not None:  # moved by another process?
                    moved = await self._moved_elsewhere(session, state, exclude)
                if moved is not None:
                    self._bind(session, moved, tag, why)
                    state = moved
                else:
                    state = await self._route(exclude, prompt)
                    self._bind(session, state, tag, why)
                    if self.shared is not None:
                        await self.shared.bind(session, state.backend.id)
                if tag == "rebound":
                    log.info("rrcli.session_rebound", session=session, to=state.backend.id, why=why)
            elif self.shared is not None:
                self.shared.touch(session)
            lease = self._grant(state, tag)
            lease.rebound_for = why
        if prompt is not None:  # cache_aware: the prompt is recorded where it went, keyed there
            prefixes, position = self._prefixes, lease.state.position
            assert prefixes is not None
            if prefixes.sent(position, prompt) and "prompt_cache_key" not in (params or ()):
                lease.cache_key = prefixes.cache_keys.key(position, prompt.text, self._clock())
        return lease

    def _bound(self, session: str) -> tuple[BackendState | None, str, str | None]:
        """The backend ``session`` is bound to (a binding saved by an earlier run taken up now),
        the binding's tag and why it was bound again; None and the tag and why of a binding to
        make when it has none."""
        bound = self._bindings.get(session)
        if bound is not None:
            return bound
        if session not in self._saved:
            return None, "new", None
        if (saved := self._by_id.get(self._saved.pop(session))) is None:
            return None, "rebound", "removed"
        self._bind(session, saved, "kept")
        return saved, "kept", None

    async def _bound_elsewhere(
        self, session: str, exclude: frozenset[str]
    ) -> tuple[BackendState | None, str, str | None]:
        """A session this process has not seen, bound by another sharing the pool: kept on
        that backend (bound here too) when it is in this pool; else None, to bind as new."""
        assert self.shared is not None
        deployment = await self.shared.bound(session)
        state = None if deployment is None else self._by_id.get(deployment)
        if state is None:
            return None, "new", None
        self._bind(session, state, "kept")
        return state, "kept", None

    async def _moved_elsewhere(
        self, session: str, state: BackendState | None, exclude: frozenset[str]
    ) -> BackendState | None:
        """The backend another process already moved ``session`` to, off ``state``, a slot on
        it held; None when there is none this call may use."""
        assert self.shared is not None
        deployment = await self.shared.bound(session)
        moved = None if deployment is None else self._by_id.get(deployment)
        if moved is None or moved is state or deployment in exclude or moved.down is not None:
            return None
        return moved if await self._slot(moved) else None

    async def reacquire(self, lease: Lease) -> None:
        """A retry takes a slot again on the SAME backend (FIFO at its gate); raises
        BackendDown, holding nothing, when that backend is or goes down."""
        if lease.held:
            raise RuntimeError("reacquire of a lease that still holds its slot")
        state = lease.state
        if not await self._slot(state):
            raise BackendDown(state.backend.id)
        self._grant(state, lease.binding, lease)

    async def release(self, lease: Lease) -> None:
        """Give the lease's slot back (idempotent): to a waiter at the gate first, then to the
        first_available requests already waiting, before any new request."""
        if not lease.held:
            return
        lease.held = False
        lease.state.in_flight -= 1
        await (self._waiting.free(lease.state.gate) if self._queued else lease.state.gate.release())

    def admit(self, lease: Lease, tokens: int, call: Call) -> Awaitable[bool | None]:
        """Await it until the lease's next attempt may start (every attempt starts here): its
        slot again if a retry gave it back (``reacquire``), a budget's worst case set aside (after
        calls in flight settle; ``Halted`` when it never fits), the rpm/tpm budget for ``tokens``.
        It comes true, holding nothing, when a retry's backend left the pool while the retry
        waited: the call is routed again. Without a budget, or with room in a local one, a held
        lease awaits the gate's reserve itself (no coroutine between)."""
        if not lease.held:
            return self._readmit(lease, tokens, call)
        if self.budget is not None:
            step = self.budget.reserve(lease, tokens, call)
            if step is not None:
                return self._admit_after(step, lease, tokens)
        return lease.state.gate.reserve(tokens)

    async def refund(self, lease: Lease) -> None:
        """Give back the budget room the lease's next attempt set aside and never used: it
        ended (cancelled, the engine closed) before it was sent."""
        if self.budget is not None:
            step = self.budget.settle(lease, 0.0)
            if step is not None:
                await step

    async def _admit_after(self, step: Awaitable[None], lease: Lease, tokens: int) -> None:
        await step
        await lease.state.gate.reserve(tokens)

    async def _readmit(self, lease: Lease, tokens: int, call: Call) -> bool:
        try:
            await self.reacquire(lease)
        except BackendDown:
            return True
        if self.budget is not None:
            step = self.budget.reserve(lease, tokens, call)
            if step is not None:
                await step
        await lease.state.gate.reserve(tokens)
        return False

    async def observe(self, attempt: Attempt, lease: Lease | None = None) -> None:
        """One attempt, while it still holds its slot: display counters, EWMA latency, cooldowns,
        AIMD, a server-given pause (a 429's Retry-After; a success's rate-limit headers saying a
        budget is spent until its reset; never longer than ``max_server_pause``) and the tpm
        booking corrected by the reply's usage (never above what the call could have cost); a
        cancelled attempt changes nothing. Its money is the cashier's (cashier.py)."""
        # the lease's own state: a backend a reload removed still has its calls in flight
        state = self._by_id[attempt.backend.id] if lease is None else lease.state
        reply, error = attempt.reply, attempt.error
        if reply is None:
            assert error is not None  # an attempt has its reply or its error
            if attempt.decision != "cancelled":  # a caller that left says nothing of the backend
                self._failed(state, error, attempt.outcome == "retry")
            return
        state.done += 1
        state.failures_in_a_row = 0
        old, latency_ms = state.ewma_latency_ms, attempt.latency_ms
        state.ewma_latency_ms = latency_ms if old is None else old + EWMA_ALPHA * (latency_ms - old)
        state.gate.record(False)
        if reply.pause_s:
            until = self._clock() + min(reply.pause_s, self._max_pause)
            self._cool(state, until, "rate_limit_headers")
            state.gate.pause_until(until)
        if reply.input_tokens is not None or reply.output_tokens is not None:
            actual = (reply.input_tokens or 0) + (reply.output_tokens or 0)
            most = plausible_call_tokens(attempt.estimate, state.backend.tpm)
            await state.gate.settle(attempt.estimate, min(actual, most))

    @property
    def bindings(self) -> dict[str, str]:
        """The sessions bound now: ``{session: deployment id}``."""
        return {session: bound[0].backend.id for session, bound in self._bindings.items()}

    def restore_bindings(self, mapping: Mapping[str, str]) -> None:
        """Saved ``{session: deployment id}`` bindings from an earlier run (``--resume``)."""
        self._saved.update(mapping)

    def forget(self, session: str) -> None:
        """Drop the binding of a session no later call can use, so memory stays flat."""
        bound = self._bindings.pop(session, None)
        if bound is not None:
            bound[0].sessions -= 1
        self._saved.pop(session, None)
        self._turns.pop(session, None)

    def turn(self, session: str) -> int:
        """The turn of ``session``'s next call: how many calls it handed in before (from 0),
        until it is forgotten."""
        turn = self._turns.get(session, 0)
        self._turns[session] = turn + 1
        return turn

    def _bind(self, session: str, state: BackendState, tag: str, why: str | None = None) -> None:
        """Bind ``session`` to ``state`` (instead of where it was bound), counted there."""
        bound = self._bindings.get(session)
        if bound is not None:
            bound[0].sessions -= 1
        state.sessions += 1
        self._bindings[session] = (state, tag, why)

    @property
    def warm(self) -> bool:
        """Whether the strategy pictures what each backend holds warm (cache_aware): then the
        free positions, the picture, threshold and prompts serve a lookahead."""
        return self._prefixes is not None

    @property
    def pictured(self) -> CacheAware | None:
        """cache_aware itself: each backend's recent prompts, their heads, its cold streak."""
        return self._prefixes

    def free_positions(self) -> list[int]:
        """The positions of the backends a decision may use that have a free slot now."""
        return [
            s.position
            for s in self._admitted
            if s.gate.in_flight + s.gate.waiting < s.gate.cap and not s.cooling
        ]

    @property
    def healthy(self) -> int:
        """How many backends a decision may choose: neither down nor weighted out."""
        return len(self._admitted)

    def take_down(self, deployment: str, reason: str) -> BackendState | None:
        """Take backend ``deployment`` out of the pool (until ``bring_up``), its state returned
        (None: it already was out); calls waiting at its gate choose again, calls in flight
        finish."""
        state = self._by_id.get(deployment)
        if state is None or state.down is not None:  # out already, or no longer in the pool
            return None
        state.down = reason
        self._admitted = tuple(s for s in self._admitted if s is not state)
        state.gate.wake_waiters()
        healthy = {s.backend.id for s in self._admitted}
        for waiter in self._waiting.queue:  # first_available requests left with no backend fail
            if not (waiter.granted.done() or healthy - waiter.exclude):
                waiter.granted.set_exception(no_backend(self.states, bool(healthy), waiter.exclude))
        return state

    def holds(self, backend: Backend) -> bool:
        """Whether ``backend`` is in the pool as it is now defined (a reload may have removed or
        changed it while its calls were in flight)."""
        state = self._by_id.get(backend.id)
        return state is not None and state.backend == backend

    def bring_up(self, deployment: str) -> BackendState | None:
        """Bring backend ``deployment`` back into the pool (a probe was answered), its state
        returned (None: it was not out); it starts with no failures and no cooldown."""
        state = self._by_id.get(deployment)
        if state is None or state.down is None:  # not out, or no longer in the pool
            return None
        state.down, state.failures_in_a_row = None, 0
        state.cooldown_until, state.cooled_for = 0.0, None
        admits = self._strategy.admits
        self._admitted = tuple(s for s in self.states if s.down is None and admits(s.backend))
        return state

    def reload(self, profile: Profile, gates: Mapping[str, Gate]) -> tuple[BackendState, ...]:
        """The pool of ``profile`` from now on, each backend on its scope's gate in ``gates``; the
        states of the backends it no longer has (removed, or changed: a changed backend is a new
        one under the same id) are returned, out of the pool (``down`` ``removed``). A backend
        unchanged keeps its state (its calls in flight, counters, health, sessions); a session
        bound to a changed one moves to its new state, one bound to a removed one binds again
        at its next call (``removed``). Calls in flight on a removed backend finish there; calls
        waiting for its slot choose again. Only the backends may differ from the pool's profile."""
        clock = self._clock
        states = []
        for position, backend in enumerate(profile.backends):
            state = self._by_id.get(backend.id)
            if state is None or state.backend != backend or state.gate is not gates[backend.scope]:
                state = BackendState(backend, gates[backend.scope], position, clock)
            state.position = position
            states.append(state)
        kept = {id(s) for s in states}
        retired = tuple(s for s in self.states if id(s) not in kept)
        self._pool(profile, states)
        for state in retired:
            state.down = REMOVED
            state.gate.wake_waiters()  # its waiters choose again, among the pool as it is now
        for session, (state, tag, why) in list(self._bindings.items()):
            if state.down == REMOVED and (new := self._by_id.get(state.backend.id)) is not None:
                self._bind(session, new, tag, why)  # the same deployment, as it is now defined
        distinct = {id(s.gate): s.gate for s in self.states}.values()
        self._waiting.n_gates = len(distinct)
        self._listen(distinct)
        healthy = {s.backend.id for s in self._admitted}
        for waiter in self._waiting.queue:  # first_available requests left with no backend fail
            if not (waiter.granted.done() or healthy - waiter.exclude):
                waiter.granted.set_exception(no_backend(self.states, bool(healthy), waiter.exclude))
        return retired

    # -- internals ---------------------------------------------------------------------------

    def _grant(self, state: BackendState, binding: str | None, lease: Lease | None = None) -> Lease:
        """The one place a backend's in_flight goes up: a slot of its gate is now held."""
        state.in_flight += 1
        if lease is None:
            return Lease(state, binding)
        lease.held = True
        return lease

    def _failed(self, state: BackendState, error: ProviderError, retried: bool) -> None:
        """A failed attempt: counted (``retried``: another attempt follows), and its cooldowns
        and the AIMD step."""
        if retried:
            state.retries += 1
        else:
            state.errors += 1
        now = self._clock()
        if error.rate_limited:
            state.gate.record(True)
            if error.retry_after is not None:
                until = now + min(error.retry_after, self._max_pause)
                self._cool(state, until, "retry_after")
                if self.profile.retry.respect_retry_after:
                    state.gate.pause_until(until)
        if error.transient and not (error.rate_limited and self.profile.gate.adaptive):
            # an adaptive cap answers a 429 by itself: the backend is busy, not failing
            state.failures_in_a_row += 1
            limit = self.profile.cooldown.consecutive_failures
            if limit and state.failures_in_a_row >= limit:
                state.failures_in_a_row = 0
                self._cool(state, now + self.profile.cooldown.duration, "consecutive_failures")

    def _cool(self, state: BackendState, until: float, reason: str) -> None:
        """Extend the cooldown to ``until``; a cooldown is never shortened."""
        if until > state.cooldown_until:
            state.cooldown_until, state.cooled_for = until, reason
            self._cooled_until = max(self._cooled_until, until)
            seconds = round(until - self._clock(), 3)
            log.info(
                "rrcli.backend_cooling", backend=state.backend.id, reason=reason, seconds=seconds
            )

    async def _slot(self, state: BackendState) -> bool:
        """Wait for a slot at ``state``'s gate: True once held, False (holding none) once down."""
        while state.down is None:
            try:
                await state.gate.acquire()
            except WaitEnded:  # sent away: its backend went down, or another of its scope
                continue
            return True
        return False

    def _candidates(self, exclude: frozenset[str]) -> tuple[Sequence[BackendState], float | None]:
        """The backends this decision may use, and, when every one of them is cooling, the time
        the first recovers (then the list is empty)."""
        allowed = self._admitted
        if exclude:
            allowed = tuple(s for s in allowed if s.backend.id not in exclude)
        if not allowed:
            raise no_backend(self.states, bool(self._admitted), exclude)
        if not self._skip_cooling or self._clock() >= self._cooled_until:
            return allowed, None
        warm = [s for s in allowed if not s.cooling]
        return warm, (None if warm else min(s.cooldown_until for s in allowed))

    def _snapshot(self, states: Sequence[BackendState]) -> list[Candidate]:
        if self._fixed is not None:
            return [self._fixed[s.position] for s in states]
        return [
            Candidate(
                s.position,
                s.backend.weight,
                s.gate.in_flight,
                s.gate.waiting,
                max(1, s.gate.cap),
                s.ewma_latency_ms,
            )
            for s in states
        ]

    async def _route(self, exclude: frozenset[str], prompt: Prompt | None = None) -> BackendState:
        """Choose a backend (for ``prompt``, when the strategy reads it) and take one slot on
        its gate."""
        while True:
            candidates, recovery = self._candidates(exclude)
            if not candidates:
                # every candidate is cooling: wait for the first to recover instead of failing
                await self._sleep(max(0.0, (recovery or 0.0) - self._clock()))
                continue
            if self._queued:
                return await self._waiting.take(exclude)
            snapshot = self._snapshot(candidates)
            if prompt is not None and self._prefixes is not None:
                state = candidates[self._prefixes.choose_for(snapshot, prompt)]
            else:
                state = candidates[self._strategy.choose(snapshot)]
            try:
                await state.gate.acquire()
            except WaitEnded:  # its backend, or another of its scope, went down: choose again
                continue
            return state

    async def _sweep(self, exclude: frozenset[str], refused: set[int]) -> BackendState | None:
        """Try the eligible gates in a fresh shuffle; the first that admits without queuing gives
        its slot. ``refused`` (gate ids) spares gates that already said no in this pass."""
        candidates, _ = self._candidates(exclude)
        strategy = self._strategy
        assert isinstance(strategy, FirstAvailable)
        for i in strategy.order(self._snapshot(candidates)):
            state = candidates[i]
            if id(state.gate) in refused:
                continue
            if await state.gate.try_acquire():
                return state
            refused.add(id(state.gate))
        return None
