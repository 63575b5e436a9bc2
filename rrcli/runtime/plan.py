"""``rrcli run --dry-run``: parse, validate and route every selected job on paper; send nothing.

The plan is what a user checks before spending money: calls per deployment, estimated input
tokens and, where backends have a ``price``, the estimated input cost; and the jobs a run would
find invalid because no backend can take them: none serves their endpoint, or none whose API
can express their params (``refused``, one message each; each job is routed only among the
backends that can take it). It writes and repairs no file, so it does not read a results file
either: with ``--resume`` it still plans every selected job (the run skips those already ``ok``).
"""

from __future__ import annotations

import random
from contextlib import ExitStack
from dataclasses import dataclass, field

from rrcli.config.profile import Profile
from rrcli.errors import UsageError
from rrcli.records.jobs import InvalidJob, Job, iter_jobs
from rrcli.runtime.control import RunSummary
from rrcli.runtime.router import Router
from rrcli.runtime.runner import RunOptions, make_router, open_jobs, select_jobs
from rrcli.runtime.serving import RouteRules
from rrcli.tokens import estimate_input_tokens, estimate_value_tokens

__all__ = ["Plan", "plan"]


@dataclass(slots=True)
class Plan:
    """What ``--dry-run`` prints: routing on paper, nothing sent."""

    jobs: int = 0
    invalid: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    input_tokens: dict[str, int] = field(default_factory=dict)
    input_cost: dict[str, float] | None = None
    refused: list[str] = field(default_factory=list)  # "line N: no backend serves ..."


async def plan(profile: Profile, options: RunOptions) -> Plan:
    """Parse, validate and route every selected job on paper, with an idle pool; send nothing.
    With --queue, the jobs file it would load (a worker joining a queue has none to plan)."""
    if options.queue is not None and options.jobs is None:
        raise UsageError("--dry-run with --queue plans a jobs file: give JOBS")
    seed = options.seed if options.seed is not None else profile.seed
    router, _ = make_router(profile, random.Random(seed), local=True)
    result = Plan(calls={b.id: 0 for b in profile.backends})
    result.input_tokens = dict.fromkeys(result.calls, 0)
    summary = RunSummary("dry-run")
    session_binding = profile.binding == "session"
    rules = RouteRules(profile.backends)
    with ExitStack() as stack:
        source, stream = open_jobs(options, stack)
        jobs = select_jobs(iter_jobs(stream, source), done=None, summary=summary,
                       shard=options.shard, limit=options.limit)  # fmt: skip
        for job in jobs:
            if isinstance(job, InvalidJob):
                result.invalid += 1
                continue
            excluded, refusal = rules.check(job)
            if refusal is not None:
                result.invalid += 1
                result.refused.append(f"line {job.line}: {refusal}")
                continue
            result.jobs += 1
            await _route(router, job, excluded, session_binding, result)
    prices = {b.id: b.price for b in profile.backends if b.price is not None}
    if prices:
        result.input_cost = {
            bid: result.input_tokens[bid] * price.input / 1e6 for bid, price in prices.items()
        }
    return result


async def _route(
    router: Router, job: Job, excluded: frozenset[str], session_binding: bool, result: Plan
) -> None:
    """Route each call of ``job`` on paper (an idle pool) and count it and its input tokens."""
    history = list(job.messages)
    for text in job.turns or (None,):
        if text is not None:
            history.append({"role": "user", "content": text})
        session = job.session if session_binding else None
        lease = await router.acquire(session=session, exclude=excluded)
        await router.release(lease)
        backend_id = lease.state.backend.id
        result.calls[backend_id] += 1
        result.input_tokens[backend_id] += (
            estimate_input_tokens(history)
            if job.input is None
            else estimate_value_tokens(job.input)
        )
