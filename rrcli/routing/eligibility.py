"""Which backends of the pool may serve a job, before any routing decision.

A backend whose API cannot express one of the job's params (``n`` = 2 on Anthropic, ``top_k`` on
an OpenAI-compatible server) or what its messages say (a message's ``name`` on Anthropic:
``providers.translate.unexpressible``) never receives it: the job is
routed among the others (they are excluded from its routing decisions, as failover excludes the
backends it tried), and where none is left the job is ``invalid``, naming the parameters and the
backends. A backend's own ``params`` are written in its API and are not judged here.

Pure: the engine, ``validate --jobs`` and ``--dry-run`` ask the same ``Eligibility``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from rrcli.config.profile import Backend
from rrcli.providers.translate import DIALECTS, unexpressible
from rrcli.registry import api_dialect

__all__ = ["Eligibility", "eligible_backends"]

_NOWHERE: frozenset[str] = frozenset()
#: How a refusal names each API
_API_NAMES = {
    "openai": "the chat completions API",
    "anthropic": "Anthropic's Messages API",
    "gemini": "Gemini's API",
}


def eligible_backends(
    params: Mapping[str, Any],
    dialect: str,
    backends: Iterable[Backend],
    messages: Sequence[Mapping[str, Any]] = (),
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the ids of the backends that can carry a job of ``dialect`` with ``params`` and
    ``messages``, one reason for each group of the others): ``n = 2 cannot be sent to
    anthropic backends a, b: ...``."""
    ids: list[str] = []
    refused: dict[tuple[str, str | None, tuple[str, ...]], list[str]] = {}
    for backend in backends:
        target = api_dialect(backend.provider, backend.model)
        names = (
            ()
            if target in (None, dialect)
            else unexpressible(backend.provider, params, messages, dialect, model=backend.model)
        )
        if names:
            refused.setdefault((backend.provider, target, names), []).append(backend.id)
        else:
            ids.append(backend.id)
    reasons = tuple(
        _reason(params, provider, target, names, refused_ids)
        for (provider, target, names), refused_ids in refused.items()
    )
    return tuple(ids), reasons


def _reason(
    params: Mapping[str, Any],
    provider: str,
    target: str | None,
    names: tuple[str, ...],
    ids: Sequence[str],
) -> str:
    what = ", ".join(_shown(name, params.get(name)) for name in names)
    where = f"{provider} backend{'s' if len(ids) > 1 else ''} {', '.join(ids)}"
    api = _API_NAMES.get(target or "", provider)
    it = "it" if len(names) == 1 else "them"
    return f"{what} cannot be sent to {where}: {api} cannot express {it}"


def _shown(name: str, value: Any) -> str:
    """``n = 2``; a long or structured value by its name only."""
    if isinstance(value, bool | int | float | str):
        text = orjson.dumps(value).decode()
        if len(text) <= 40:
            return f"{name} = {text}"
    return name


class Eligibility:
    """A pool's answer to "which backends may serve this job". A pool whose backends all speak
    the job's dialect answers with one dict lookup, so the run's hot path pays nothing for it."""

    __slots__ = ("_backends", "_mixed")

    def __init__(self, backends: Sequence[Backend]) -> None:
        self._backends = tuple(backends)
        self._mixed = {
            dialect: any(api_dialect(b.provider, b.model) not in (None, dialect) for b in backends)
            for dialect in DIALECTS
        }

    def judges(self, dialect: str) -> bool:
        """Whether a job of ``dialect`` may find a backend of this pool that cannot say it."""
        return self._mixed.get(dialect, True)

    def check(
        self,
        params: Mapping[str, Any],
        dialect: str,
        messages: Sequence[Mapping[str, Any]] = (),
    ) -> tuple[frozenset[str], str | None]:
        """(the backends a job may not be routed to, why it may go nowhere or None): the job's
        ``params`` and ``messages`` written in ``dialect``."""
        if not self._mixed.get(dialect, True):
            return _NOWHERE, None
        ids, reasons = eligible_backends(params, dialect, self._backends, messages)
        if not ids:
            hint = "remove the parameter, or add a backend whose API has it"
            return frozenset(b.id for b in self._backends), f"{'; '.join(reasons)} — {hint}"
        if len(ids) == len(self._backends):
            return _NOWHERE, None
        return frozenset(b.id for b in self._backends).difference(ids), None
