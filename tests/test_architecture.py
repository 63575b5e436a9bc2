"""The import rules of docs/architecture.md hold: the architecture points one way."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rrcli"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module a file imports at run time, at any depth (lazy imports inside functions count
    too; ``if TYPE_CHECKING:`` blocks do not: they never run)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


GRAPH = {module_name(p): imports(p) for p in MODULES}


def importers_of(target: str) -> set[str]:
    return {
        name
        for name, deps in GRAPH.items()
        if any(d == target or d.startswith(target + ".") for d in deps)
    }


@pytest.mark.parametrize(
    ("target", "allowed"),
    [
        ("httpx2", {"rrcli.providers._http", "rrcli.providers.base", "rrcli.sim.behaviour",
                    "rrcli.sim.server", "rrcli.providers.openai", "rrcli.providers.anthropic"}),
        ("rich", {"rrcli._render"}),
        ("click", {"rrcli.cli"}),
        ("redis", {"rrcli.run.redis_gate", "rrcli.run._redis_hub"}),
        ("starlette", {"rrcli.sim.server", "rrcli.sim.behaviour"}),
        ("uvicorn", {"rrcli.sim.server", "rrcli.sim.behaviour"}),
        ("rrcli.cli", {"rrcli.__main__"}),
        ("rrcli._render", {"rrcli.cli"}),
        ("rrcli._logging", {"rrcli.cli"}),
    ],
)  # fmt: skip
def test_only_the_named_modules_import(target, allowed):
    """Each foreign library (and each CLI-only module) is imported by its named owners only."""
    assert set() == importers_of(target) - allowed


@pytest.mark.parametrize(
    "core", ["rrcli.config.profile", "rrcli.run.strategies", "rrcli.run.retry"]
)
def test_pure_modules_do_no_io(core):
    """profile, strategies and retry import no network, event loop or terminal library."""
    banned = {"httpx2", "asyncio", "rich", "click", "socket", "redis"}
    assert set() == {d.split(".")[0] for d in GRAPH[core]} & banned


def test_core_never_imports_upward():
    """Nothing below the runner imports the runner, and nothing in the core imports the CLI."""
    assert set() == importers_of("rrcli.run.runner") - {"rrcli.cli", "rrcli.run.plan"}
    assert set() == importers_of("rrcli.run.engine") - {"rrcli.run.runner", "rrcli.run.plan"}


def test_help_imports_no_heavy_module():
    """`rrcli --help` stays light: the HTTP client, rich, numpy and redis load only when a command
    needs them."""
    code = (
        "import sys; from click.testing import CliRunner; from rrcli.cli import main; "
        "CliRunner().invoke(main, ['--help']); "
        "print(' '.join(m for m in ('httpx2', 'rich', 'numpy', 'redis', 'starlette', 'msgspec') "
        "if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert [] == loaded


def test_library_api_is_exported():
    """The small library API of rrcli/__init__.py resolves: profile, jobs, run, summarize."""
    import rrcli

    for name in rrcli.__all__:
        assert getattr(rrcli, name) is not None, name
    assert sorted(rrcli.__all__) == rrcli.__all__
