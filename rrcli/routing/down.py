"""Why a routing decision finds no backend: the whole pool down, the job's own backends down,
failover's tries spent, or every weight 0; and the retry whose backend went down while it
waited. The router raises these; ``health`` takes backends down."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rrcli.errors import NoBackendError

if TYPE_CHECKING:
    from rrcli.routing.lease import BackendState

__all__ = ["BackendDown", "NoHealthyBackend", "no_backend"]


class NoHealthyBackend(NoBackendError):
    """Every backend of the pool is down: the run has halted, and a call that could not be
    routed leaves its job without a result line (``--resume`` runs it once fixed)."""


class BackendDown(Exception):
    """The backend a retry waited for went down meanwhile: the call is routed again."""


def no_backend(
    states: Sequence[BackendState], healthy: bool, exclude: frozenset[str]
) -> NoBackendError:
    """Why a routing decision excluding ``exclude`` has no backend to choose: the whole pool
    down (``healthy`` False), the job's own backends down, failover's tries spent, or every
    weight 0."""
    down = [s for s in states if s.down is not None and s.backend.id not in exclude]
    if down and not healthy:
        return NoHealthyBackend("no healthy backend left: every backend is down")
    if down:
        names = ", ".join(f"{s.backend.id} ({s.down})" for s in down)
        return NoBackendError(f"no healthy backend left for this job: {names} down")
    if exclude:
        return NoBackendError(
            f"no backend left to route to: already tried {', '.join(sorted(exclude))}"
        )
    return NoBackendError("no backend can be chosen: every weight is 0")
