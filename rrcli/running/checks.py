"""``rrcli validate`` as a library call: the profile's report, and with ``--jobs``/``--probe``
what a run would meet beyond it.

``validate`` builds the whole report: the profile's diagnostics, a jobs file read the way ``run``
would (``check_jobs``: its shapes, its endpoints, its invalid lines, and the jobs no backend
of the profile can take — none serves their endpoint, or none whose API can express their
params — which a run would find invalid), and one tiny request to each backend (``probe``: its
own key, its own client, an endpoint it serves; reachability and latency). Every part is a plain
record and ``CheckReport.as_dict`` is the ``--json`` document; the CLI only renders them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rrcli.config.addresses import no_lookup
from rrcli.config.load import ValidationReport, resolve_profile_path, validate_profile
from rrcli.config.prices import KnownPrice, price_of
from rrcli.config.profile import Backend, Price, Profile, RetrySettings
from rrcli.config.redaction import redacted_url
from rrcli.errors import ProviderError, UsageError
from rrcli.providers import make_provider
from rrcli.providers.probe import PROBE_TIMEOUT, probe_call
from rrcli.records.jobs import InvalidJob, iter_jobs, open_jobs_file
from rrcli.routing.serving import RouteRules

__all__ = [
    "CheckReport",
    "JobsReport",
    "ProbeResult",
    "check_jobs",
    "price_lines",
    "probe",
    "validate",
]


@dataclass(frozen=True, slots=True)
class ProbeResult:
    backend: str
    ok: bool
    latency_ms: float | None
    detail: str  # the response model, or the error's type and message
    url: str | None = None  # where the probe was posted (None: no network, or no key)

    def line(self) -> str:
        """``validate --probe``: this backend's line, with the URL it posted to."""
        if self.ok:
            head = f"probe: {self.backend}: ok in {self.latency_ms:.0f} ms ({self.detail})"
        else:
            head = f"probe: {self.backend}: FAILED — {self.detail}"
        return head + (f" [POST {self.url}]" if self.url else "")


@dataclass(slots=True)
class JobsReport:
    source: str
    kinds: Counter[str] = field(default_factory=Counter)
    invalid: list[str] = field(default_factory=list)  # messages, each naming its line
    endpoints: Counter[str] = field(default_factory=Counter)  # valid jobs by endpoint
    narrowed: int = 0  # valid jobs some backends serving their endpoint cannot say

    @property
    def jobs(self) -> int:
        return sum(self.kinds.values())

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "jobs": self.jobs,
            "kinds": dict(self.kinds),
            "endpoints": dict(self.endpoints),
            "invalid": self.invalid,
            "narrowed": self.narrowed,
        }

    def lines(self) -> list[str]:
        """``validate --jobs``: the shapes counted (and the endpoints, when not all chat; the
        jobs only some backends can say, when there are any), then each invalid line."""
        kinds = ", ".join(f"{kind} {n:,}" for kind, n in sorted(self.kinds.items()))
        head = f"{self.source}: {self.jobs:,} jobs ({kinds or 'none'}), "
        if set(self.endpoints) - {"chat"}:
            served = sorted(self.endpoints.items())
            head += "endpoints: " + ", ".join(f"{e} {n:,}" for e, n in served) + ", "
        if self.narrowed:
            head += f"{self.narrowed:,} only for the backends that can say them, "
        head += f"{len(self.invalid):,} invalid"
        return [head, *(f"{self.source}: {message}" for message in self.invalid)]


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What ``rrcli validate`` reports: the profile, and the jobs file and probes when asked."""

    profile: ValidationReport
    jobs: JobsReport | None = None
    probes: tuple[ProbeResult, ...] | None = None
    prices: Mapping[str, KnownPrice | None] | None = None  # by backend id (config/prices.py)

    @property
    def failed(self) -> bool:
        """The jobs file has invalid lines, or a backend failed its probe."""
        return bool(self.jobs and self.jobs.invalid) or not all(p.ok for p in self.probes or ())

    @property
    def exit_code(self) -> int:
        """The exit code: 2 not a readable profile, 1 errors (or a failed check), else 0."""
        return self.profile.exit_code or (1 if self.failed else 0)

    def as_dict(self) -> dict[str, Any]:
        """The ``rrcli validate --json`` document, keys redacted."""
        document = self.profile.as_dict()
        document["ok"] = document["ok"] and not self.failed
        if self.jobs is not None:
            document["jobs"] = self.jobs.as_dict()
        if self.probes is not None:
            document["probe"] = [asdict(p) for p in self.probes]
        if self.prices is not None:
            document["prices"] = {
                bid: None if known is None else {**_set(known.price), "source": known.source}
                for bid, known in self.prices.items()
            }
        return document

    def lines(self) -> list[str]:
        """``rrcli validate`` as plain text: the profile's lines, then ``check_lines``."""
        return [*self.profile.plain_lines(), *self.check_lines()]

    def check_lines(self) -> list[str]:
        """The lines beside the profile's diagnostics: the prices looked up and the backends
        with none, the jobs file's report, the probes'."""
        lines = price_lines(self.prices or {})
        if self.jobs is not None:
            lines += self.jobs.lines()
        if self.probes is not None:
            lines += [probe.line() for probe in self.probes]
        return lines


def validate(
    profile: str | None,
    *,
    environ: Mapping[str, str],
    strict: bool = False,
    jobs: Path | None = None,
    probe_backends: bool = False,
) -> CheckReport:
    """The report of ``rrcli validate PROFILE``: ``profile`` is found as ``run`` finds it (``demo``
    is the built-in pool; None: $RRCLI_PROFILE, ./rrcli.toml, the XDG profile, as ``run``).
    The backends are probed only when the profile has no errors; without ``probe_backends``
    nothing leaves the machine, not even a DNS lookup of the backends' hosts."""
    report = validate_profile(
        resolve_profile_path(profile, environ),
        environ=environ,
        strict=strict,
        resolve=None if probe_backends else no_lookup,
    )
    backends = report.profile.backends if report.profile is not None else ()
    jobs_report = check_jobs(jobs, backends) if jobs is not None else None
    probes = None
    if probe_backends and report.ok and report.profile is not None:
        probes = tuple(asyncio.run(probe(report.profile, environ)))
    prices = {b.id: price_of(b) for b in backends} if report.profile is not None else None
    return CheckReport(report, jobs_report, probes, prices)


async def _probe_one(backend: Backend, environ: Mapping[str, str], timeout: float) -> ProbeResult:
    try:
        key = backend.credentials.resolve(environ)
    except UsageError as exc:
        return ProbeResult(backend.id, False, None, str(exc))
    provider = make_provider(backend, key, retry=RetrySettings(), seed=0)
    call = probe_call(backend)
    url_for = getattr(provider, "url_for", None)  # None: the in-process sim, no network
    url = None if url_for is None else redacted_url(url_for(call))
    t0 = time.monotonic()
    try:
        reply = await asyncio.wait_for(provider.send(call), timeout)
    except ProviderError as exc:
        detail = f"{exc.type}: {exc.message}{_not_found_hint(backend, exc)}"
        return ProbeResult(backend.id, False, None, detail, url)
    except TimeoutError:
        detail = (
            f"timeout: no answer within the probe's {timeout:g} s limit (a run waits up to the "
            f"backend's `timeout`, {backend.timeout:g} s)"
        )
        return ProbeResult(backend.id, False, None, detail, url)
    finally:
        await provider.aclose()
    latency = round((time.monotonic() - t0) * 1000.0, 3)
    return ProbeResult(backend.id, True, latency, reply.response_model or backend.model, url)


def _not_found_hint(backend: Backend, exc: ProviderError) -> str:
    """For a 404 from an OpenAI-compatible base_url without ``/v1``: the one to try."""
    base = backend.base_url.rstrip("/")
    if exc.status_code != 404 or backend.provider != "openai" or base.endswith("/v1"):
        return ""
    return f' — OpenAI-compatible servers serve under /v1: try base_url = "{redacted_url(base)}/v1"'


async def probe(
    profile: Profile, environ: Mapping[str, str], *, timeout: float = PROBE_TIMEOUT
) -> list[ProbeResult]:
    """One tiny request to every backend at once; never raises for a failing backend."""
    return list(await asyncio.gather(*(_probe_one(b, environ, timeout) for b in profile.backends)))


def check_jobs(path: Path, backends: Sequence[Backend] = ()) -> JobsReport:
    """Read a jobs file as ``run`` would; UsageError if it cannot be opened. With the profile's
    ``backends``, a job none of them can take (its endpoint unserved, its params unexpressible)
    is invalid too, as at run, and a job only some of those serving its endpoint can say is
    counted."""
    report = JobsReport(str(path))
    rules = RouteRules(backends) if backends else None
    with open_jobs_file(path) as stream:
        for job in iter_jobs(stream, str(path)):
            if isinstance(job, InvalidJob):
                report.invalid.append(job.message)
                continue
            if rules is not None:
                excluded, refusal = rules.check(job)
                if refusal is not None:
                    report.invalid.append(f"line {job.line}: {refusal}")
                    continue
                report.narrowed += bool(excluded - rules.serving.check(job.endpoint)[0])
            report.kinds[job.kind] += 1
            report.endpoints[job.endpoint] += 1
    return report


def _cache_prices(price: Price) -> str:
    """The cache read and write prices a price has, as ``price_lines`` says them."""
    read, write = price.cached_input, price.cache_write
    said = ([] if read is None else [f"${read:g} cache reads"]) + (
        [] if write is None else [f"${write:g} cache writes"]
    )
    return "".join(f", {part}" for part in said)


def price_lines(prices: Mapping[str, KnownPrice | None]) -> list[str]:
    """``validate``: the prices looked up in genai-prices, and the backends with none."""
    lines = [
        f"price: {bid}: ${known.price.input:g} / ${known.price.output:g} per million input / "
        f"output tokens{_cache_prices(known.price)} ({known.source})"
        for bid, known in prices.items()
        if known is not None and known.source != "profile"
    ]
    unpriced = [bid for bid, known in prices.items() if known is None]
    if unpriced:
        lines.append(
            f"price: no price for {', '.join(unpriced)} — add price = {{ input = ..., output = "
            "... } (USD per million tokens): stats counts their calls unpriced and --max-cost "
            "refuses to run"
        )
    return lines


def _set(price: Price) -> dict[str, Any]:
    """A price's fields that are set (its cache prices only when it has them)."""
    return {k: v for k, v in asdict(price).items() if v is not None}
