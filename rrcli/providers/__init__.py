"""Provider adapters behind one small contract (``base.py``), listed in one registry
(``rrcli.registry``, which names each adapter by module and class).

``make_provider`` is the only door: the runner never names an adapter class. Importing this
package loads no HTTP client; the adapter is imported when a run makes its provider.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rrcli.config.redaction import MIN_SECRET, is_secret_header, url_secrets
from rrcli.registry import info

if TYPE_CHECKING:
    from rrcli.config.profile import Backend, RetrySettings
    from rrcli.providers.base import Provider

__all__ = ["backend_secrets", "make_provider"]


def make_provider(
    backend: Backend, api_key: str | None, *, retry: RetrySettings, seed: int | None
) -> Provider:
    """The provider for ``backend``, sending ``api_key`` (None: no auth header) in its own
    header, and masked in every string the server sends back (``scrub.Redacting``), as is each
    secret the provider learns (``report_secrets_to``: a token a command printed). ``seed``
    makes the simulated provider repeatable (the HTTP ones ignore it)."""
    try:
        module, name = info(backend.provider).adapter.split(":")
    except KeyError:
        raise ValueError(f"backend {backend.id!r}: unknown provider {backend.provider!r}") from None
    adapter = getattr(importlib.import_module(module), name)
    provider = adapter(backend, api_key, retry=retry, seed=seed)
    secrets = backend_secrets(backend, api_key)
    if not secrets and not hasattr(provider, "report_secrets_to"):
        return provider
    redacting = importlib.import_module("rrcli.providers.scrub").Redacting
    return redacting(provider, secrets)  # whatever the server says, no secret reaches a record


def backend_secrets(backend: Backend, api_key: str | None) -> tuple[str, ...]:
    """What ``backend`` sends that no record may show: its key, the credentials of its
    base_url (a password, ``?key=``) and the values of its credential headers."""
    headers = [v for name, v in backend.headers.items() if is_secret_header(name)]
    found = [api_key, *url_secrets(backend.base_url), *headers]
    return tuple(dict.fromkeys(s for s in found if s and len(s) >= MIN_SECRET))
