"""No import cycle among dpsynth's modules: dependencies run one way, so no module needs
another to be half-loaded, and none dodges a cycle with an import hidden in a function.

The graph is read from the source with `ast`: an edge is an import that runs when the module
loads (at module level or in a class body), not one inside a function or under
`if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "dpsynth"


def _module_names(root: Path) -> dict[str, Path]:
    """Every module of the package at `root` by dotted name (a package by its own name)."""
    names = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _load_time_imports(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for branch in child.orelse:
                found += _load_time_imports(ast.Module(body=[branch], type_ignores=[]))
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            found.append(child)
        found += _load_time_imports(child)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the modules of the same package it imports when it loads."""
    modules = _module_names(root)

    def known(name: str) -> str | None:  # `a.b.C` (a class in a.b) is a.b
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in _load_time_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {known(alias.name) for alias in node.names}
                continue
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets |= {known(f"{base}.{alias.name}") for alias in node.names}
        graph[name] = targets - {None, name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path that ends where it starts, or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if cycle := visit(target):
                return cycle
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        if cycle := visit(node):
            return cycle
    return None


def test_no_module_level_import_cycle_in_dpsynth():
    graph = import_graph(SRC)
    assert len(graph) > 100 and graph["dpsynth.config"]  # the whole package was read
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_detector_finds_a_cycle_and_ignores_deferred_imports(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "a.py").write_text("from typing import TYPE_CHECKING\n"
                               "from pkg.sub.b import thing\n"
                               "if TYPE_CHECKING:\n    from pkg import c\n")
    (root / "sub" / "b.py").write_text("def later():\n    from pkg import a\n"
                                       "class K:\n    from .. import c\n")
    (root / "c.py").write_text("import pkg.a\n")
    graph = import_graph(root)
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    (root / "c.py").write_text("def later():\n    import pkg.a\n")
    assert find_cycle(import_graph(root)) is None
