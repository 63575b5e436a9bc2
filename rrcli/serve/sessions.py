"""Which session a request belongs to, and forgetting the sessions gone idle.

An agent harness names its conversation in one of several places; the first found wins: the
path's ``/s/{session}/``, the headers ``x-rrcli-session``, ``x-session-id``,
``x-claude-code-session-id``, ``session_id``, the body's ``prompt_cache_key``, OpenAI's ``user``,
Anthropic's ``metadata.user_id``. With ``binding = "session"`` the router binds a session at its
first call to a backend with room and keeps it there; ``Idle`` forgets a session no request
named for ``session_idle`` seconds, so a long-lived server's bindings stay bounded. A name is
kept as ``records.jobs.session_name`` keeps it (at most ``MAX_SESSION_BYTES``), so each session
held costs a bounded few hundred bytes whatever the client named it with.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from rrcli.records.jobs import session_name

__all__ = ["HEADERS", "Idle", "session_of"]

#: the headers that name a session, in the order they are looked at
HEADERS = ("x-rrcli-session", "x-session-id", "x-claude-code-session-id", "session_id")


def session_of(path: str | None, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The session a request names (as ``session_name`` keeps it), or None."""
    named = _named(path, headers, body)
    return None if named is None else session_name(named)


def _named(path: str | None, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    if path:
        return path
    for name in HEADERS:
        value = headers.get(name)
        if value:
            return value
    for key in ("prompt_cache_key", "user"):
        value = body.get(key)
        if type(value) is str and value:
            return value
    metadata = body.get("metadata")
    if type(metadata) is dict:
        user = metadata.get("user_id")
        if type(user) is str and user:
            return user
    return None


class Idle:
    """The sessions seen, oldest use first; ``expired()`` takes out those idle longer than
    ``idle`` seconds (the caller forgets their bindings). A session is idle from the end of
    its last call: one with a call in flight (a long stream, say) is never expired."""

    def __init__(self, idle: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._idle = idle
        self._clock = clock
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._busy: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def touch(self, session: str) -> None:
        self._seen[session] = self._clock()
        self._seen.move_to_end(session)

    def begin(self, session: str) -> Callable[[object], None]:
        """A call of ``session`` starts; the function returned ends it (a done callback)."""
        self.touch(session)
        self._busy[session] = self._busy.get(session, 0) + 1

        def end(_: object = None) -> None:
            left = self._busy.pop(session) - 1
            if left:
                self._busy[session] = left
            self.touch(session)

        return end

    def expired(self) -> list[str]:
        """The sessions idle past the limit, no longer tracked."""
        now = self._clock()
        limit = now - self._idle
        gone = []
        for _ in range(len(self._seen)):
            session, seen = next(iter(self._seen.items()))
            if seen > limit:
                break
            if session in self._busy:
                self._seen.move_to_end(session)
                self._seen[session] = now
                continue
            del self._seen[session]
            gone.append(session)
        return gone
