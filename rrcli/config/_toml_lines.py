"""Where a key path sits in a TOML file, so a diagnostic can say ``profile.toml:12``.

tomllib returns values, not positions. A light scan of table headers and ``key =`` lines covers
profiles as people write them; a key inside an inline table or a multi-line value maps to the
line where that value starts. Best effort: an unknown path has no line, never an error.
"""

from __future__ import annotations

import re

__all__ = ["key_lines", "line_for"]

_PART = r'(?:[A-Za-z0-9_-]+|"[^"]*"|\'[^\']*\')'
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_ARRAY_HEADER = re.compile(rf"^\s*\[\[\s*({_DOTTED})\s*\]\]")
_TABLE_HEADER = re.compile(rf"^\s*\[\s*({_DOTTED})\s*\]")
_KEY = re.compile(rf"^\s*({_DOTTED})\s*=")
_SPLIT = re.compile(rf"\s*({_PART})\s*(?:\.|$)")


def _parts(dotted: str) -> list[str]:
    return [p.strip("\"'") for p in _SPLIT.findall(dotted)]


def key_lines(text: str) -> dict[str, int]:
    """Map each key path (``backends[1].credentials``) to the 1-based line that sets it."""
    lines: dict[str, int] = {}
    arrays: dict[str, int] = {}  # array-of-tables name -> index of its last element
    prefix = ""
    in_string = False
    for number, line in enumerate(text.splitlines(), 1):
        quotes = line.count('"""') + line.count("'''")
        if in_string:
            in_string = quotes % 2 == 0
            continue
        if match := _ARRAY_HEADER.match(line):
            *parents, last = _parts(match[1])
            name = _join(_resolve(parents, arrays), last)
            arrays[name] = arrays.get(name, -1) + 1
            prefix = f"{name}[{arrays[name]}]"
            lines.setdefault(prefix, number)
        elif match := _TABLE_HEADER.match(line):
            prefix = _resolve(_parts(match[1]), arrays)
            lines.setdefault(prefix, number)
        elif match := _KEY.match(line):
            lines.setdefault(_join(prefix, ".".join(_parts(match[1]))), number)
        in_string = in_string or quotes % 2 == 1
    return lines


def _resolve(parts: list[str], arrays: dict[str, int]) -> str:
    """``backends.sim`` after ``[[backends]]`` is ``backends[<last>].sim``."""
    path = ""
    for part in parts:
        path = _join(path, part)
        if path in arrays:
            path = f"{path}[{arrays[path]}]"
    return path


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def line_for(lines: dict[str, int], path: str) -> int | None:
    """The line of ``path``, else of its nearest parent that has one."""
    if f"{path}[0]" in lines:  # an array of tables: where its first element starts
        return lines[f"{path}[0]"]
    while path:
        if path in lines:
            return lines[path]
        if path.endswith("]"):
            path = path[: path.rindex("[")]
        else:
            path = path.rpartition(".")[0]
    return None
