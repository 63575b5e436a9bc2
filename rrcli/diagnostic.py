"""One problem found in a profile, with its key path, its line and its fix.

The record every check of the profile makes (schema, cross-field rules, the address policy) and
``ProfileError`` carries, and ``closest``: the one "did you mean" of every message, a profile's
keys and values and a jobs line's keys alike. It imports nothing of rrcli's, so anything may
import it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Diagnostic", "closest"]

CLOSE = 0.6  # difflib's ratio from which a word reads as a misspelling


def closest(word: str, known: Iterable[str], *, cutoff: float = CLOSE) -> str | None:
    """The one of ``known`` that ``word`` most likely misspells, case aside (``sytem``,
    ``prmpt``, ``Model``), or None when none is at least ``cutoff`` alike (difflib's ratio)."""
    by_folded = {k.casefold(): k for k in sorted(known, reverse=True)}
    found = difflib.get_close_matches(word.casefold(), list(by_folded), n=1, cutoff=cutoff)
    return by_folded[found[0]] if found else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnostic:
    """One problem found in a profile. ``path`` is the key path (``backends[2].credentials``).

    ``code`` is a stable machine name (``unknown_key``, ``wrong_type``, ``env_unset``,
    ``host_unresolved``...); ``backend_id`` names the backend a ``backends[N]`` path points at.
    """

    severity: str  # "error" | "warning"
    path: str
    message: str
    fix: str = ""
    source: str = ""
    line: int | None = None
    column: int | None = None
    code: str = ""
    backend_id: str | None = None

    @property
    def where(self) -> str:
        """``profile.toml:12`` (or ``profile.toml:12:5``), as far as it is known."""
        where = self.source
        if self.line is not None:
            where += f":{self.line}" + (f":{self.column}" if self.column is not None else "")
        return where

    @property
    def subject(self) -> str:
        """The key path as a user reads it: ``backends[2] (id "b"): credentials``."""
        head, sep, rest = self.path.partition("]")
        if self.backend_id is None or not head.startswith("backends[") or not sep:
            return self.path
        label = f'{head}] (id "{self.backend_id}")'
        rest = rest.removeprefix(".")
        return f"{label}: {rest}" if rest else label

    def __str__(self) -> str:
        subject = self.subject
        text = (
            f"{self.where}: {subject}: {self.message}"
            if subject
            else (f"{self.where}: {self.message}")
        )
        return f"{text} — {self.fix}" if self.fix else text

    def as_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "path": self.path,
            "message": self.message,
            "fix": self.fix,
            "source": self.source,
            "line": self.line,
            "column": self.column,
            "code": self.code,
            "backend_id": self.backend_id,
        }
