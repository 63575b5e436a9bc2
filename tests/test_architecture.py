"""The rules of docs/architecture.md hold: imports point one way, transitively; each part does only
the kinds of I/O the document allows it; a leading underscore means private to its package."""

from __future__ import annotations

import ast
import builtins
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rrcli"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, typing_too: bool = False) -> set[str]:
    """Every module a file imports at run time, at any depth (lazy imports inside functions count
    too; ``if TYPE_CHECKING:`` blocks do not, they never run, unless ``typing_too``). ``from a
    import b`` counts as both ``a`` and ``a.b``."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        typing_only = isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        if typing_only and not typing_too:
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
#: The same with the imports made only for type checkers: a circle through them is one too.
TYPED_GRAPH = {module_name(p): imports(p, typing_too=True) for p in MODULES}


def ours(name: str) -> str | None:
    """The rrcli module ``name`` refers to (``rrcli.a.b.func`` → ``rrcli.a.b``), None if foreign."""
    while name and name not in GRAPH:
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return name or None


def parents(module: str) -> list[str]:
    """The packages whose ``__init__`` runs before ``module``: rrcli.a.b → [rrcli, rrcli.a]."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def direct(module: str) -> set[str]:
    """Our modules that importing ``module`` runs directly: its imports and their packages."""
    out: set[str] = set()
    for name in GRAPH[module]:
        target = ours(name)
        if target is not None and target != module:
            out.update(p for p in [*parents(target), target] if p in GRAPH and p != module)
    return out


@cache
def closure(module: str) -> frozenset[str]:
    """Every rrcli module that may run once ``module`` is imported and used (lazy imports too)."""
    seen: set[str] = set()
    todo = [module, *parents(module)]
    while todo:
        current = todo.pop()
        if current in seen or current not in GRAPH:
            continue
        seen.add(current)
        todo.extend(direct(current))
    return frozenset(seen)


def foreign(module: str) -> set[str]:
    """Foreign modules imported by ``module`` and everything it reaches, transitively."""
    return {name for m in closure(module) for name in GRAPH[m] if not name.startswith("rrcli")}


def part(module: str) -> str:
    """The part of the architecture a module belongs to: its subpackage, or itself at the top."""
    parts = module.split(".")
    return ".".join(parts[:2])


#: Which parts each part may import (docs/architecture.md, "Parts"). The top of the package
#: (cli, _render, _logging, __init__, __main__) may import anything.
MAY_IMPORT = {
    "rrcli.diagnostic": set(),
    "rrcli.errors": {"rrcli.diagnostic"},
    "rrcli.tokens": set(),
    "rrcli.registry": set(),
    "rrcli.vocabulary": set(),
    "rrcli.config": {"rrcli.errors", "rrcli.diagnostic", "rrcli.registry"},
    "rrcli.records": {
        "rrcli.errors",
        "rrcli.diagnostic",
        "rrcli.config",
        "rrcli.registry",
        "rrcli.vocabulary",
    },
    "rrcli.providers": {
        "rrcli.errors",
        "rrcli.diagnostic",
        "rrcli.config",
        "rrcli.tokens",
        "rrcli.registry",
        "rrcli.vocabulary",
    },
    "rrcli.sim": {
        "rrcli.errors",
        "rrcli.config",
        "rrcli.tokens",
        "rrcli.registry",
        "rrcli.vocabulary",
        "rrcli.providers",
    },
    "rrcli.routing": {
        "rrcli.errors",
        "rrcli.diagnostic",
        "rrcli.config",
        "rrcli.tokens",
        "rrcli.registry",
        "rrcli.vocabulary",
        "rrcli.providers",
        "rrcli.records",
    },
    "rrcli.fleet": {
        "rrcli.errors",
        "rrcli.diagnostic",
        "rrcli.config",
        "rrcli.tokens",
        "rrcli.registry",
        "rrcli.vocabulary",
        "rrcli.records",
        "rrcli.routing",
    },
    "rrcli.engine": {
        "rrcli.errors",
        "rrcli.diagnostic",
        "rrcli.config",
        "rrcli.tokens",
        "rrcli.registry",
        "rrcli.vocabulary",
        "rrcli.providers",
        "rrcli.records",
        "rrcli.routing",
        "rrcli.fleet",
    },
    # the front-ends: each imports the engine, none another, but serve, which is over the pool
    "rrcli.running": {
        "rrcli.errors",
        "rrcli.diagnostic",
        "rrcli.config",
        "rrcli.tokens",
        "rrcli.registry",
        "rrcli.vocabulary",
        "rrcli.providers",
        "rrcli.records",
        "rrcli.routing",
        "rrcli.fleet",
        "rrcli.otel",
        "rrcli.engine",
    },
    "rrcli.pool": {
        "rrcli.errors",
        "rrcli.diagnostic",
        "rrcli.config",
        "rrcli.tokens",
        "rrcli.registry",
        "rrcli.vocabulary",
        "rrcli.providers",
        "rrcli.records",
        "rrcli.routing",
        "rrcli.fleet",
        "rrcli.engine",
    },
    "rrcli.serve": {
        "rrcli.errors",
        "rrcli.diagnostic",
        "rrcli.config",
        "rrcli.tokens",
        "rrcli.registry",
        "rrcli.vocabulary",
        "rrcli.providers",
        "rrcli.records",
        "rrcli.routing",
        "rrcli.fleet",
        "rrcli.otel",
        "rrcli.engine",
        "rrcli.pool",
    },
    "rrcli.stats": {"rrcli.errors", "rrcli.records", "rrcli.tokens"},
    "rrcli.otel": {"rrcli.errors", "rrcli.config", "rrcli.records"},
    "rrcli.manpages": {"rrcli.errors"},
}
#: Every part logs through ``rrcli.logs``, which imports nothing of rrcli's.
MAY_IMPORT["rrcli.logs"] = set()
for _allowed in MAY_IMPORT.values():
    _allowed.add("rrcli.logs")
TOP = {"rrcli", "rrcli.cli", "rrcli._commands", "rrcli._render", "rrcli._logging", "rrcli.__main__"}


def allowed(source: str, target: str) -> bool:
    """Whether part ``source`` may import module ``target``: a module of a part it may import, or
    a package whose ``__init__`` runs on the way to one (what that ``__init__`` imports is in the
    closure and checked too)."""
    if part(source) in TOP or part(source) == part(target) or target == "rrcli":
        return True
    return any(
        target == ok or target.startswith(ok + ".") or ok.startswith(target + ".")
        for ok in MAY_IMPORT[part(source)]
    )


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_one_way(module):
    """No module reaches, even through others or lazily, a part its own part may not import."""
    if part(module) in TOP:
        return
    assert part(module) in MAY_IMPORT, f"{module}: a new part; add it to docs and MAY_IMPORT"
    assert [] == sorted(t for t in closure(module) if not allowed(part(module), t))


#: The front-ends over the one engine, and the one front-end each may stand on.
FRONT_ENDS = {"rrcli.running": set(), "rrcli.pool": set(), "rrcli.serve": {"rrcli.pool"}}


@pytest.mark.parametrize(
    "module", sorted(m for m in GRAPH if part(m) in [*FRONT_ENDS, "rrcli.engine"])
)
def test_front_ends_import_the_engine_never_each_other(module):
    """A front-end (the batch runner, the pool, the gateway) reaches no other front-end, even
    through others or lazily (the gateway stands on the pool); the engine reaches none."""
    own = part(module)
    others = set(FRONT_ENDS) - {own} - FRONT_ENDS.get(own, set())
    assert [] == sorted(t for t in closure(module) if part(t) in others)


def builds(path: Path, name: str) -> bool:
    """Whether the file calls ``name(...)`` (as a plain name or an attribute)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == name:
                return True
    return False


def test_only_the_engine_builds_an_engine():
    """Every front-end gets its engine from the one assembly: only modules of rrcli/engine/
    call ``Engine(...)``."""
    builders = {module_name(p) for p in MODULES if builds(p, "Engine")}
    assert set() == {m for m in builders if part(m) != "rrcli.engine"}


def typed_direct(module: str) -> set[str]:
    """Our modules ``module`` names in any import, type-only ones included."""
    targets = (ours(name) for name in TYPED_GRAPH[module])
    return {t for t in targets if t is not None and t != module}


def reach(graph: dict[str, set[str]], start: str) -> set[str]:
    """Everything ``start`` reaches in ``graph``, following edges transitively."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(graph.get(current, ()))
    return seen


def test_no_import_circles():
    """No module imports, directly or through others, a module that imports it back; type-only
    imports count (a circle a type checker walks is one a reader walks too)."""
    graph = {m: typed_direct(m) for m in TYPED_GRAPH}
    circles = sorted(
        f"{a} <-> {b}"
        for a in graph
        for b in graph[a]
        if a < b and a in reach(graph, b) and a not in parents(b) and b not in parents(a)
    )
    assert [] == circles


#: Top-level modules of pure data every part below the top may read (what each provider is; the
#: words the APIs share): they import nothing of rrcli's, so a part reading them imports no other.
DATA_LAYERS = {"rrcli.registry", "rrcli.vocabulary"}


def test_data_layers_import_nothing_of_ours():
    """The pure-data modules at the top of the package import nothing of rrcli's, type-only
    imports included."""
    assert {} == {m: typed_direct(m) for m in DATA_LAYERS if typed_direct(m)}


def test_no_circles_between_parts():
    """No part imports, even type-only or through other parts, a part that imports it back: the
    parts form layers (the top excepted, which may import anything and nothing imports)."""
    edges: dict[str, set[str]] = {}
    for module in TYPED_GRAPH:
        if part(module) in TOP:
            continue
        others = {part(t) for t in typed_direct(module)} - {part(module), "rrcli"}
        edges.setdefault(part(module), set()).update(others)
    assert [] == sorted(p for p in edges if p in reach(edges, p))


#: What each kind of I/O is, by the foreign modules that do it.
CAPABILITIES = {
    "network": {
        "httpx2",
        "httpcore2",
        "redis",
        "uvicorn",
        "starlette",
        "urllib.request",
        "opentelemetry.exporter",
    },
    "dns": {"socket"},
    "processes": {"subprocess", "multiprocessing", "concurrent.futures"},
    "event loop": {"asyncio"},
    "terminal": {"rich", "click"},
}
#: What each part may do, transitively (docs/architecture.md, "What each part may do").
MAY_DO = {
    "rrcli.errors": set(),
    "rrcli.logs": set(),
    "rrcli.tokens": set(),
    "rrcli.registry": set(),
    "rrcli.vocabulary": set(),
    "rrcli.providers.translate": set(),
    "rrcli.providers._to_anthropic": set(),
    "rrcli.providers._anthropic_sayable": set(),
    "rrcli.providers._to_openai": set(),
    "rrcli.routing.eligibility": set(),
    "rrcli.routing.strategies": set(),
    "rrcli.routing.retry": set(),
    "rrcli.config": {"dns"},
    "rrcli.records": {"dns"},
    "rrcli.stats": {"processes"},
    "rrcli.providers": {"network", "dns", "event loop"},
    "rrcli.sim": {"network", "dns", "event loop"},
    "rrcli.routing": {"network", "dns", "event loop"},
    "rrcli.fleet": {"network", "dns", "event loop"},
    "rrcli.engine": {"network", "dns", "event loop"},
    "rrcli.pool": {"network", "dns", "event loop"},
    "rrcli.running": {"network", "dns", "event loop"},
    # the span process of --otlp (otel.live), started by the run
    "rrcli.running.telemetry": {"network", "dns", "event loop", "processes"},
    "rrcli.running.runner": {"network", "dns", "event loop", "processes"},
    "rrcli.pool.pool": {"network", "dns", "event loop", "processes"},  # the runner's set-up
    "rrcli.serve": {"network", "dns", "event loop"},
    "rrcli.running.outputs": {"network", "dns", "event loop", "processes"},
    "rrcli.running.plan": {"network", "dns", "event loop", "processes"},
    "rrcli.otel": {"network", "processes"},
    "rrcli.otel.endpoint": set(),
}


def capabilities(module: str) -> set[str]:
    mods = foreign(module)
    return {
        kind
        for kind, names in CAPABILITIES.items()
        if any(m == n or m.startswith(n + ".") for m in mods for n in names)
    }


def rule_for(module: str) -> set[str] | None:
    """The MAY_DO entry of ``module``: its own, else its part's; None at the top."""
    if module in MAY_DO:
        return MAY_DO[module]
    return MAY_DO.get(part(module))


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_each_part_does_only_its_io(module):
    """A module (with all it imports, transitively) does only the I/O its part may do."""
    may = rule_for(module)
    if may is None:
        return
    assert set() == capabilities(module) - may


@pytest.mark.parametrize(
    ("target", "owners"),
    [
        ("httpx2", {"rrcli.providers", "rrcli.sim"}),
        ("rich", {"rrcli._render"}),
        ("structlog", {"rrcli.logs", "rrcli._logging", "rrcli.engine.quiet"}),
        ("click", {"rrcli.cli", "rrcli._commands"}),
        ("redis", {"rrcli.fleet"}),
        ("starlette", {"rrcli.sim", "rrcli.serve"}),
        ("uvicorn", {"rrcli.sim", "rrcli.serve"}),
        ("opentelemetry", {"rrcli.otel"}),
        ("prometheus_client", {"rrcli.serve.metrics"}),
        ("rrcli.cli", {"rrcli.__main__"}),
        ("rrcli._render", {"rrcli.cli", "rrcli._commands"}),
        ("rrcli._logging", {"rrcli.cli", "rrcli._commands"}),
    ],
)
def test_only_the_named_modules_import(target, owners):
    """Each foreign library (and each CLI-only module) is imported directly by its owners only."""
    importers = {
        name
        for name, deps in GRAPH.items()
        if any(d == target or d.startswith(target + ".") for d in deps)
    }
    assert set() == {m for m in importers if not any(m.startswith(o) for o in owners)}


PACKAGES = {module_name(p) for p in MODULES if p.name == "__init__.py"}


def home(module: str) -> str:
    """The package a module sits in (a package's ``__init__`` sits in the package itself)."""
    return module if module in PACKAGES else module.rsplit(".", 1)[0]


def test_underscore_means_private_to_its_package():
    """A leading underscore means private to the package it sits in: a ``_module`` or a
    ``_name`` is imported only by modules of that same package (tests may reach anything)."""
    leaks = []
    for source, deps in GRAPH.items():
        for name in deps:
            target = ours(name)
            if target is None:
                continue
            names = name.split(".")[len(target.split(".")) - 1 :]
            private = any(n.startswith("_") and not n.startswith("__") for n in names)
            if private and home(source) != home(target):
                leaks.append(f"{source} -> {name}")
    assert [] == sorted(leaks)


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


def exception_classes() -> dict[str, list[str]]:
    """Every exception class defined in rrcli, by name → the modules that define one of that
    name: a class whose base is a builtin exception, an exception class of rrcli's, or a foreign
    class named like one (``...Error``, ``...Exception``), found by reading the source."""
    bases: dict[str, set[str]] = {}
    homes: dict[str, list[str]] = {}
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                bases.setdefault(node.name, set()).update(names)
                homes.setdefault(node.name, []).append(module_name(path))
    known = {name for name in dir(builtins) if _is_exception(getattr(builtins, name))}
    grown = True
    while grown:
        found = {
            name
            for name, of in bases.items()
            if any(b in known or b.endswith(("Error", "Exception")) for b in of)
        }
        grown = not found <= known
        known |= found
    return {name: homes[name] for name in sorted(known & set(homes))}


def _is_exception(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def test_every_exception_is_in_the_one_tree():
    """Every exception class rrcli defines is defined in rrcli/errors.py, the one tree its
    docstring draws (control-flow signals included, on their own branches)."""
    outside = {
        name: [m for m in modules if m != "rrcli.errors"]
        for name, modules in exception_classes().items()
    }
    assert {} == {name: modules for name, modules in outside.items() if modules}


def test_the_error_tree_drawn_is_the_one_defined():
    """The docstring of rrcli/errors.py names every exception class the module defines, and its
    ``__all__`` exports each."""
    import rrcli.errors

    defined = sorted(
        name
        for name, value in vars(rrcli.errors).items()
        if _is_exception(value) and value.__module__ == "rrcli.errors"
    )
    drawn = rrcli.errors.__doc__ or ""
    assert defined == sorted(rrcli.errors.__all__)
    assert [] == [name for name in defined if f" {name} " not in drawn]
