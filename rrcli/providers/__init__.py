"""Provider adapters behind one small contract (see ``base.py``).

``make_provider`` is the only door: the runner never names an adapter class.
"""

from __future__ import annotations

from rrcli.config.profile import Backend, RetrySettings
from rrcli.providers.base import Call, Provider, Reply

__all__ = ["Call", "Provider", "Reply", "make_provider"]


def make_provider(
    backend: Backend, api_key: str | None, *, retry: RetrySettings, seed: int | None
) -> Provider:
    """The provider for ``backend``, sending ``api_key`` (None: no auth header) in its own
    header. ``seed`` makes the simulated provider repeatable (the HTTP ones ignore it)."""
    if backend.provider == "sim":
        from rrcli.providers.sim import SimProvider

        return SimProvider(backend, retry=retry, seed=seed)
    if backend.provider == "anthropic":
        from rrcli.providers.anthropic import AnthropicProvider

        return AnthropicProvider(backend, api_key, retry=retry)
    if backend.provider == "openai":
        from rrcli.providers.openai import OpenAIProvider

        return OpenAIProvider(backend, api_key, retry=retry)
    raise ValueError(f"backend {backend.id!r}: unknown provider {backend.provider!r}")
