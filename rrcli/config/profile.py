"""The profile: a pool of backends and how to route across it.

Frozen, slotted dataclasses that the rest of rrcli reads, and their normalized dict form. The
provider facts a backend defaults to (base_url, model, whether it takes a key) come from the
provider registry. Reading and checking a profile file lives in ``load.py`` and the schema
modules; nothing here does I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rrcli.config.redaction import (
    MASK,
    looks_like_key,
    redacted_command,
    redacted_headers,
    redacted_url,
)
from rrcli.errors import UsageError
from rrcli.registry import REGISTRY, info

__all__ = [
    "BINDINGS",
    "BUDGET_PERIODS",
    "CACHE_MODES",
    "DEFAULT_PREFIX_CACHE_TOKENS",
    "DEFAULT_PROVIDER",
    "GATE_KINDS",
    "MAX_CONTINUATIONS",
    "MAX_IN_FLIGHT",
    "MAX_LOOKAHEAD",
    "MAX_RECOVER_AFTER",
    "MAX_RESPONSE_BYTES",
    "MAX_SERVER_PAUSE",
    "SERVE_RECOVER_AFTER",
    "STRATEGIES",
    "Backend",
    "BudgetSettings",
    "CacheSettings",
    "CooldownSettings",
    "Credentials",
    "GateSettings",
    "HealthSettings",
    "Price",
    "Profile",
    "QueueSettings",
    "RetrySettings",
    "ServeSettings",
    "SimSettings",
    "profile_to_dict",
]

MAX_IN_FLIGHT = 10_000  # the most a max_concurrency or concurrency may be: more is a typo
MAX_RESPONSE_BYTES = 64 * 2**20  # a response body's default size limit, decompressed
MAX_SERVER_PAUSE = 3600.0  # seconds: the longest delay ever taken from a server's headers
MAX_LOOKAHEAD = 100_000  # the most jobs a lookahead window may hold: more is a typo
MAX_CONTINUATIONS = 1000  # the most continuations a profile may allow one call: more is a typo
#: seconds between probes of a backend down: the wait after a failed probe doubles up to this
MAX_RECOVER_AFTER = 600.0
#: seconds before the first probe of a backend down, for a pool that lives long (serve, Pool)
#: when its profile does not say; ``rrcli run`` keeps a backend down for the run instead
SERVE_RECOVER_AFTER = 30.0

#: tokens a backend's prefix cache is taken to hold when its profile does not say: the KV cache
#: of one vLLM or SGLang replica of a small model on one GPU
DEFAULT_PREFIX_CACHE_TOKENS = 262_144
STRATEGIES = (
    "round_robin",
    "random",
    "weighted",
    "least_loaded",
    "first_available",
    "fastest",
    "cache_aware",
)
BINDINGS = ("request", "session")
GATE_KINDS = ("local", "redis")
#: --cache-mode: look answers up and store new ones, only look up, only store, no cache at all
CACHE_MODES = ("readwrite", "read", "write", "off")
BUDGET_PERIODS = ("day", "month")  # after which a budget's spend starts again (UTC)
DEFAULT_PROVIDER = "openai"
DEFAULT_RETRY_ON_STATUS = (408, 409, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529)


@dataclass(frozen=True, slots=True)
class Credentials:
    """A backend's own credentials; never shared or merged with another backend's.

    ``auth`` is "key" (send a key) or "none" (a local server that needs none, or a bedrock
    backend: its AWS credentials sign requests, ``profile`` naming the AWS profile, None for
    the default chain). An Azure backend may send a bearer token instead of its key: from the
    variable ``token_env``, or printed by ``token_command`` (run again when the token expires:
    Entra ID), and so may a vertex backend (a Google OAuth token); else a vertex backend's
    token comes from Application Default Credentials, or the credentials JSON at ``file``.
    """

    api_key_env: str | None = None
    api_key: str | None = field(default=None, repr=False)
    auth: str = "key"
    profile: str | None = None
    token_env: str | None = None
    token_command: str | None = None
    file: str | None = None

    def resolve(self, environ: Mapping[str, str]) -> str | None:
        """The key to send, or None for ``auth = "none"``; raises UsageError if it is unset.
        Whitespace around it (a CR or LF left by a .env file) is dropped: validation
        warns of it, naming the variable."""
        if self.auth == "none" or self.token_command is not None:
            return None  # a command's token is fetched by the provider, when it needs one
        if self.api_key is not None:
            return self.api_key.strip()
        for name, variable in (("api_key_env", self.api_key_env), ("token_env", self.token_env)):
            if variable is None:
                continue
            value = environ.get(variable, "").strip()
            if value:
                return value
            shown = f"named in {name}" if looks_like_key(variable) else variable
            raise UsageError(
                f"environment variable {shown} is not set — export it, "
                f"or name another variable in credentials.{name}"
            )
        return None

    def padded(self, environ: Mapping[str, str]) -> bool:
        """Whether the key has whitespace around it (``resolve`` drops it)."""
        if self.auth == "none":
            return False
        variable = self.api_key_env or self.token_env or ""
        value = self.api_key if self.api_key is not None else environ.get(variable)
        return bool(value) and value != value.strip()

    def redacted(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.auth == "none":
            out["auth"] = "none"
        if self.api_key_env is not None:
            out["api_key_env"] = MASK if looks_like_key(self.api_key_env) else self.api_key_env
        if self.api_key is not None:
            out["api_key"] = "***"
        if self.profile is not None:
            out["profile"] = self.profile
        if self.token_env is not None:
            out["token_env"] = MASK if looks_like_key(self.token_env) else self.token_env
        if self.token_command is not None:
            out["token_command"] = redacted_command(self.token_command)
        if self.file is not None:
            out["file"] = self.file
        return out


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens: ``cached_input`` for input read from the provider's prompt
    cache, ``cache_write`` for input written to it (None: the input price)."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None
    cache_write: float | None = None


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
    prefix_cache_tokens: int = 0  # the prefix cache's capacity (0: none)
    prefill_ms_per_token: float = 0.0  # time to read each input token the cache does not hold


@dataclass(frozen=True, slots=True)
class Backend:
    """One deployment: an endpoint, a model, its own credentials and its own caps."""

    id: str
    provider: str = DEFAULT_PROVIDER
    base_url: str = REGISTRY[DEFAULT_PROVIDER].default_base_url
    model: str = REGISTRY[DEFAULT_PROVIDER].default_model
    credentials: Credentials = field(default_factory=Credentials)
    max_concurrency: int = 8
    rpm: int | None = None
    tpm: int | None = None
    weight: float = 1.0
    timeout: float = 60.0  # seconds per attempt (a stream's: until its first text)
    stream_idle_timeout: float | None = None  # a stream's longest gap after text; None: timeout
    max_response_bytes: int = MAX_RESPONSE_BYTES  # a response body's size, decompressed
    headers: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    allow_private: bool = False
    gate_scope: str = ""  # "" means the backend's id
    reasoning_feedback: bool = False
    price: Price | None = None
    sim: SimSettings | None = None
    endpoints: tuple[str, ...] = ("chat",)  # the API endpoints this deployment serves
    prefix_cache_tokens: int | None = None  # what its prefix cache holds; None: prefix_capacity
    prompt_cache_key: bool | None = None  # cache_aware sets one; None: sets_cache_key decides
    max_tokens_per_image: int | None = None  # what a budget reserves an image at; None: known
    region: str | None = None  # bedrock: the AWS region its requests are signed for; vertex's
    project: str | None = None  # vertex: the Google Cloud project its calls are billed to
    deployment: str | None = None  # azure: the deployment in the path; None: the v1 API
    api_version: str | None = None  # azure: the api-version of a deployment's calls
    drop_params: tuple[str, ...] = ()  # request fields the server does not take: never sent

    @property
    def prefix_capacity(self) -> int:
        """Tokens its prefix (KV or prompt) cache is taken to hold: ``prefix_cache_tokens``, else
        a simulated backend's own cache, else DEFAULT_PREFIX_CACHE_TOKENS."""
        if self.prefix_cache_tokens is not None:
            return self.prefix_cache_tokens
        if self.sim is not None and self.sim.prefix_cache_tokens:
            return self.sim.prefix_cache_tokens
        return DEFAULT_PREFIX_CACHE_TOKENS

    @property
    def sets_cache_key(self) -> bool:
        """Whether cache_aware gives its calls a ``prompt_cache_key`` when the job has none:
        ``prompt_cache_key``, else for an openai backend at a public host (a hosted API, where
        the key is what routes a prompt to the machine that holds its cache)."""
        if self.prompt_cache_key is not None:
            return self.prompt_cache_key
        return self.provider == "openai" and not self.allow_private

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
    max_server_pause: float = 60.0  # the longest a server's Retry-After or reset holds a backend
    max_continuations: int = 10  # a paused turn (pause_turn) continued this often at most


@dataclass(frozen=True, slots=True)
class GateSettings:
    kind: str = "local"
    url: str = "redis://127.0.0.1:6379/0"
    lease: float = 60.0  # seconds
    adaptive: bool = False


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """The shared work queue (``--queue``): ``url`` of its Redis ("": the gate's when
    the gate is Redis); ``lease``: seconds a job may sit pending without its worker renewing it
    before another worker claims it; ``max_deliveries``: deliveries of one job before it ends as
    an error."""

    url: str = ""
    lease: float = 60.0
    max_deliveries: int = 3


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """``rrcli serve``: where it listens, the variable of its client keys ("": a key made at
    start), the seconds a session may stay idle before it is forgotten, the largest request
    body in bytes, the seconds SIGTERM lets requests in flight finish, whether ``/metrics``
    answers without a client key (a scraper on a private network); and its connections'
    bounds (serve/protocol.py): the seconds a request's head may take, the seconds a kept-alive
    connection may stay idle, the most connections open (at most three quarters of the
    open-files limit) and the most from one client address (0: half of them)."""

    host: str = "127.0.0.1"
    port: int = 8787
    keys_env: str = ""
    session_idle: float = 3600.0
    max_body_bytes: int = 32 << 20
    drain_timeout: float = 30.0
    open_metrics: bool = False
    head_timeout: float = 10.0
    idle_timeout: float = 30.0
    max_connections: int = 4096
    max_connections_per_address: int = 0


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
class HealthSettings:
    """When a backend down (a key refused, an account out of quota, a model or path not found,
    connections refused past its retries) is probed again: ``recover_after`` seconds after it
    went down, the wait doubling after each failed probe up to MAX_RECOVER_AFTER; a probe that
    succeeds brings it back. 0 keeps it down for good; None: the front-end's default (serve
    and ``rrcli.Pool``: SERVE_RECOVER_AFTER; ``rrcli run``: down for the run)."""

    recover_after: float | None = None


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """The response cache (``[cache]``): its SQLite file ("" for none; a relative path is from
    the working folder, as ``--cache``'s) and what a run does with it (CACHE_MODES)."""

    path: str = ""
    mode: str = "readwrite"


@dataclass(frozen=True, slots=True)
class BudgetSettings:
    """The most a run may spend, in USD (None: no budget); ``rrcli run --max-cost`` overrides.
    ``key``: the name the budget is kept under, in the ledger file and in Redis ("": the
    profile's name); ``period``: "day" or "month" (UTC), after which serve and Pool spend
    again from nothing ("": never)."""

    max_cost_usd: float | None = None
    key: str = ""
    period: str = ""


@dataclass(frozen=True, slots=True)
class Profile:
    name: str = ""
    strategy: str = "round_robin"
    rotate_every: int = 1
    cache_threshold: float = 0.3  # cache_aware: the share of a prompt a match must cover
    balance_abs: int | None = None  # cache_aware: None is a quarter of the smallest cap
    balance_rel: float = 1.5
    lookahead: int = 1000  # cache_aware: jobs to come a free backend may choose from
    binding: str = "request"
    same_model: bool = False
    concurrency: int | None = None  # None: the sum of the caps
    seed: int | None = None
    retry: RetrySettings = field(default_factory=RetrySettings)
    gate: GateSettings = field(default_factory=GateSettings)
    cooldown: CooldownSettings = field(default_factory=CooldownSettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    cache: CacheSettings = field(default_factory=CacheSettings)
    budget: BudgetSettings = field(default_factory=BudgetSettings)
    queue: QueueSettings = field(default_factory=QueueSettings)
    serve: ServeSettings = field(default_factory=ServeSettings)
    backends: tuple[Backend, ...] = ()
    source: str = ""

    @property
    def label(self) -> str:
        """What logs call the profile: its name, else its file's name."""
        return self.name or Path(self.source).name or "(unnamed)"

    @property
    def queue_url(self) -> str:
        """The queue's Redis: ``[queue] url``, else ``[gate] url`` when the gate is Redis, else
        "" (none)."""
        if self.queue.url:
            return self.queue.url
        return self.gate.url if self.gate.kind == "redis" else ""

    @property
    def effective_concurrency(self) -> int:
        return self.concurrency or sum(b.max_concurrency for b in self.backends) or 1


def profile_to_dict(profile: Profile, *, redact: bool = True) -> dict[str, Any]:
    """The normalized profile: every backend with its defaults filled in, no None values.

    It is what ``rrcli validate --json`` prints, and it is valid TOML input again
    (``tomli_w.dumps``): a profile written from it means the same. ``redact`` replaces a
    literal api_key, a password in the gate's URL, a credential header's value and a token in a
    base_url's query by ``"***"``.
    """
    out: dict[str, Any] = {
        "name": profile.name,
        "strategy": profile.strategy,
        "rotate_every": profile.rotate_every,
        "cache_threshold": profile.cache_threshold,
        "balance_rel": profile.balance_rel,
        "lookahead": profile.lookahead,
        "binding": profile.binding,
        "same_model": profile.same_model,
    }
    if profile.concurrency is not None:
        out["concurrency"] = profile.concurrency
    if profile.seed is not None:
        out["seed"] = profile.seed
    if profile.balance_abs is not None:
        out["balance_abs"] = profile.balance_abs
    retry = _plain(profile.retry)
    retry["retry_on_status"] = sorted(profile.retry.retry_on_status)
    out["retry"] = retry
    out["gate"] = _plain(profile.gate)
    if redact and "url" in out["gate"]:
        out["gate"]["url"] = redacted_url(out["gate"]["url"])
    out["cooldown"] = _plain(profile.cooldown)
    if profile.health.recover_after is not None:
        out["health"] = _plain(profile.health)
    if profile.cache != CacheSettings():
        out["cache"] = {k: v for k, v in _plain(profile.cache).items() if v}
    out["queue"] = _plain(profile.queue)
    if profile.serve != ServeSettings():
        out["serve"] = {k: v for k, v in _plain(profile.serve).items() if v != ""}
    if profile.budget != BudgetSettings():
        out["budget"] = {k: v for k, v in _plain(profile.budget).items() if v != ""}
    out["backends"] = [_backend_to_dict(b, redact) for b in profile.backends]
    return out


def _backend_to_dict(backend: Backend, redact: bool) -> dict[str, Any]:
    out = _plain(backend)
    for key in ("credentials", "price", "sim", "headers", "params", "endpoints", "drop_params"):
        out.pop(key, None)
    if not backend.gate_scope:
        out.pop("gate_scope")
    if info(backend.provider).auth_header is not None:
        creds = backend.credentials.redacted()
        if not redact and backend.credentials.api_key is not None:
            creds["api_key"] = backend.credentials.api_key
        if not redact and backend.credentials.token_command is not None:
            creds["token_command"] = backend.credentials.token_command
        out["credentials"] = creds
    elif any(
        getattr(backend.credentials, k) for k in ("profile", "file", "token_env", "token_command")
    ):
        creds = backend.credentials.redacted()  # an AWS profile, a vertex backend's tokens
        if not redact and backend.credentials.token_command is not None:
            creds["token_command"] = backend.credentials.token_command
        out["credentials"] = creds
    out["endpoints"] = list(backend.endpoints)
    if backend.drop_params:
        out["drop_params"] = list(backend.drop_params)
    out["headers"] = redacted_headers(dict(backend.headers)) if redact else dict(backend.headers)
    if redact:
        out["base_url"] = redacted_url(backend.base_url)
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
