"""What a run is asked to do, and the defaults for what it is not told.

The library and the CLI share these rules: ``rrcli.run(profile, RunOptions(jobs=Path("x.jsonl")))``
writes ``x.results.jsonl`` and ``x.traces.jsonl`` in the working folder exactly as
``rrcli run x.jsonl`` does. Options that contradict each other cannot be built.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rrcli.config.profile import MAX_IN_FLIGHT
from rrcli.engine.options import EngineOptions
from rrcli.errors import UsageError
from rrcli.fleet.names import check_queue_name, worker_name

__all__ = ["STDOUT", "RunOptions", "parse_shard"]

STDIN_STEM = "stdin"  # the stem of the default outputs when jobs come on standard input
STDOUT = Path("-")  # ``out`` that writes the results to standard output


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What ``rrcli run`` was asked to do.

    ``jobs``: the jobs file (a path, or its name as a str); None reads standard input; any other
    iterable is the jobs themselves, one dict a job as a line of the file would hold it, read
    as the run goes. ``prompts``, when given, are the jobs instead. ``out`` and ``traces``:
    None is the default, filled in by ``with_defaults``: ``<jobs stem>.results.jsonl``
    and ``<jobs stem>.traces.jsonl`` in the working folder (stem ``stdin`` for standard input;
    a ``.gz`` or ``.zst`` suffix is not part of the stem);
    with ``prompts`` or job dicts, results go to ``on_result`` or else ``out`` or else standard
    output, and there is no trace file unless one is named. ``out`` ``-`` (STDOUT)
    writes the results to standard output. ``queue``: the shared queue the run works on (and
    loads ``jobs`` into); its default outputs are named after the queue and this worker:
    ``<NAME>.<host>-<pid>.results.jsonl``, so workers sharing a folder never share a file.
    """

    jobs: Path | Iterable[Mapping[str, Any]] | None = None
    out: Path | None = None
    traces: Path | None = None
    fmt: str = "rrcli"
    resume: bool = False
    overwrite: bool = False
    concurrency: int | None = None
    limit: int | None = None
    shard: tuple[int, int] | None = None
    seed: int | None = None
    stream: bool = False
    keep_response: bool = False  # result lines carry the provider's response body
    max_cost: float | None = None  # --max-cost: USD the run may spend (budget.py)
    prompts: tuple[str, ...] = ()  # --prompt: jobs given on the command line
    otlp: str | None = None  # --otlp: send spans to this collector ("": the OTEL_* environment)
    on_text: Callable[[str], None] | None = None  # --prompt --stream: text as it arrives
    on_result: Callable[[dict[str, Any]], None] | None = None  # results to a callback, not a file
    cache: Path | None = None  # --cache: the response cache file (None: the profile's, if any)
    cache_mode: str | None = None  # --cache-mode (None: the profile's, else readwrite)
    queue: str | None = None  # --queue NAME

    def __post_init__(self) -> None:
        if isinstance(self.jobs, str | os.PathLike):
            object.__setattr__(self, "jobs", Path(self.jobs))
        if self.max_cost is not None and not 0 <= self.max_cost < float("inf"):
            raise UsageError(
                f"--max-cost {self.max_cost:g}: expected an amount of USD, 0 or more (e.g. 5)"
            )
        if self.resume and self.overwrite:
            raise UsageError("--resume and --overwrite contradict each other — pass one of them")
        if self.concurrency is not None and not 1 <= self.concurrency <= MAX_IN_FLIGHT:
            raise UsageError(
                f"--concurrency {self.concurrency}: must be at most {MAX_IN_FLIGHT} (calls in "
                "flight at once) and at least 1"
            )

        if self.queue is not None:
            self._check_queue()

    def _check_queue(self) -> None:
        check_queue_name(self.queue or "")
        for given, flag, instead in (
            (self.resume, "--resume", "a queue already runs each job once: start another worker"),
            (self.shard is not None, "--shard", "start more workers on the queue instead"),
            (self.limit is not None, "--limit", "load a file of only the jobs to run"),
            (bool(self.prompts), "--prompt", "put the prompts in a jobs file"),
        ):
            if given:
                raise UsageError(f"--queue and {flag} do not go together — {instead}")
        if self.jobs == Path("-"):
            raise UsageError("--queue loads a jobs file: give its path, not - (standard input)")
        if self.job_dicts is not None:
            raise UsageError("a queue loads a jobs file: write the job dicts to one and name it")

    @property
    def job_path(self) -> Path | None:
        """The jobs file; None for standard input, prompts or job dicts."""
        return self.jobs if isinstance(self.jobs, Path) else None

    @property
    def job_dicts(self) -> Iterable[Mapping[str, Any]] | None:
        """The jobs given as dicts, when they were."""
        return None if self.jobs is None or isinstance(self.jobs, Path) else self.jobs

    @property
    def engine_options(self) -> EngineOptions:
        """What of these options the engine reads."""
        return EngineOptions(
            traces=self.traces,
            out=self.out,
            results=None if self.on_result is not None else self.out_file,
            resume=self.resume,
            max_cost=self.max_cost,
            cache=self.cache,
            cache_mode=self.cache_mode,
            queue=self.queue,
            stream=self.stream,
            keep_response=self.keep_response,
            seed=self.seed,
        )

    @property
    def out_file(self) -> Path | None:
        """The results file; None for standard output."""
        return None if self.out is None or self.out == STDOUT else self.out

    def with_defaults(self) -> RunOptions:
        """These options with the default outputs filled in; applying it twice changes
        nothing more."""
        if self.prompts or self.job_dicts is not None:
            return self
        stem = _stem(self.jobs) if isinstance(self.jobs, Path) else STDIN_STEM
        if self.queue is not None:
            stem = f"{self.queue}.{worker_name()}"
        return replace(
            self,
            out=self.out or Path(f"{stem}.results.jsonl"),
            traces=self.traces or Path(f"{stem}.traces.jsonl"),
        )


def _stem(jobs: Path) -> str:
    """The name outputs are named after: ``jobs`` for ``jobs.jsonl`` and ``jobs.jsonl.gz``."""
    return (jobs.with_suffix("") if jobs.suffix in (".gz", ".zst") else jobs).stem


def parse_shard(value: str) -> tuple[int, int]:
    """``--shard I/N`` as (I, N); UsageError unless 0 <= I < N."""
    try:
        index, count = (int(x) for x in value.split("/"))
    except ValueError:
        raise UsageError("expected I/N, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"expected 0 <= I < N, got {value}")
    return index, count
