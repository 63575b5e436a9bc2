"""rrcli: a command-line load-balancing runner for LLM APIs.

The library API is small: load a profile, read jobs, run them, summarize traces. The CLI
(``rrcli.cli``) is a thin layer over these::

    import asyncio, rrcli
    profile = rrcli.load_profile("pool.toml")
    options = rrcli.RunOptions(jobs=Path("jobs.jsonl"))  # -> jobs.results.jsonl, jobs.traces.jsonl
    summary = asyncio.run(rrcli.run(profile, options))
    table = rrcli.summarize([Path("jobs.traces.jsonl")])

    async with rrcli.Pool.from_profile("pool.toml") as pool:  # calls from a program
        record = await pool.chat([{"role": "user", "content": "Hi"}])

The engine and stats are imported on first use, so ``import rrcli`` (and ``rrcli --help``)
stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = [
    "CallError",
    "Pool",
    "PoolTransport",
    "ProfileError",
    "ProviderError",
    "RRCLIError",
    "RunOptions",
    "RunSummary",
    "UsageError",
    "__version__",
    "iter_jobs",
    "load_profile",
    "run",
    "summarize",
    "validate_profile",
]

_LAZY = {
    "CallError": "rrcli.errors",
    "Pool": "rrcli.pool.pool",
    "PoolTransport": "rrcli.serve.transport",
    "ProfileError": "rrcli.errors",
    "ProviderError": "rrcli.errors",
    "RRCLIError": "rrcli.errors",
    "UsageError": "rrcli.errors",
    "load_profile": "rrcli.config.load",
    "validate_profile": "rrcli.config.load",
    "RunOptions": "rrcli.running.options",
    "RunSummary": "rrcli.running.runner",
    "run": "rrcli.running.runner",
    "iter_jobs": "rrcli.records.jobs",
    "summarize": "rrcli.stats.summary",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rrcli' has no attribute {name!r}")
