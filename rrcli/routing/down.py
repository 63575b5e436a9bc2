"""Why a routing decision finds no backend: the whole pool down (``NoHealthyBackend``), the
job's own backends down, failover's tries spent, or every weight 0 (``NoBackendError``), each
error of ``rrcli.errors`` with the sentence that says which, and what to check of a backend
down. The router raises them; ``health`` takes backends down."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rrcli.config.redaction import redacted_url
from rrcli.errors import NoBackendError, NoHealthyBackend

if TYPE_CHECKING:
    from rrcli.config.profile import Backend
    from rrcli.routing.lease import BackendState

__all__ = ["check_hint", "down_reasons", "no_backend"]


def no_backend(
    states: Sequence[BackendState], healthy: bool, exclude: frozenset[str]
) -> NoBackendError:
    """Why a routing decision excluding ``exclude`` has no backend to choose: the whole pool
    down (``healthy`` False), the job's own backends down, failover's tries spent, or every
    weight 0."""
    down = [s for s in states if s.down is not None and s.backend.id not in exclude]
    if down and not healthy:
        reasons = down_reasons((s.backend, s.down) for s in down)
        return NoHealthyBackend(f"no healthy backend left — {reasons}")
    if down:
        names = ", ".join(f"{s.backend.id} ({s.down})" for s in down)
        return NoBackendError(f"no healthy backend left for this job: {names} down")
    if exclude:
        return NoBackendError(
            f"no backend left to route to: already tried {', '.join(sorted(exclude))}"
        )
    return NoBackendError("no backend can be chosen: every weight is 0")


def check_hint(backend: Backend, reason: str) -> str:
    """What to check for a backend down for ``reason``: the key's variable (never the key),
    the account, the model and address, or that its server runs."""
    if reason == "connect_error":
        return f"check that the server at {redacted_url(backend.base_url)} is running"
    creds = backend.credentials
    if creds.api_key_env is not None:
        key = f"the key in ${creds.api_key_env}"
    elif creds.api_key is not None:
        key = "the profile's api_key"
    elif backend.provider == "bedrock":  # SigV4: the AWS credential chain signs its requests
        where = f"profile {creds.profile!r}" if creds.profile else "the default chain"
        key = f"the AWS credentials ({where})"
    else:
        key = "the credentials (it sends no key: set credentials.api_key_env)"
    if reason == "insufficient_quota":
        return f"check the credit and quota of the account behind {key}"
    if reason == "http_403":
        return f"check that {key} may use model {backend.model!r} (project, organisation, region)"
    if reason == "http_404":
        url = redacted_url(backend.base_url)
        return f"check the model {backend.model!r} and the base_url {url}"
    return f"check {key}"


def down_reasons(backends: Iterable[tuple[Backend, str | None]]) -> str:
    """Each backend out of the pool, why (None: it is not out), and what to check ("" when none
    is)."""
    return "; ".join(
        f"{backend.id}: {why} ({check_hint(backend, why)})"
        for backend, why in backends
        if why is not None
    )
