"""docs/reliability.md cannot drift: every test its table names exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reliability.md"


def named_tests() -> list[tuple[str, str]]:
    """(file, test name) of every `file::name` in the doc's table rows."""
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| ")]
    return re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", "\n".join(rows))


def test_every_row_names_a_test_that_exists():
    """Each row of the table names at least one test, and each named test is a function of
    the named file."""
    rows = [
        line
        for line in DOC.read_text().splitlines()
        if line.startswith("| ") and not line.startswith(("| fault", "|---"))
    ]
    assert rows and all("::" in row.rsplit("|", 2)[1] for row in rows)
    missing = []
    for file, name in named_tests():
        tree = ast.parse((ROOT / file).read_text())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        if name not in defined:
            missing.append(f"{file}::{name}")
    assert [] == missing
