"""The profile: a pool of backends and how to route across it (SPEC §2).

Frozen, slotted dataclasses that the rest of rrcli reads, and the one function that turns a TOML
file into them, collecting every diagnostic (not only the first) with its key path and its fix.
No I/O beyond reading the file and resolving hostnames; no await.

SKELETON: the parser below builds the model from a well-formed file; the full validator of
issue 2 replaces ``_parse`` and ``validate_profile`` without changing these types.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rrcli.errors import ProfileError, UsageError

__all__ = [
    "BINDINGS",
    "GATE_KINDS",
    "PROVIDERS",
    "STRATEGIES",
    "Backend",
    "CooldownSettings",
    "Credentials",
    "Diagnostic",
    "GateSettings",
    "Price",
    "Profile",
    "RetrySettings",
    "SimSettings",
    "ValidationReport",
    "demo_profile_path",
    "load_profile",
    "resolve_profile_path",
    "validate_profile",
]

STRATEGIES = (
    "round_robin",
    "random",
    "weighted",
    "least_loaded",
    "first_available",
    "fastest",
)
PROVIDERS = ("openai", "anthropic", "sim")
BINDINGS = ("request", "session")
GATE_KINDS = ("local", "redis")

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "sim": "sim://local",
}
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_RETRY_ON_STATUS = (408, 409, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in a profile. ``path`` is the key path (``backends[2].credentials``)."""

    severity: str  # "error" | "warning"
    path: str
    message: str
    fix: str = ""
    source: str = ""
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = self.source
        if self.line is not None:
            where += f":{self.line}" + (f":{self.column}" if self.column is not None else "")
        text = f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"
        return f"{text} — {self.fix}" if self.fix else text

    def as_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "path": self.path,
            "message": self.message,
            "fix": self.fix,
            "source": self.source,
            "line": self.line,
            "column": self.column,
        }


@dataclass(frozen=True, slots=True)
class Credentials:
    """A backend's own credentials; never shared or merged with another backend's.

    ``auth`` is "key" (send a key) or "none" (a local server that needs none).
    """

    api_key_env: str | None = None
    api_key: str | None = field(default=None, repr=False)
    auth: str = "key"

    def resolve(self, environ: Mapping[str, str]) -> str | None:
        """The key to send, or None for ``auth = "none"``; raises UsageError if it is unset."""
        if self.auth == "none":
            return None
        if self.api_key is not None:
            return self.api_key
        if self.api_key_env is not None:
            value = environ.get(self.api_key_env)
            if value:
                return value
            raise UsageError(
                f"environment variable {self.api_key_env} is not set — export it, "
                "or name another variable in credentials.api_key_env"
            )
        return None

    def redacted(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.auth == "none":
            out["auth"] = "none"
        if self.api_key_env is not None:
            out["api_key_env"] = self.api_key_env
        if self.api_key is not None:
            out["api_key"] = "***"
        return out


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float = 0.0
    output: float = 0.0


@dataclass(frozen=True, slots=True)
class SimSettings:
    """Behaviour of a simulated backend (the in-process ``sim`` provider). Times in ms."""

    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    error_rate: float = 0.0
    rate_limit_rate: float = 0.0
    retry_after_ms: float = 100.0
    output_tokens: int = 32
    ttft_ms: float | None = None
    tokens_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class Backend:
    """One deployment: an endpoint, a model, its own credentials and its own caps."""

    id: str
    provider: str = "openai"
    base_url: str = DEFAULT_BASE_URLS["openai"]
    model: str = DEFAULT_MODEL
    credentials: Credentials = field(default_factory=Credentials)
    max_concurrency: int = 8
    rpm: int | None = None
    tpm: int | None = None
    weight: float = 1.0
    timeout: float = 60.0  # seconds per attempt
    headers: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    allow_private: bool = False
    gate_scope: str = ""  # "" means the backend's id
    reasoning_feedback: bool = False
    price: Price | None = None
    sim: SimSettings | None = None

    @property
    def scope(self) -> str:
        """The gate scope: backends with one scope share one cap."""
        return self.gate_scope or self.id


@dataclass(frozen=True, slots=True)
class RetrySettings:
    """All times are seconds."""

    max_retries: int = 3
    max_retry_time: float = 120.0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    retry_on_status: frozenset[int] = frozenset(DEFAULT_RETRY_ON_STATUS)
    respect_retry_after: bool = True
    failover: bool = False


@dataclass(frozen=True, slots=True)
class GateSettings:
    kind: str = "local"
    url: str = "redis://127.0.0.1:6379/0"
    lease: float = 60.0  # seconds
    adaptive: bool = False


@dataclass(frozen=True, slots=True)
class CooldownSettings:
    """When a backend is taken out of the load-aware strategies for a while.

    A 429 with a Retry-After cools the backend until then; ``consecutive_failures`` failed calls in
    a row (0 disables) cool it for ``duration`` seconds. ``round_robin`` makes round robin (and
    weighted/random) skip cooling backends too; off by default so round robin stays strict.
    """

    consecutive_failures: int = 3
    duration: float = 5.0
    round_robin: bool = False


@dataclass(frozen=True, slots=True)
class Profile:
    name: str = ""
    strategy: str = "round_robin"
    rotate_every: int = 1
    binding: str = "request"
    same_model: bool = False
    concurrency: int | None = None  # None: the sum of the caps
    seed: int | None = None
    retry: RetrySettings = field(default_factory=RetrySettings)
    gate: GateSettings = field(default_factory=GateSettings)
    cooldown: CooldownSettings = field(default_factory=CooldownSettings)
    backends: tuple[Backend, ...] = ()
    source: str = ""

    @property
    def effective_concurrency(self) -> int:
        return self.concurrency or sum(b.max_concurrency for b in self.backends) or 1


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """What ``rrcli validate`` prints: every diagnostic, and the profile when it could be built."""

    source: str
    diagnostics: tuple[Diagnostic, ...]
    profile: Profile | None

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "warning")

    @property
    def ok(self) -> bool:
        return not self.errors


def demo_profile_path() -> Path:
    """The built-in demo pool shipped inside the package."""
    return Path(__file__).parent / "data" / "demo.toml"


def resolve_profile_path(
    option: str | None, environ: Mapping[str, str], cwd: Path | None = None
) -> Path:
    """SPEC §1: --profile, else $RRCLI_PROFILE, else ./rrcli.toml, else the XDG profile.

    The name ``demo``, where no such file exists, is the built-in demo pool.
    """
    cwd = cwd or Path.cwd()
    candidate = option or environ.get("RRCLI_PROFILE")
    if candidate:
        path = Path(candidate).expanduser()
        if not path.is_absolute():
            path = cwd / path
        if candidate == "demo" and not path.exists():
            return demo_profile_path()
        return path
    local = cwd / "rrcli.toml"
    if local.exists():
        return local
    xdg = Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "rrcli" / "profile.toml"
    if xdg.exists():
        return xdg
    raise UsageError(
        "no profile found — pass --profile PATH (or -p demo for the built-in simulated pool), "
        f"set RRCLI_PROFILE, create ./rrcli.toml (rrcli init), or create {xdg}"
    )


def validate_profile(
    path: Path | str, *, environ: Mapping[str, str] | None = None, strict: bool = False
) -> ValidationReport:
    """Read and check a profile, collecting every diagnostic. Never raises for bad content."""
    source = str(path)
    environ = os.environ if environ is None else environ
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        diag = Diagnostic("error", "", f"cannot read profile: {exc}", source=source)
        return ValidationReport(source, (diag,), None)
    profile, diagnostics = _parse(data, source, environ)
    if strict:
        diagnostics = [
            Diagnostic("error", d.path, d.message, d.fix, d.source, d.line, d.column)
            for d in diagnostics
        ]
    return ValidationReport(source, tuple(diagnostics), profile)


def load_profile(
    path: Path | str, *, environ: Mapping[str, str] | None = None, for_run: bool = True
) -> Profile:
    """The profile at ``path``, or ProfileError naming every error in it."""
    report = validate_profile(path, environ=environ)
    if not report.ok or report.profile is None:
        raise ProfileError(f"{path}: the profile has errors", report.diagnostics)
    return report.profile


def _parse(
    data: dict[str, Any], source: str, environ: Mapping[str, str]
) -> tuple[Profile | None, list[Diagnostic]]:
    """SKELETON parser: trusts the file's shape. Issue 2 replaces it with the full validator."""
    diagnostics: list[Diagnostic] = []
    defaults = dict(data.get("defaults", {}))
    backends = []
    for raw in data.get("backends", []):
        merged = {**defaults, **raw}
        provider = merged.get("provider", "openai")
        creds = merged.get("credentials", {})
        if merged.get("auth") == "none" or creds.get("auth") == "none" or provider == "sim":
            credentials = Credentials(auth="none")
        else:
            credentials = Credentials(creds.get("api_key_env"), creds.get("api_key"))
        price = merged.get("price")
        sim = merged.get("sim")
        backends.append(
            Backend(
                id=str(merged["id"]),
                provider=provider,
                base_url=merged.get("base_url", DEFAULT_BASE_URLS[provider]),
                model=merged.get("model", DEFAULT_MODEL),
                credentials=credentials,
                max_concurrency=int(merged.get("max_concurrency", 8)),
                rpm=merged.get("rpm"),
                tpm=merged.get("tpm"),
                weight=float(merged.get("weight", 1)),
                timeout=float(merged.get("timeout", 60.0)),
                headers=dict(merged.get("headers", {})),
                params=dict(merged.get("params", {})),
                allow_private=bool(merged.get("allow_private", False)),
                gate_scope=merged.get("gate_scope", ""),
                reasoning_feedback=bool(merged.get("reasoning_feedback", False)),
                price=Price(**price) if price else None,
                sim=SimSettings(**sim) if sim is not None else None,
            )
        )
    retry = dict(data.get("retry", {}))
    if "retry_on_status" in retry:
        retry["retry_on_status"] = frozenset(retry["retry_on_status"])
    profile = Profile(
        name=data.get("name", ""),
        strategy=data.get("strategy", "round_robin"),
        rotate_every=int(data.get("rotate_every", 1)),
        binding=data.get("binding", "request"),
        same_model=bool(data.get("same_model", False)),
        concurrency=data.get("concurrency"),
        seed=data.get("seed"),
        retry=RetrySettings(**retry),
        gate=GateSettings(**data.get("gate", {})),
        cooldown=CooldownSettings(**data.get("cooldown", {})),
        backends=tuple(backends),
        source=source,
    )
    if not backends:
        diagnostics.append(Diagnostic("error", "backends", "no backends", source=source))
    return profile, diagnostics
