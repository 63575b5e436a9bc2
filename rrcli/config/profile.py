"""The profile: a pool of backends and how to route across it (SPEC §2).

Frozen, slotted dataclasses that the rest of rrcli reads, and the one function that turns a TOML
file into them, collecting every diagnostic (not only the first) with its key path and its fix.
No I/O beyond reading the file and resolving hostnames; no await.

The rules themselves live in ``_validate.py`` (the schema and the cross-field checks),
``_netcheck.py`` (the base_url address policy) and ``_toml_lines.py`` (key path → line number);
this module keeps the model, reading the file, and the normalized dict form.
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
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
    "Resolver",
    "RetrySettings",
    "SimSettings",
    "ValidationReport",
    "demo_profile_path",
    "load_profile",
    "profile_to_dict",
    "read_profile_text",
    "resolve_profile_path",
    "validate_profile",
]

#: ``resolve(host) -> addresses``; raises OSError when the host does not resolve.
Resolver = Callable[[str], Sequence[str]]

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
DEFAULT_MODELS = {"openai": DEFAULT_MODEL, "anthropic": "claude-3-5-haiku-latest", "sim": "sim"}
MAX_PROFILE_BYTES = 1024 * 1024
DEFAULT_RETRY_ON_STATUS = (408, 409, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in a profile. ``path`` is the key path (``backends[2].credentials``).

    ``code`` is a stable machine name (``unknown_key``, ``wrong_type``, ``env_unset``,
    ``host_unresolved``...); ``backend_id`` names the backend a ``backends[N]`` path points at.
    """

    severity: str  # "error" | "warning"
    path: str
    message: str
    fix: str = ""
    source: str = ""
    line: int | None = None
    column: int | None = None
    code: str = ""
    backend_id: str | None = None

    @property
    def where(self) -> str:
        """``profile.toml:12`` (or ``profile.toml:12:5``), as far as it is known."""
        where = self.source
        if self.line is not None:
            where += f":{self.line}" + (f":{self.column}" if self.column is not None else "")
        return where

    @property
    def subject(self) -> str:
        """The key path as a user reads it: ``backends[2] (id "b"): credentials``."""
        head, sep, rest = self.path.partition("]")
        if self.backend_id is None or not head.startswith("backends[") or not sep:
            return self.path
        label = f'{head}] (id "{self.backend_id}")'
        rest = rest.removeprefix(".")
        return f"{label}: {rest}" if rest else label

    def __str__(self) -> str:
        subject = self.subject
        text = (
            f"{self.where}: {subject}: {self.message}"
            if subject
            else (f"{self.where}: {self.message}")
        )
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
            "code": self.code,
            "backend_id": self.backend_id,
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
    readable: bool = True  # False: not a TOML profile at all (missing, binary, syntax): exit 2

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "warning")

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def exit_code(self) -> int:
        """SPEC §1: 0 ok, 1 the profile has errors, 2 it is not a readable profile at all."""
        return 2 if not self.readable else 0 if self.ok else 1

    def as_dict(self) -> dict[str, Any]:
        """The ``rrcli validate --json`` document (SPEC §2); keys redacted."""
        return {
            "ok": self.ok,
            "errors": [d.as_dict() for d in self.errors],
            "warnings": [d.as_dict() for d in self.warnings],
            "profile": profile_to_dict(self.profile) if self.profile is not None else None,
        }

    def plain_lines(self) -> list[str]:
        """One line a diagnostic (``file:line: error: path: message — fix``), then a summary."""
        lines = []
        for d in self.diagnostics:
            subject = f"{d.subject}: " if d.subject else ""
            fix = f" — {d.fix}" if d.fix else ""
            lines.append(f"{d.where}: {d.severity}: {subject}{d.message}{fix}")
        return [*lines, self.summary()]

    def summary(self) -> str:
        def count(n: int, word: str) -> str:
            return f"{n} {word}" + ("" if n == 1 else "s")

        verdict = "ok" if self.ok else "not usable"
        tally = f"{count(len(self.errors), 'error')}, {count(len(self.warnings), 'warning')}"
        pool = ""
        if self.profile is not None:
            n = len(self.profile.backends)
            pool = f"; {count(n, 'backend')}, strategy {self.profile.strategy}"
        return f"{self.source}: {verdict} ({tally}){pool}"


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
    path: Path | str,
    *,
    environ: Mapping[str, str] | None = None,
    strict: bool = False,
    for_run: bool = False,
    resolve: Resolver | None = None,
) -> ValidationReport:
    """Read and check a profile, collecting every diagnostic. Never raises for bad content.

    ``strict`` turns warnings into errors. ``for_run``: an ``api_key_env`` naming an unset
    variable is an error (``rrcli run``), not a warning (``rrcli validate``). ``resolve(host)``
    returns the host's addresses (default: the system resolver, within a 2 s budget).
    """
    from rrcli.config.schema import check_document

    source = str(path)
    environ = os.environ if environ is None else environ
    text, problem = read_profile_text(Path(path))
    if problem is not None:
        return ValidationReport(source, (replace(problem, source=source),), None, readable=False)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return ValidationReport(source, (_syntax_diagnostic(exc, source),), None, readable=False)
    if not data:
        diag = Diagnostic(
            "error",
            "",
            "the profile is empty",
            "add at least one [[backends]] table (rrcli init writes a starter profile)",
            source,
            code="empty",
        )
        return ValidationReport(source, (diag,), None, readable=False)
    profile, diagnostics = check_document(
        data, text, source, environ=environ, for_run=for_run, resolve=resolve
    )
    diagnostics.sort(key=lambda d: (d.line is None, d.line or 0))
    if strict:
        diagnostics = [replace(d, severity="error") for d in diagnostics]
    if any(d.severity == "error" for d in diagnostics):
        profile = None
    return ValidationReport(source, tuple(diagnostics), profile)


def load_profile(
    path: Path | str,
    *,
    environ: Mapping[str, str] | None = None,
    for_run: bool = True,
    resolve: Resolver | None = None,
) -> Profile:
    """The profile at ``path``, or ProfileError naming every error in it."""
    report = validate_profile(path, environ=environ, for_run=for_run, resolve=resolve)
    if not report.ok or report.profile is None:
        lines = "\n".join(f"  {d}" for d in report.errors)
        raise ProfileError(f"{path}: the profile has errors:\n{lines}", report.diagnostics)
    return report.profile


def read_profile_text(path: Path) -> tuple[str, Diagnostic | None]:
    """The file's text, or ONE diagnostic saying why it cannot be a profile (never raises)."""

    def unusable(message: str, fix: str, code: str) -> tuple[str, Diagnostic]:
        return "", Diagnostic("error", "", message, fix, str(path), code=code)

    try:
        if path.is_dir():
            return unusable("is a directory", "name the profile file inside it", "not_a_file")
        size = path.stat().st_size
        if size > MAX_PROFILE_BYTES:
            return unusable(
                f"is {size / MAX_PROFILE_BYTES:.1f} MiB; a profile is at most 1 MiB",
                "check that this is the profile and not a jobs or results file",
                "too_large",
            )
        raw = path.read_bytes()
    except FileNotFoundError:
        return unusable(
            "no such file", "check the path, or write a starter profile with rrcli init", "missing"
        )
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return unusable(f"cannot be read ({reason})", "check its permissions", "unreadable")
    try:
        return raw.decode("utf-8").removeprefix("\ufeff"), None
    except UnicodeDecodeError as exc:
        return unusable(
            f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            "save the profile as UTF-8 TOML",
            "not_utf8",
        )


def _syntax_diagnostic(exc: tomllib.TOMLDecodeError, source: str) -> Diagnostic:
    text = str(exc)
    match = re.search(r"\(at line (\d+), column (\d+)\)", text)
    message = re.sub(r"\s*\(at line \d+, column \d+\)", "", text) or "invalid TOML"
    line, column = (int(match[1]), int(match[2])) if match else (None, None)
    if "end of document" in text and line is None:
        message = text
    return Diagnostic(
        "error",
        "",
        f"not valid TOML: {message}",
        "fix the TOML syntax at that place (strings need quotes, tables need [brackets])",
        source,
        line,
        column,
        code="toml_syntax",
    )


def profile_to_dict(profile: Profile, *, redact: bool = True) -> dict[str, Any]:
    """The normalized profile: every backend with its defaults filled in, no None values.

    It is what ``rrcli validate --json`` prints, and it is valid TOML input again
    (``tomli_w.dumps``): a profile written from it means the same. ``redact`` replaces a
    literal api_key by ``"***"``.
    """
    out: dict[str, Any] = {
        "name": profile.name,
        "strategy": profile.strategy,
        "rotate_every": profile.rotate_every,
        "binding": profile.binding,
        "same_model": profile.same_model,
    }
    if profile.concurrency is not None:
        out["concurrency"] = profile.concurrency
    if profile.seed is not None:
        out["seed"] = profile.seed
    retry = _plain(profile.retry)
    retry["retry_on_status"] = sorted(profile.retry.retry_on_status)
    out["retry"] = retry
    out["gate"] = _plain(profile.gate)
    out["cooldown"] = _plain(profile.cooldown)
    out["backends"] = [_backend_to_dict(b, redact) for b in profile.backends]
    return out


def _backend_to_dict(backend: Backend, redact: bool) -> dict[str, Any]:
    out = _plain(backend)
    for key in ("credentials", "price", "sim", "headers", "params"):
        out.pop(key, None)
    if not backend.gate_scope:
        out.pop("gate_scope")
    if backend.provider != "sim":
        creds = backend.credentials.redacted()
        if not redact and backend.credentials.api_key is not None:
            creds["api_key"] = backend.credentials.api_key
        out["credentials"] = creds
    out["headers"] = dict(backend.headers)
    out["params"] = copy.deepcopy(dict(backend.params))
    if backend.price is not None:
        out["price"] = _plain(backend.price)
    if backend.sim is not None:
        out["sim"] = _plain(backend.sim)
    return out


def _plain(record: Any) -> dict[str, Any]:
    """A flat dataclass's fields, without None values (TOML has no null)."""
    values = {f.name: getattr(record, f.name) for f in fields(record)}
    return {k: v for k, v in values.items() if v is not None}
