"""What ``rrcli validate --probe --jobs`` checks beyond the profile itself.

``probe`` sends one tiny request to each backend (its own key, its own client) and reports
reachability and latency; ``check_jobs`` reads a jobs file the way ``run`` would and counts its
shapes and its invalid lines. Both return plain records; the CLI renders them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rrcli.config.profile import Backend, Profile, RetrySettings
from rrcli.errors import ProviderError, UsageError
from rrcli.providers import make_provider
from rrcli.providers.base import Call
from rrcli.records.jobs import InvalidJob, iter_jobs

__all__ = ["JobsReport", "ProbeResult", "check_jobs", "probe"]

PROBE_MESSAGES = [{"role": "user", "content": "Reply with the word ok."}]


@dataclass(frozen=True, slots=True)
class ProbeResult:
    backend: str
    ok: bool
    latency_ms: float | None
    detail: str  # the response model, or the error's type and message


@dataclass(slots=True)
class JobsReport:
    source: str
    kinds: Counter[str] = field(default_factory=Counter)
    invalid: list[str] = field(default_factory=list)  # messages, each naming its line

    @property
    def jobs(self) -> int:
        return sum(self.kinds.values())

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "jobs": self.jobs,
            "kinds": dict(self.kinds),
            "invalid": self.invalid,
        }


async def _probe_one(backend: Backend, environ: Mapping[str, str], timeout: float) -> ProbeResult:
    try:
        key = backend.credentials.resolve(environ)
    except UsageError as exc:
        return ProbeResult(backend.id, False, None, str(exc))
    provider = make_provider(backend, key, retry=RetrySettings(), seed=0)
    t0 = time.monotonic()
    try:
        reply = await asyncio.wait_for(
            provider.send(Call(PROBE_MESSAGES, {**backend.params, "max_tokens": 5})), timeout
        )
    except ProviderError as exc:
        return ProbeResult(backend.id, False, None, f"{exc.type}: {exc.message}")
    except TimeoutError:
        return ProbeResult(backend.id, False, None, f"timeout: no answer in {timeout:g} s")
    finally:
        await provider.aclose()
    latency = round((time.monotonic() - t0) * 1000.0, 1)
    return ProbeResult(backend.id, True, latency, reply.response_model or backend.model)


async def probe(
    profile: Profile, environ: Mapping[str, str], *, timeout: float = 20.0
) -> list[ProbeResult]:
    """One tiny request to every backend at once; never raises for a failing backend."""
    return list(await asyncio.gather(*(_probe_one(b, environ, timeout) for b in profile.backends)))


def check_jobs(path: Path) -> JobsReport:
    """Read a jobs file as ``run`` would; UsageError if it cannot be opened."""
    report = JobsReport(str(path))
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the jobs file: {exc.strerror}") from exc
    with stream:
        for job in iter_jobs(stream, str(path)):
            if isinstance(job, InvalidJob):
                report.invalid.append(job.message)
            else:
                report.kinds[job.kind] += 1
    return report
