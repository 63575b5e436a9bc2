"""What the engine is asked to do: the part of a run's options the engine itself reads (its
response cache, its budget, its trace file, its replies). Each front-end hands one over: the batch
runner from ``RunOptions``, ``rrcli.Pool`` from its own arguments."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["EngineOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    """``traces``: the trace file (None writes none); ``out``: the results file, whose path
    names this run's share of a budget kept in Redis; ``resume``: the spend of ``traces`` counts
    against ``max_cost`` (USD the run may spend; None: the profile's budget); ``cache`` and
    ``cache_mode``: the response cache file and how it is used (None: the profile's);
    ``queue``: the shared queue the run works on, whose budget its workers share;
    ``results``: the results file the run writes (None: standard output or a callback), named in
    the trace's run record so a resume counts that file's spend only; ``stream``: every call
    streamed; ``keep_response``: result lines carry the provider's
    body; ``seed``: the run's random choices (None: the profile's); ``recover_after``: the
    seconds before a backend down is probed again when the profile's ``[health]`` does not
    say (0: down for the run); ``lasting``: the front-end outlives its pool's outages (serve,
    Pool): with every backend down and healing, calls are refused until a probe brings one
    back, where a run halts."""

    traces: Path | None = None
    out: Path | None = None
    results: Path | None = None
    resume: bool = False
    max_cost: float | None = None
    cache: Path | None = None
    cache_mode: str | None = None
    queue: str | None = None
    stream: bool = False
    keep_response: bool = False
    seed: int | None = None
    recover_after: float = 0.0
    lasting: bool = False
