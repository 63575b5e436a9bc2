"""Why a routing decision finds no backend: the whole pool down (``NoHealthyBackend``), the
job's own backends down, failover's tries spent, or every weight 0 (``NoBackendError``), each
error of ``rrcli.errors`` with the sentence that says which. The router raises them; ``health``
takes backends down."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rrcli.errors import NoBackendError, NoHealthyBackend

if TYPE_CHECKING:
    from rrcli.routing.lease import BackendState

__all__ = ["no_backend"]


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
