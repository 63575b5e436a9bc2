"""Gate scopes: which limits the backends sharing one ``gate_scope`` enforce together.

Backends that name one scope (one API key, one server) share one gate, local or shared through
Redis; both kinds take the scope's limits from ``scope_limits``, so they agree on the values and
warn alike when the backends disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rrcli.logs import get_logger

if TYPE_CHECKING:
    from rrcli.config.profile import Backend

__all__ = ["ScopeLimits", "scope_limits"]

log = get_logger()


@dataclass(frozen=True, slots=True)
class ScopeLimits:
    """What one gate scope enforces; backends sharing a scope share the strictest values."""

    scope: str
    max_cap: int
    rpm: int | None = None
    tpm: int | None = None


def scope_limits(backends: Iterable[Backend]) -> list[ScopeLimits]:
    """The limits of each gate scope, in the order the scopes first appear.

    Backends that share a scope share one gate: its cap is the smallest ``max_concurrency`` among
    them and its rpm/tpm the smallest set; when they differ, a warning
    (``rrcli.gate_scope_mismatch``) names the scope, its backends and the values kept. Local and
    shared gates both take their limits from here.
    """
    groups: dict[str, list[Backend]] = {}
    for backend in backends:
        groups.setdefault(backend.scope, []).append(backend)
    out = []
    for scope, members in groups.items():
        limits = ScopeLimits(
            scope,
            min(b.max_concurrency for b in members),
            _smallest(b.rpm for b in members),
            _smallest(b.tpm for b in members),
        )
        if len({(b.max_concurrency, b.rpm, b.tpm) for b in members}) > 1:
            log.warning(
                "rrcli.gate_scope_mismatch",
                scope=scope,
                backends=[b.id for b in members],
                max_concurrency=limits.max_cap,
                rpm=limits.rpm,
                tpm=limits.tpm,
            )
        out.append(limits)
    return out


def _smallest(values: Iterable[int | None]) -> int | None:
    given = [v for v in values if v]
    return min(given) if given else None
