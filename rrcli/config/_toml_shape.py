"""What the TOML parser must never be given: a shape that costs it the stack or quadratic time.

tomllib recurses once per level of nested arrays and inline tables (a few thousand levels end in
RecursionError) and keeps every prefix of a dotted key (a 64 KB dotted key takes a minute and
gigabytes). No profile needs either, so the text is scanned first, in linear time: strings and
comments are set aside, then the nesting of brackets and the parts of each dotted key are
counted. Past a limit, the profile is refused at that line before tomllib sees it.
"""

from __future__ import annotations

import re

__all__ = ["MAX_DEPTH", "MAX_KEY_PARTS", "shape_problem"]

MAX_DEPTH = 64  # nested arrays, inline tables and table-header brackets
MAX_KEY_PARTS = 64  # parts of one dotted key

#: strings (all four kinds) and comments, whose brackets and dots are no structure
_OPAQUE = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*'
)
_BRACKET = re.compile(r"[\[\]{}\n]")
#: a dotted key (or a float: one dot); a part is taken whole and only from its first character,
#: so a long run without dots costs one pass, not one per character
_DOTTED = re.compile(
    r'(?<![A-Za-z0-9_+-])(?:[A-Za-z0-9_+-]++|"")(?:[ \t]*+\.[ \t]*+(?:[A-Za-z0-9_+-]++|""))+'
)


def _blank(match: re.Match[str]) -> str:
    """A string or comment as an empty string, its line breaks kept (lines stay numbered)."""
    return '""' + "\n" * match.group().count("\n")


def shape_problem(text: str) -> tuple[int, str] | None:
    """(line, message) of the first place nested or dotted past the limits, else None."""
    bare = _OPAQUE.sub(_blank, text)
    depth, line = 0, 1
    for match in _BRACKET.finditer(bare):
        char = match.group()
        if char == "\n":
            line += 1
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return line, f"nested more than {MAX_DEPTH} levels deep"
        else:
            depth = max(0, depth - 1)
    for match in _DOTTED.finditer(bare):
        if match.group().count(".") >= MAX_KEY_PARTS:
            where = bare.count("\n", 0, match.start()) + 1
            return where, f"a dotted key of more than {MAX_KEY_PARTS} parts"
    return None
