"""What the strict servers of the two chat APIs share (tests/strict_api.py): the refusal, the
name pattern of tools, the range check.

Their rules are the documented and observed validation of each API's request (the API
references, and the 400 messages users report), written from them, never imported from rrcli.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["NAME", "Refused", "blank", "number"]

NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class Refused(Exception):
    """A request the API answers with 400; the message is the API's."""


def number(body: dict[str, Any], key: str, low: float, high: float) -> None:
    value = body.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise Refused(f"{key}: Input should be between {low:g} and {high:g}")


def blank(text: Any) -> bool:
    return not isinstance(text, str) or not text.strip()
