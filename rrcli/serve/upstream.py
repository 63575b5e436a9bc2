"""What a client is told of a call that failed upstream: the deployment's id and what failed
there, never the backend's address, the variable of its key or its key; the details (the
server's words, the address, what to check) stay in the log and the trace.

A backend's own 401 or 403 is the operator's to fix, not the client's: passed on as it is, the
client would take its own key for wrong, so it is a 502 naming the deployment. An account out
of quota is a 503, as is a pool whose every backend is down (each named with what failed). A
backend's other 4xx speak of the request (a 400 about the body) and are passed on as they are
(its key masked by the provider). A failure with no answer to pass on (a connection refused,
a timeout, a 5xx, a broken stream) is said in rrcli's words: what failed, where, its type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rrcli.routing.tally import known_error_type

if TYPE_CHECKING:
    from rrcli.errors import CallError
    from rrcli.routing.status import EngineStatus

__all__ = ["told"]

#: what failed, by the reason a backend left the pool (routing/health.py)
_DOWN = {
    "http_401": "upstream authentication failed",
    "http_403": "upstream authentication failed",
    "http_404": "upstream model or path not found",
    "insufficient_quota": "upstream quota exhausted",
}
_TIMEOUTS = frozenset({"timeout", "connect_timeout", "pool_timeout"})


def told(error: CallError, status: int, engine: EngineStatus) -> tuple[int, str, str]:
    """The status, message and error type a client is answered for ``error`` (``status``: the
    one its type and the backend's status give), ``engine`` the pool's status now."""
    deployment = error.result.get("deployment")
    if error.type == "no_healthy_backend":
        down = [(d.id, d.why) for d in engine.deployments if d.state == "down"]
        if not down:
            return status, error.message, error.type
        named = "; ".join(f"deployment `{d}`: {_DOWN.get(why or '', why)}" for d, why in down)
        return 503, f"no healthy backend left — {named}", error.type
    if not deployment:
        return status, error.message, error.type
    if error.type in _DOWN and (error.type != "http_404" or _down_for(engine, deployment)):
        code = 503 if error.type == "insufficient_quota" else 502
        return code, f"{_DOWN[error.type]} at deployment `{deployment}`", error.type
    if status not in (502, 504):
        return status, error.message, error.type
    kind = known_error_type(error.type)  # a server's own words are not the client's to read
    if kind in _TIMEOUTS:
        return status, f"upstream timed out at deployment `{deployment}` ({kind})", kind
    code = error.status_code
    if code is not None and code >= 500:
        return status, f"upstream error at deployment `{deployment}` (HTTP {code})", kind
    return status, f"upstream call failed at deployment `{deployment}` ({kind})", kind


def _down_for(engine: EngineStatus, deployment: object) -> bool:
    """Whether ``deployment`` is out of the pool now (its 404 spoke of the backend, not of a
    resource the request named)."""
    return any(d.id == deployment and d.state == "down" for d in engine.deployments)
