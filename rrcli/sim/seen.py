"""What an ``rrcli sim`` server saw: the counters of ``GET /stats`` and the last requests, for
tests to read at ``GET /requests``.

A test of a mixed pool asks what each server was sent (only fields of its own API? the right
endpoint? which headers?). The server keeps the last ``limit`` requests (10,000 by default) as
they arrived: raw body bytes and raw header pairs, so keeping one costs an append and no
decoding; they are decoded when read. ``GET /requests`` answers
``{"requests": [{"seq", "method", "path", "query", "headers", "body"}, ...], "dropped": N}``
oldest first: ``seq`` counts from 1 since the last reset, ``query`` is the URL's query string,
``body`` is the parsed JSON (the text when it is not JSON), ``headers`` are lower-case names
without the credentials (``authorization``, ``x-api-key``, ``api-key``, ``x-goog-api-key``:
/stats counts those by fingerprint), and ``dropped`` counts requests no longer kept.
``?path=/v1/embeddings`` keeps one path's; ``?since=SEQ`` those after SEQ. ``/stats/reset``
clears it.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field, fields
from typing import Any

import orjson

from rrcli.sim.behaviour import key_fingerprint

__all__ = ["Counters", "Received"]

_SECRET = frozenset({b"authorization", b"x-api-key", b"api-key", b"x-goog-api-key"})


@dataclass(slots=True)
class Counters:
    """What /stats reports; ``reset`` zeroes it but for the calls still in flight."""

    requests: int = 0
    streams: int = 0
    concurrency: int = 0
    peak_concurrency: int = 0
    rate_limited: int = 0
    assistant_messages: int = 0  # assistant messages received in request histories
    assistant_reasoning: int = 0  # ... of them carrying reasoning_content
    statuses: Counter[str] = field(default_factory=Counter)
    paths: Counter[str] = field(default_factory=Counter)
    credentials: Counter[str] = field(default_factory=Counter)

    def reset(self) -> None:
        fresh = Counters(concurrency=self.concurrency, peak_concurrency=self.concurrency)
        for f in fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def snapshot(self) -> dict[str, Any]:
        values = ((f.name, getattr(self, f.name)) for f in fields(self))
        return {name: dict(v) if isinstance(v, Counter) else v for name, v in values}

    def count_history(self, messages: Any) -> None:
        """What came back in the history: assistant turns, and those carrying reasoning."""
        if not isinstance(messages, list):
            return
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "assistant":
                self.assistant_messages += 1
                self.assistant_reasoning += "reasoning_content" in message

    def count_credentials(self, headers: Any) -> None:
        """Requests per credential: the header it came in and its fingerprint, or none."""
        seen = False
        bearer = headers.get("authorization")
        if bearer and bearer.startswith("AWS4-HMAC-SHA256 Credential="):  # SigV4: the key's id
            access_key = bearer.partition("=")[2].partition("/")[0]
            self.credentials["aws:" + key_fingerprint(access_key)] += 1
            seen = True
        elif bearer:
            self.credentials[
                "authorization:" + key_fingerprint(bearer.removeprefix("Bearer "))
            ] += 1
            seen = True
        for name in ("x-api-key", "api-key", "x-goog-api-key"):
            api_key = headers.get(name)
            if api_key:
                self.credentials[f"{name}:" + key_fingerprint(api_key)] += 1
                seen = True
        if not seen:
            self.credentials["none"] += 1


class Received:
    """The last ``limit`` requests, raw."""

    __slots__ = ("_log", "count")

    def __init__(self, limit: int = 10_000) -> None:
        self._log: deque[tuple[int, str, str, list[tuple[bytes, bytes]], bytes, bytes]]
        self._log = deque(maxlen=limit)
        self.count = 0

    def add(
        self,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        query: bytes = b"",
    ) -> None:
        self.count += 1
        self._log.append((self.count, method, path, headers, body, query))

    def clear(self) -> None:
        self._log.clear()
        self.count = 0

    def read(self, path: str | None = None, since: int = 0) -> dict[str, Any]:
        """The kept requests as JSON-ready dicts (see the module docstring)."""
        out = []
        for seq, method, at, headers, body, query in self._log:
            if seq <= since or (path is not None and at != path):
                continue
            out.append(
                {
                    "seq": seq,
                    "method": method,
                    "path": at,
                    "query": query.decode("latin-1"),
                    "headers": {
                        k.decode("latin-1").lower(): v.decode("latin-1")
                        for k, v in headers
                        if k.lower() not in _SECRET
                    },
                    "body": _decoded(body),
                }
            )
        return {"requests": out, "dropped": self.count - len(self._log)}


def _decoded(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace")
