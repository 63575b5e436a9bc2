"""The gateway's state: its pools, which pool and backends a request's model picks, the
client keys, the sessions seen and whether it is draining (``[serve]``'s settings)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rrcli.pool.pool import Pool
from rrcli.serve.metrics import Metrics
from rrcli.serve.sessions import HEADERS, Idle

__all__ = ["Gateway", "Settings", "pool_name", "read_headers"]

#: the headers a request is read for: its size, its client key, its session
_READ = frozenset(n.encode() for n in ("content-length", "authorization", "x-api-key", *HEADERS))


@dataclass(frozen=True, slots=True)
class Settings:
    """``[serve]``: the client keys (empty: no auth), the body limit in bytes, the seconds a
    session may stay idle before it is forgotten, whether /metrics is open without a key."""

    keys: frozenset[str] = frozenset()
    max_body_bytes: int = 32 << 20
    session_idle: float = 3600.0
    open_metrics: bool = False


class Gateway:
    """The pools and the state of the server: sessions seen, draining."""

    def __init__(self, pools: Sequence[Pool], settings: Settings) -> None:
        self.pools = list(pools)
        self.settings = settings
        self.draining = False
        self.in_flight = 0
        self.sessions = Idle(settings.session_idle)
        self.metrics = Metrics(self.pools, lambda: self.in_flight)
        self._by_model: dict[str, tuple[Pool, frozenset[str]]] = {}
        self.remap()

    def remap(self) -> None:
        """Which pool, and which of its backends, each model picks, as the pools are now (a
        reload changes their backends)."""
        by_model: dict[str, tuple[Pool, frozenset[str]]] = {}
        for pool in self.pools:
            ids = {b.id for b in pool.profile.backends}
            for backend in pool.profile.backends:
                serving = {b.id for b in pool.profile.backends if b.model == backend.model}
                by_model.setdefault(backend.model, (pool, frozenset(ids - serving)))
        for pool in self.pools:  # a profile's name wins over a model of the same name
            by_model[pool_name(pool)] = (pool, frozenset())
        self._by_model = by_model

    def models(self) -> list[str]:
        return list(self._by_model)

    def pick(self, model: object) -> tuple[Pool, frozenset[str]] | None:
        if model is None and len(self.pools) == 1:
            return self.pools[0], frozenset()
        return self._by_model.get(model) if type(model) is str else None

    def cooling(self, pool: Pool, exclude: frozenset[str]) -> float | None:
        """Seconds until the first of the request's backends stops cooling, when every one
        of them is cooling (the request is answered 429 at once rather than held); None when
        one may take it."""
        return pool.engine.status().cooling(exclude)

    def forget_idle(self) -> None:
        for session in self.sessions.expired():
            for pool in self.pools:
                pool.engine.forget(session)

    def authorized(self, headers: Mapping[str, str]) -> bool:
        """Whether the request's ``headers`` (lowercase names) carry a client key."""
        keys = self.settings.keys
        if not keys:
            return True
        given = headers.get("x-api-key") or ""
        bearer = headers.get("authorization", "")
        if bearer[:7].lower() == "bearer ":
            given = bearer[7:].strip()
        return any(hmac.compare_digest(given.encode(), key.encode()) for key in keys)


def pool_name(pool: Pool) -> str:
    profile = pool.profile
    return profile.name or profile.label.rsplit(".", 1)[0]


def read_headers(scope: Any) -> dict[str, str]:
    """The headers of a request's ASGI ``scope`` that the gateway reads (its size, its client
    key, its session: the first of each), in one pass over them."""
    heads: dict[str, str] = {}
    for name, value in scope["headers"]:
        if name in _READ:
            heads.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return heads
