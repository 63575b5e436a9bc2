"""Which backend created each Responses API response: where its continuations must go.

A response (``response_id``) exists on the account of the backend that created it, so a job
continuing it (``previous_response_id``) is pinned there. The engine remembers the creator of each
response this run makes; a ``--resume`` also reads them from the results file's ``ok`` lines
(``response_id`` and ``deployment``). Memory is bounded: the most recent ``limit`` responses.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["LIMIT", "ResponseOrigins"]

LIMIT = 100_000  # responses remembered (about 150 bytes each)


class ResponseOrigins:
    """response id → the id of the backend that created it, the most recent ``limit``."""

    __slots__ = ("_by_id", "limit")

    def __init__(self, limit: int = LIMIT) -> None:
        self._by_id: dict[str, str] = {}
        self.limit = limit

    def __len__(self) -> int:
        return len(self._by_id)

    def remember(self, response_id: str, backend_id: str) -> None:
        by_id = self._by_id
        by_id.pop(response_id, None)  # a newer entry moves to the end
        by_id[response_id] = backend_id
        if len(by_id) > self.limit:
            del by_id[next(iter(by_id))]

    def origin(self, response_id: str) -> str | None:
        """The backend that created ``response_id``; None when it is not known here."""
        return self._by_id.get(response_id)

    def update(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Remember each (response id, backend id), in order."""
        for response_id, backend_id in pairs:
            self.remember(response_id, backend_id)

    def items(self) -> list[tuple[str, str]]:
        return list(self._by_id.items())
