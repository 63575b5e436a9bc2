"""Simulated LLM backends: the behaviour model shared by the in-process ``sim`` provider and the
``rrcli sim`` server (``rrcli.sim.server``), so a profile behaves alike with either.

``SimBehaviour`` decides what one simulated call does: its outcome (drawn from the error and
rate-limit rates), its timing (latency, jitter, time to first token, token rate; ``pacing``
spreads a stream's pieces over it) and its output text, deterministic for a given last user
message. ``SimConfig`` is the server's behaviour: the model's settings plus what only a server
does (a concurrency cap answering 429, cut or failing streams, keys it accepts).
"""

from __future__ import annotations

import hashlib
import math
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from rrcli.config.profile import SimSettings
from rrcli.errors import UsageError
from rrcli.tokens import (
    BLOCK_TOKENS,
    PrefixBlocks,
    prefix_blocks,
    rendered_prompt,
    rendered_with_reply,
)

__all__ = [
    "VARIANTS",
    "WORDS",
    "SimBehaviour",
    "SimConfig",
    "config_from_options",
    "key_fingerprint",
    "pacing",
    "prompt_of",
]

# the vocabulary of simulated output text
WORDS = (
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "amber",
    "basil",
    "cedar",
    "dune",
    "ember",
    "fern",
    "grove",
    "harbor",
    "island",
    "jade",
    "kelp",
    "lagoon",
    "meadow",
    "nectar",
    "orchid",
    "pebble",
    "quartz",
    "river",
    "sage",
    "tide",
    "umber",
    "valley",
    "willow",
    "yarrow",
    "zephyr",
    "acorn",
    "birch",
    "clover",
    "drift",
    "elm",
    "frost",
    "glade",
    "heath",
    "iris",
)
VARIANTS = 64  # distinct replies: a checksum of the prompt modulo this
OK, ERROR, RATE_LIMITED = 0, 1, 2


def key_fingerprint(key: str) -> str:
    """How /stats names a credential: the first 12 hex digits of the key's sha256."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last user message ("" when there is none)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return ""
    return ""


def prompt_of(body: dict[str, Any]) -> str:
    """The rendered prompt of a chat request's body (either API's: Anthropic's ``system`` too)."""
    messages = body.get("messages")
    if type(messages) is not list:
        return ""
    messages = [m for m in messages if isinstance(m, dict)]
    return rendered_prompt(messages, body.get("tools"), body.get("system"))


def pacing(count: int, ttft: float, total: float) -> Iterator[tuple[float, int, int]]:
    """How a stream of ``count`` pieces is paced: (seconds to sleep first, start, end) per group.

    The first piece comes at ``ttft``, the last at ``total`` (seconds from the start); pieces in
    between are spaced evenly, grouped so that no sleep is shorter than 5 ms.
    """
    if count <= 0:
        yield ttft, 0, 0
        return
    yield ttft, 0, 1
    rest = count - 1
    if rest <= 0:
        return
    span = max(0.0, total - ttft)
    if span <= 0:
        yield 0.0, 1, count
        return
    interval = span / rest
    step = max(1, math.ceil(0.005 / interval))
    for start in range(1, count, step):
        end = min(count, start + step)
        yield interval * (end - start), start, end


class SimBehaviour:
    """What one simulated call does. Shared by the in-process provider and ``rrcli sim``.

    Output is deterministic: ``output_tokens`` words chosen by a checksum of the last user message,
    so two runs (or a plain and a streamed call) give the same text. Times are seconds here.
    With ``prefix_cache_tokens`` it keeps a prefix cache (``cached``): the input tokens it does
    not hold take ``prefill_ms_per_token`` each before the first token.
    """

    __slots__ = (
        "_cut",
        "_limit",
        "_pieces",
        "_rng",
        "_texts",
        "instant",
        "may_fail",
        "prefix",
        "settings",
    )

    def __init__(self, settings: SimSettings, rng: random.Random) -> None:
        self.settings = settings
        self._rng = rng
        self._cut = settings.error_rate
        self._limit = settings.error_rate + settings.rate_limit_rate
        self.may_fail = self._limit > 0
        self.instant = not (
            settings.latency_ms
            or settings.jitter_ms
            or settings.ttft_ms
            or settings.tokens_per_s
            or settings.prefill_ms_per_token
        )
        #: the prefix cache (None: every input token is read afresh, and none is reported cached)
        self.prefix = (
            PrefixBlocks(settings.prefix_cache_tokens) if settings.prefix_cache_tokens else None
        )
        self._pieces: dict[int, tuple[str, ...]] = {}
        self._texts: dict[int, str] = {}

    def outcome(self) -> int:
        """OK, ERROR (a 500) or RATE_LIMITED (a 429), drawn from the configured rates."""
        if not self.may_fail:
            return OK
        draw = self._rng.random()
        if draw < self._cut:
            return ERROR
        return RATE_LIMITED if draw < self._limit else OK

    def chance(self, rate: float) -> bool:
        return rate > 0 and self._rng.random() < rate

    def variant(self, messages: list[dict[str, Any]]) -> int:
        return zlib.crc32(last_user_text(messages).encode()) % VARIANTS

    def pieces(self, variant: int) -> tuple[str, ...]:
        """The output's tokens, as stream pieces (the first without a leading space)."""
        pieces = self._pieces.get(variant)
        if pieces is None:
            count = max(0, self.settings.output_tokens)
            words = [
                WORDS[(variant * 7 + i * (variant % 5 + 1)) % len(WORDS)] for i in range(count)
            ]
            pieces = tuple(w if i == 0 else " " + w for i, w in enumerate(words))
            self._pieces[variant] = pieces
            self._texts[variant] = "".join(pieces)
        return pieces

    def text(self, variant: int) -> str:
        text = self._texts.get(variant)
        if text is None:
            self.pieces(variant)
            text = self._texts[variant]
        return text

    def forget(self) -> None:
        """Empty the prefix cache (a server's ``/stats/reset``)."""
        if self.prefix is not None:
            self.prefix = PrefixBlocks(self.settings.prefix_cache_tokens)

    def cached(self, prompt: str, input_tokens: int, reply: str | None = None) -> int:
        """Input tokens of ``prompt`` the prefix cache holds (whole blocks, never the whole
        input: the last token is always computed, as vLLM does). The blocks of the prompt and
        of its text ``reply`` after it are held from now on, as a vLLM or SGLang replica keeps
        the KV of the tokens it generated: a next turn repeating the reply finds it warm."""
        if self.prefix is None:
            return 0
        chain = prefix_blocks(prompt)
        held = self.prefix.match(chain)
        if reply is not None:
            chain = prefix_blocks(rendered_with_reply(prompt, reply))
        self.prefix.add(chain)
        return max(0, min(held * BLOCK_TOKENS, input_tokens - 1))

    def timeline(self, count: int, uncached: int = 0) -> tuple[float, float]:
        """(time to first token, total time) in seconds for a reply of ``count`` tokens to a
        prompt of which ``uncached`` input tokens must be read (prefilled) first.

        Without ``ttft_ms`` the first token comes at the latency (± jitter); with
        ``tokens_per_s`` the rest follow at that rate, otherwise by the latency. The prefill
        comes before the first token.
        """
        s = self.settings
        latency = s.latency_ms
        if s.jitter_ms:
            latency = max(0.0, latency + self._rng.uniform(-s.jitter_ms, s.jitter_ms))
        latency += uncached * s.prefill_ms_per_token
        ttft = latency if s.ttft_ms is None else s.ttft_ms + uncached * s.prefill_ms_per_token
        total = max(latency, ttft)
        if s.tokens_per_s:
            total = max(total, ttft + max(0, count - 1) * 1000.0 / s.tokens_per_s)
        return ttft / 1000.0, total / 1000.0


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The ``rrcli sim`` server's behaviour: the shared model's settings plus the server's own."""

    settings: SimSettings = field(default_factory=SimSettings)
    cap: int | None = None  # concurrent requests above this answer 429
    cut_stream_rate: float = 0.0
    stream_error_rate: float = 0.0
    pause_turn_rate: float = 0.0
    seed: int | None = None
    model: str | None = None  # reported model; None echoes the request's
    api_keys: tuple[str, ...] = ()  # when given, any other key answers 401
    batch_delay_ms: float = 0.0  # a batch's processing time, from created to ended
    batch_window_ms: float | None = None  # lines not done by then expire; None: 24 h
    batch_failure_rate: float = 0.0  # share of batch lines answered with a 500
    batch_enqueued_tokens: int | None = None  # per key; None: no limit


_SETTINGS_FIELDS = frozenset(f.name for f in fields(SimSettings))


def config_from_options(**options: Any) -> SimConfig:
    """A SimConfig from flat options (the ``rrcli sim`` flags, the tests' fixture): SimSettings'
    fields plus SimConfig's own (``cap``, ``cut_stream_rate``, ``api_keys``...). None means the
    default. Raises UsageError naming the flag for a value out of range."""
    options = {k: v for k, v in options.items() if v is not None}
    rates = ("error_rate", "rate_limit_rate", "cut_stream_rate", "stream_error_rate")
    for name in (*rates, "batch_failure_rate"):
        rate = options.get(name, 0.0)
        if not 0.0 <= rate <= 1.0:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag}: expected a share between 0 and 1, got {rate}")
    if not 0.0 <= options.get("pause_turn_rate", 0.0) <= 1.0:
        raise UsageError("--pause-turn-rate: expected a share between 0 and 1")
    if options.get("error_rate", 0.0) + options.get("rate_limit_rate", 0.0) > 1.0:
        raise UsageError("--error-rate plus --rate-limit-rate must not exceed 1")
    for name in ("prefix_cache_tokens", "prefill_ms_per_token", "batch_delay_ms"):
        if options.get(name, 0) < 0:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag}: expected 0 or more, got {options[name]}")
    for name in ("batch_window_ms", "batch_enqueued_tokens"):
        if options.get(name, 1) <= 0:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag}: expected a positive number, got {options[name]}")
    if options.get("cap", 1) < 1:
        raise UsageError(f"--cap: expected a positive number of requests, got {options['cap']}")
    settings = SimSettings(**{k: v for k, v in options.items() if k in _SETTINGS_FIELDS})
    rest = {k: v for k, v in options.items() if k not in _SETTINGS_FIELDS}
    rest["api_keys"] = tuple(rest.get("api_keys", ()))
    try:
        return SimConfig(settings=settings, **rest)
    except TypeError as exc:
        raise UsageError(f"unknown sim option: {exc}") from None
