"""Which backends serve a job's endpoint, and which one a Responses continuation must go to.

A backend serves the endpoints its profile lists (``endpoints``, default ``["chat"]``). A job is
routed only among the backends that serve its endpoint: the others are excluded from its routing
decisions (as failover excludes the backends it tried; another rule's exclusions are a union
away), and where none serves it the job is ``invalid`` with a reason naming the endpoint and the
backends. Each endpoint's answer is computed once per pool, so a job pays one dict lookup, and a
chat job on an all-chat pool is excluded from nothing.

A Responses job with ``previous_response_id`` continues a response that exists on its creator's
account only, as an Anthropic ``pause_turn`` continuation stays on its backend: ``pinned``
excludes every backend but the one ``ResponseOrigins`` says created it, and names why when that
backend is no longer in the pool (or no longer serves responses).

``RouteRules`` composes it with the other rule that narrows a chat job's backends: those whose
API cannot express its params (``routing.eligibility``), judged among the backends that serve
chat. Pure: the engine, ``validate --jobs`` and ``--dry-run`` ask the same ``RouteRules``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rrcli.config.profile import Backend
from rrcli.providers.translate import dialect_of
from rrcli.records.jobs import Job
from rrcli.registry import ENDPOINTS
from rrcli.routing.eligibility import Eligibility

__all__ = ["RouteRules", "Serving", "refusal", "serving_backends"]

_NOWHERE: frozenset[str] = frozenset()


def serving_backends(endpoint: str, backends: Sequence[Backend]) -> tuple[str, ...]:
    """The ids of the backends that serve ``endpoint``, in profile order."""
    return tuple(b.id for b in backends if endpoint in b.endpoints)


def refusal(endpoint: str, backends: Sequence[Backend]) -> str:
    """Why no backend of the pool can take a job for ``endpoint``: what each one serves, and
    the fix."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for backend in backends:
        groups.setdefault(backend.endpoints, []).append(backend.id)
    serve = "; ".join(
        f"{', '.join(ids)} serve{'s' if len(ids) == 1 else ''} {', '.join(served)}"
        for served, ids in groups.items()
    )
    return (
        f"no backend serves the {endpoint} endpoint ({serve}) — add "
        f'"{endpoint}" to the endpoints of a backend whose model serves it'
    )


class Serving:
    """A pool's answer to "which backends may take a job for this endpoint"."""

    __slots__ = ("_answers", "_ids")

    def __init__(self, backends: Sequence[Backend]) -> None:
        self._ids = frozenset(b.id for b in backends)
        self._answers: dict[str, tuple[frozenset[str], str | None]] = {}
        for endpoint in ENDPOINTS:
            ids = serving_backends(endpoint, backends)
            if ids:
                self._answers[endpoint] = (self._ids.difference(ids) or _NOWHERE, None)
            else:
                self._answers[endpoint] = (self._ids, refusal(endpoint, backends))

    def check(self, endpoint: str) -> tuple[frozenset[str], str | None]:
        """(the backends a job for ``endpoint`` may not be routed to, why it may go nowhere or
        None)."""
        return self._answers[endpoint]

    def pinned(self, response_id: str, origin: str) -> tuple[frozenset[str], str | None]:
        """(every backend but ``origin``, the creator of ``response_id``; or why the
        continuation cannot be sent: its creator is gone from the pool or serves no responses)."""
        excluded = self._answers["responses"][0]
        if origin in self._ids and origin not in excluded:
            return self._ids.difference((origin,)), None
        where = "is no longer in the pool" if origin not in self._ids else "serves no responses"
        return self._ids, (
            f'previous_response_id "{response_id}" was created by backend "{origin}", which '
            f"{where}; a response exists on its creator's account only — serve responses from "
            "that backend again, or send the conversation without previous_response_id"
        )


class RouteRules:
    """Every rule that narrows where a job may go, asked once per job: the backends serving its
    endpoint and, for chat, those among them whose API can express its params."""

    __slots__ = ("_judged", "eligibility", "serving")

    def __init__(self, backends: Sequence[Backend]) -> None:
        self.serving = Serving(backends)
        self.eligibility = Eligibility([b for b in backends if "chat" in b.endpoints])
        #: a job shape -> whether some backend may not express its params (False: a pool of
        #: one API, where a job's params need no look), asked once a shape
        self._judged: dict[str, bool] = {}

    def check(self, job: Job) -> tuple[frozenset[str], str | None]:
        """(the backends ``job`` may not be routed to, why it may go nowhere or None)."""
        excluded, refusal = self.serving.check(job.endpoint)
        if refusal is not None or job.endpoint != "chat":
            return excluded, refusal
        judged = self._judged.get(job.kind)
        if judged is None:
            judged = self._judged[job.kind] = self.eligibility.judges(dialect_of(job.kind))
        if not judged:
            return excluded, None
        dialect = dialect_of(job.kind)
        messages = job.messages
        if job.turns:  # a session's turns become user messages
            messages = [*messages, *({"role": "user", "content": t} for t in job.turns)]
        unexpressive, refusal = self.eligibility.check(job.params, dialect, messages)
        return (excluded | unexpressive if unexpressive else excluded), refusal
