"""Provider adapters behind one small contract (``base.py``), listed in one registry
(``registry.py``).

``make_provider`` is the only door: the runner never names an adapter class. Importing this
package loads no HTTP client; the adapter is imported when a run makes its provider.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rrcli.providers.registry import info

if TYPE_CHECKING:
    from rrcli.config.profile import Backend, RetrySettings
    from rrcli.providers.base import Provider

__all__ = ["make_provider"]


def make_provider(
    backend: Backend, api_key: str | None, *, retry: RetrySettings, seed: int | None
) -> Provider:
    """The provider for ``backend``, sending ``api_key`` (None: no auth header) in its own
    header, and masked in every string the server sends back (``scrub.Redacting``). ``seed``
    makes the simulated provider repeatable (the HTTP ones ignore it)."""
    try:
        module, name = info(backend.provider).adapter.split(":")
    except KeyError:
        raise ValueError(f"backend {backend.id!r}: unknown provider {backend.provider!r}") from None
    adapter = getattr(importlib.import_module(module), name)
    provider = adapter(backend, api_key, retry=retry, seed=seed)
    if not api_key:
        return provider
    redacting = importlib.import_module("rrcli.providers.scrub").Redacting
    return redacting(provider, api_key)  # whatever the server says, its key reaches no record
