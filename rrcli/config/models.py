"""What rrcli knows of a model that a budget needs and no request says: the most output it can
write, and the most input tokens one image, file or audio part can cost it.

A budget reserves each call's worst case, so a call without an output cap needs the model's
own ceiling: a small table of the providers' documented maximum output by model name (the
longest matching prefix wins), else what the genai-prices data (the ``prices`` extra) gives as
the model's context window, which no output can pass; else nothing is known. An image costs
what its provider documents at most (OpenAI's tiles at the largest size, Anthropic's ~1,600
tokens), never the length of its URL; a backend's ``max_tokens_per_image`` overrides it. A
file (``FILE_TOKENS``) or an audio clip, and a call's whole input, are bounded by the model's
context window where genai-prices knows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from rrcli.config.profile import Backend

__all__ = [
    "FILE_TOKENS",
    "IMAGE_TOKENS",
    "MEDIA",
    "Media",
    "cap_param",
    "image_tokens",
    "media_tokens",
    "output_ceiling",
]

#: documented maximum output tokens, by model name prefix (longest match first)
_OUTPUT = {
    "gpt-4o-mini": 16_384,
    "gpt-4o": 16_384,
    "chatgpt-4o": 16_384,
    "gpt-4.1": 32_768,
    "gpt-4-turbo": 4_096,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 4_096,
    "gpt-5": 128_000,
    "o1-mini": 65_536,
    "o1": 100_000,
    "o3": 100_000,
    "o4-mini": 100_000,
    "claude-3-haiku": 4_096,
    "claude-3-opus": 4_096,
    "claude-3-5": 8_192,
    "claude-3-7": 64_000,
    "claude-sonnet-4": 64_000,
    "claude-opus-4": 32_000,
    "claude-haiku-4": 64_000,
    "gemini-1.5": 8_192,
    "gemini-2.0": 8_192,
    "gemini-2.5": 65_536,
    "gemini-3": 65_536,
}
IMAGE_TOKENS = 1_600  # Anthropic's documented most; OpenAI's gpt-4o tiles reach 1,445
#: models whose images cost more tokens (priced lower per token): OpenAI's documented most
_IMAGE = {"gpt-4o-mini": 48_169, "gpt-4.1-mini": 2_488, "gpt-4.1-nano": 3_779, "o4-mini": 2_642}
#: a file part's most: the 100 pages OpenAI and Anthropic take of a PDF, each billed as its
#: image and its text (up to 3,000 tokens a page, Anthropic's figure); less where the model's
#: context window is smaller. An audio clip is bounded by the same, or by its data.
FILE_TOKENS = 100 * (IMAGE_TOKENS + 3_000)


@dataclass(frozen=True, slots=True)
class Media:
    """The most input tokens an image part (``image``) and a file or audio part (``file``) can
    cost, and one call's whole input (``window``: the model's context window; None: unknown)."""

    image: int
    file: int
    window: int | None = None


MEDIA = Media(IMAGE_TOKENS, FILE_TOKENS)  # a backend rrcli knows nothing of


def _prefixed(table: dict[str, int], model: str) -> int | None:
    name = model.rsplit("/", 1)[-1].lower()  # "openai/gpt-4o" on a router is gpt-4o
    found = [prefix for prefix in table if name.startswith(prefix)]
    return table[max(found, key=len)] if found else None


def output_ceiling(backend: Backend) -> int | None:
    """The most output tokens ``backend``'s model can write in one answer; None: unknown."""
    known = _prefixed(_OUTPUT, backend.model)
    if known is not None:
        return known
    return _context_window(backend.provider, backend.base_url, backend.model)


def image_tokens(backend: Backend) -> int:
    """The most input tokens one image part can cost on ``backend``."""
    if backend.max_tokens_per_image is not None:
        return backend.max_tokens_per_image
    return _prefixed(_IMAGE, backend.model) or IMAGE_TOKENS


def media_tokens(backend: Backend) -> Media:
    """The most input tokens an image, a file or an audio part, and one call's whole input,
    can cost on ``backend``."""
    window = _context_window(backend.provider, backend.base_url, backend.model)
    file = FILE_TOKENS if window is None else min(FILE_TOKENS, window)
    return Media(image_tokens(backend), file, window)


@cache
def _context_window(provider: str, base_url: str, model: str) -> int | None:
    if provider == "sim":
        return None
    try:
        from genai_prices import Usage, calc_price
    except ImportError:
        return None
    try:
        found = calc_price(Usage(input_tokens=1, output_tokens=1), model, provider_api_url=base_url)
    except (LookupError, ValueError):
        return None
    window = getattr(found.model, "context_window", None)
    return window if isinstance(window, int) and window > 0 else None


def cap_param(endpoint: str, model: str) -> str:
    """The request parameter that caps ``model``'s output at ``endpoint``: the Responses API's
    ``max_output_tokens``; OpenAI's reasoning models' ``max_completion_tokens`` (they refuse
    ``max_tokens``); else ``max_tokens``."""
    if endpoint == "responses":
        return "max_output_tokens"
    name = model.rsplit("/", 1)[-1].lower()
    return "max_completion_tokens" if name.startswith(_REASONING) else "max_tokens"


_REASONING = ("o1", "o3", "o4", "gpt-5")
