"""``rrcli run --dry-run``: parse, validate and route every selected job on paper; send nothing.

The plan is what a user checks before spending money: calls per deployment, estimated input
tokens and output tokens and, where backends have a price (config/prices.py), the estimated
input and output cost, with a total; and the jobs a run would
find invalid because no backend can take them: none serves their endpoint, or none whose API
can express their params (``refused``, one message each; each job is routed only among the
backends that can take it). It writes and repairs no file, so it does not read a results file
either: with ``--resume`` it still plans every selected job (the run skips those already ``ok``).

A call's output is taken at its cap, the most it may cost (as a budget reserves it): the job's
``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens``, else the backend's params',
else the cap rrcli sends or the model cannot pass (Anthropic's default ``max_tokens``, the
model's documented most output), else ``tokens.UNCAPPED_OUTPUT`` (16,384); embeddings and
moderations have none. ``output_from`` counts the calls by which it was.

The likely cost, beside it, is where earlier runs of the same profile left traces: the run's
trace file (``--traces``, else the one beside the results), its call records of runs whose run
record names this profile. Each call's output is then taken at the mean output of its
deployment's earlier ok calls (the mean of all of them for a deployment that has none), never
past its cap; its input as in the most.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from rrcli.config.prices import pool_prices
from rrcli.config.profile import Backend, Profile
from rrcli.engine.assembly import make_router
from rrcli.engine.money import sent_cap
from rrcli.engine.summary import RunSummary
from rrcli.errors import UsageError
from rrcli.records.dollars import usd
from rrcli.records.formatfit import refuse_unfit
from rrcli.records.jobs import InvalidJob, Job, iter_jobs
from rrcli.records.spend import Outputs, earlier_outputs
from rrcli.routing.costs import NO_OUTPUT
from rrcli.routing.router import Router
from rrcli.routing.serving import RouteRules
from rrcli.running.options import RunOptions
from rrcli.running.workers import open_jobs, select_jobs
from rrcli.tokens import UNCAPPED_OUTPUT, estimate_input_tokens, estimate_value_tokens, output_cap

__all__ = ["Plan", "plan"]


@dataclass(slots=True)
class Plan:
    """What ``--dry-run`` prints: routing on paper, nothing sent."""

    jobs: int = 0
    invalid: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    input_tokens: dict[str, int] = field(default_factory=dict)
    output_tokens: dict[str, int] = field(default_factory=dict)  # at each call's cap
    input_cost: dict[str, float] | None = None  # USD, priced deployments only; None: none is
    output_cost: dict[str, float] | None = None
    output_from: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTPUT_FROM, 0))
    refused: list[str] = field(default_factory=list)  # "line N: no backend serves ..."
    means: dict[str, float] = field(default_factory=dict)  # earlier output per call, by id
    earlier: int = 0  # the earlier calls the means come from
    likely_output: dict[str, float] = field(default_factory=dict)  # at the means, capped
    likely_cost: dict[str, float] | None = None  # USD, priced deployments; None: no earlier

    def rows(self, backends: Sequence[Backend]) -> tuple[list[str], list[list[str]]]:
        """The plan as a table of text: its header, and a row per deployment then the total
        (the cost columns when any deployment is priced)."""
        counts = (self.calls, self.input_tokens, self.output_tokens)
        head = ["deployment", "model", "calls", "est. input tokens", "est. output tokens"]
        inputs, outputs = self.input_cost, self.output_cost
        likely = self.likely_cost
        if inputs is not None and outputs is not None:
            head += ["est. input USD", "est. output USD", "at most USD"]
            head += [] if likely is None else ["likely USD"]
        rows = []
        for b in backends:
            row = [b.id, b.model, *(f"{c[b.id]:,}" for c in counts)]
            if inputs is not None and outputs is not None:
                row += _costs(inputs.get(b.id), outputs.get(b.id))
            if likely is not None:
                row.append("-" if b.id not in likely else usd(likely[b.id], 4))
            rows.append(row)
        total = ["total", "", *(f"{sum(c.values()):,}" for c in counts)]
        if inputs is not None and outputs is not None:
            total += _costs(sum(inputs.values()), sum(outputs.values()))
        if likely is not None:
            total.append(usd(sum(likely.values()), 4))
        return head, [*rows, total]

    def likely_note(self, traces: Path | None) -> str | None:
        """The line under the plan that says where the likely cost came from; None without."""
        if self.likely_cost is None:
            return None
        means = ", ".join(f"{bid} {mean:,.0f}" for bid, mean in self.means.items())
        return (
            f"likely: output at the mean of the {self.earlier:,} earlier ok calls of this "
            f"profile in {traces} (tokens a call: {means}), never past a call's cap"
        )

    def output_note(self) -> str:
        """The line under the plan: where each call's output estimate came from."""
        parts = {
            "job": "the job's max tokens",
            "backend": "the backend's params",
            "model": "the cap rrcli sends or the model's most output",
            "default": f"the default of {UNCAPPED_OUTPUT:,} (no cap set)",
        }
        counted = [f"{n:,} from {parts[k]}" for k, n in self.output_from.items() if n]
        note = "at most: output estimated at each call's cap, the most it may cost: " + (
            "; ".join(counted) or "no call"
        )
        if self.input_cost is not None and len(self.input_cost) < len(self.calls):
            note += "; the total counts priced deployments only"
        return note


#: where a call's output estimate came from: the job's cap, the backend's, or the default
OUTPUT_FROM = ("job", "backend", "model", "default")


async def plan(profile: Profile, options: RunOptions) -> Plan:
    """Parse, validate and route every selected job on paper, with an idle pool; send nothing.
    With --queue, the jobs file it would load (a worker joining a queue has none to plan)."""
    if options.queue is not None and options.jobs is None:
        raise UsageError("--dry-run with --queue plans a jobs file: give JOBS")
    seed = options.seed if options.seed is not None else profile.seed
    router, _ = make_router(profile, random.Random(seed), local=True)
    result = Plan(calls={b.id: 0 for b in profile.backends})
    result.input_tokens = dict.fromkeys(result.calls, 0)
    result.output_tokens = dict.fromkeys(result.calls, 0)
    _earlier(result, earlier_outputs(options.with_defaults().traces, profile.name))
    summary = RunSummary("dry-run")
    session_binding = profile.binding == "session"
    rules = RouteRules(profile.backends)
    if options.job_path is not None and options.job_path.is_file():
        refuse_unfit(options.job_path, options.fmt)  # as run refuses them
    with ExitStack() as stack:
        source, stream = open_jobs(options, stack)
        jobs = select_jobs(
            iter_jobs(stream, source),
            done=None,
            summary=summary,
            shard=options.shard,
            limit=options.limit,
        )
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
    prices = {bid: p for bid, p in pool_prices(profile.backends).items() if p is not None}
    if prices:
        result.input_cost = {
            bid: result.input_tokens[bid] * p.input / 1e6 for bid, p in prices.items()
        }
        result.output_cost = {
            bid: result.output_tokens[bid] * p.output / 1e6 for bid, p in prices.items()
        }
        if result.means:
            result.likely_cost = {
                bid: result.input_cost[bid] + result.likely_output[bid] * p.output / 1e6
                for bid, p in prices.items()
            }
    return result


def _earlier(result: Plan, found: Outputs) -> None:
    """The mean output per call of each deployment from its earlier calls (``found``), the
    mean of all of them for one with none; nothing when there were none."""
    calls = sum(n for n, _ in found.values())
    if not calls:
        return
    overall = sum(total for _, total in found.values()) / calls
    result.earlier = calls
    for bid in result.calls:
        n, total = found.get(bid, (0, 0))
        result.means[bid] = total / n if n else overall
    result.likely_output = dict.fromkeys(result.calls, 0.0)


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
        backend = lease.state.backend
        backend_id = backend.id
        result.calls[backend_id] += 1
        cap = _output(job, backend, result.output_from)
        result.output_tokens[backend_id] += cap
        if result.means:
            result.likely_output[backend_id] += min(cap, result.means[backend_id])
        result.input_tokens[backend_id] += (
            estimate_input_tokens(history)
            if job.input is None
            else estimate_value_tokens(job.input)
        )


def _output(job: Job, backend: Backend, output_from: dict[str, int]) -> int:
    """The output tokens a call of ``job`` on ``backend`` may take at most, counted by where the
    cap came from in ``output_from``."""
    if job.endpoint in NO_OUTPUT:
        return 0
    for where, params in (("job", job.params), ("backend", backend.params)):
        cap = output_cap(params)
        if cap is not None:
            output_from[where] += 1
            return cap
    sent = sent_cap(backend)
    if sent is not None:
        output_from["model"] += 1
        return sent
    output_from["default"] += 1
    return UNCAPPED_OUTPUT


def _costs(input_cost: float | None, output_cost: float | None) -> list[str]:
    """The cost cells of a row: input, output and their sum, in USD."""
    if input_cost is None or output_cost is None:
        return ["-", "-", "no price"]
    return [usd(input_cost, 4), usd(output_cost, 4), usd(input_cost + output_cost, 4)]
