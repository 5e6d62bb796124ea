"""The layering (docs/ARCHITECTURE.md), read from the source with ast: the runtime imports no
code generator, builder, Jinja2 or subprocess (AOT: no compiler at run time); the core imports
nothing above it; the codegen and the builder import no runtime; and wino's imports (function-level
ones included) have no circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "wino"
CORE = {
    "wino.algorithms",
    "wino.vocab",
    "wino.problem",
    "wino.winograd",
    "wino.magic",
    "wino.config",
    "wino.geometry",
    "wino.fused",
    "wino.specs",
    "wino.kinds",
    "wino.grid",
    "wino.refusals",
    "wino.launch",
    "wino.pick",
    "wino.cache",
    "wino.files",
    "wino.axes",
    "wino.matrix",
}
ABOVE_CORE = (
    "wino.codegen",
    "wino.builder",
    "wino.runtime",
    "wino.bench",
    "wino.cli",
    "wino.torch",
    "wino.scale",
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module ``name`` imports (absolute names; ``from pkg import mod`` resolves to the
    submodule when there is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = ".".join(p for p in (base if node.level else "", node.module or "") if p)
            for alias in node.names:
                full = f"{module}.{alias.name}"
                found.add(full if full in MODULES else module)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("wino.runtime")))
def test_runtime_imports_no_compiler_path(name):
    banned = ("wino.codegen", "wino.builder", "jinja2", "subprocess", "wino.bench", "wino.cli")
    bad = sorted(m for m in GRAPH[name] if _under(m, banned))
    assert not bad, f"{name} imports {bad}: the runtime must run with no compiler (AOT)"


@pytest.mark.parametrize("name", sorted(CORE))
def test_core_imports_nothing_above_it(name):
    bad = sorted(m for m in GRAPH[name] if _under(m, ABOVE_CORE) or m == "wino")
    assert not bad, f"{name} (core) imports {bad}"


@pytest.mark.parametrize(
    "name", sorted(n for n in MODULES if _under(n, ("wino.codegen", "wino.builder")))
)
def test_build_side_imports_no_runtime(name):
    bad = sorted(m for m in GRAPH[name] if _under(m, ("wino.runtime", "wino.bench", "wino.cli")))
    assert not bad, f"{name} imports {bad}"


def test_every_core_module_is_listed():
    top = {n for n in MODULES if n.count(".") == 1 and n not in ABOVE_CORE}
    assert top - CORE == set(), "classify the new top-level module in CORE or ABOVE_CORE"


def _cycle() -> list[str] | None:
    """One import circle among wino's modules (depth-first search), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(m for m in GRAPH.get(node, ()) if m in MODULES and m != "wino"):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in MODULES:
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circles():
    cycle = _cycle()
    assert cycle is None, "import circle: " + " -> ".join(cycle)
