"""The price of a backend: USD per million input and output tokens (and input read from or
written to the provider's prompt cache), or none.

A backend's own ``price`` when its profile gives one; otherwise what the genai-prices library
(the ``prices`` extra: offline price data for hundreds of models, imported only when a backend
has no price of its own) knows of its API and model; otherwise none. The library is asked by the
backend's ``base_url``: a known API host names the provider (OpenAI, Anthropic, Azure, Groq,
OpenRouter...); a server it does not know (a local vLLM, a proxy, the simulator) has no price,
whatever its model is called. A provider the registry names for genai-prices (``azure``, the
hosted presets: ``prices_id``) is asked by that name instead, wherever its base_url points (an
Azure resource behind a gateway is billed as Azure). Its cache prices (reads, and writes where
the provider bills them, as Anthropic does) come with it. A model priced in tiers takes its
first tier (the price of a call of ordinary length). Nothing is fetched: the library's own
data snapshot is read, never updated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from rrcli.config.profile import Backend, Price
from rrcli.registry import info

__all__ = [
    "LIBRARY",
    "KnownPrice",
    "library_installed",
    "lookup_price",
    "pool_prices",
    "price_of",
    "unpriced_budget",
]

LIBRARY = "genai-prices"
_SAMPLE = 1000  # tokens of each kind priced to read the per-token prices of the first tier


@dataclass(frozen=True, slots=True)
class KnownPrice:
    """A backend's price and where it came from: ``profile`` or ``genai-prices``."""

    price: Price
    source: str


def price_of(backend: Backend) -> KnownPrice | None:
    """The price of ``backend`` (see the module docstring); None when nothing knows it."""
    if backend.price is not None:
        return KnownPrice(backend.price, "profile")
    found = lookup_price(backend.provider, backend.base_url, backend.model)
    return None if found is None else KnownPrice(found, LIBRARY)


def pool_prices(backends: Iterable[Backend]) -> dict[str, Price | None]:
    """``{backend id: price or None}`` for a pool: what traces record and budgets reserve."""
    out: dict[str, Price | None] = {}
    for backend in backends:
        known = price_of(backend)
        out[backend.id] = None if known is None else known.price
    return out


@cache
def lookup_price(provider: str, base_url: str, model: str) -> Price | None:
    """What genai-prices knows of ``model`` at ``base_url``; None when it knows nothing, or is
    not installed (``library_installed`` tells which)."""
    if provider == "sim":
        return None
    try:
        from genai_prices import Usage, calc_price
    except ImportError:
        return None
    usage = Usage(input_tokens=_SAMPLE, output_tokens=_SAMPLE)
    try:
        named = info(provider).prices_id
    except LookupError:  # a plugin that cannot be loaded: validation says so
        named = None
    where = {"provider_id": named} if named else {"provider_api_url": base_url}
    try:
        found = calc_price(usage, model, **where)
    except (LookupError, ValueError):
        return None
    per_million = 1_000_000 / _SAMPLE
    model = getattr(found, "model_price", None)
    return Price(
        float(found.input_price) * per_million,
        float(found.output_price) * per_million,
        _first_tier(getattr(model, "cache_read_mtok", None)),
        _first_tier(getattr(model, "cache_write_mtok", None)),
    )


def _first_tier(value: object) -> float | None:
    """A genai-prices price per million tokens (its first tier when tiered); None: not given."""
    base = getattr(value, "base", value)
    try:
        return None if base is None else float(base)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def unpriced_budget(unpriced: Iterable[str]) -> tuple[str, str]:
    """What is wrong and the fix, for a budget over backends with no price."""
    return (
        f"a budget needs a price for every backend; no price for {', '.join(unpriced)}",
        "give each a price = { input = ..., output = ... } (USD per million tokens), or "
        'pip install "rrcli[prices]" for the prices of known models',
    )


def library_installed() -> bool:
    """Whether genai-prices can be imported (the ``prices`` extra)."""
    try:
        import genai_prices  # noqa: F401
    except ImportError:
        return False
    return True
