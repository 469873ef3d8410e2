"""Imports run one way (STYLE.md, issue 20): no circle among the modules of ``wire/``,
``push/`` and ``bridges/``, counting every import — type-only (``if TYPE_CHECKING:``) and
inside functions included."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from fixtures.agents.harness import REPO

ROOTS = ("wire", "push", "bridges")


def _modules(base: Path, roots: Iterable[str]) -> dict[str, Path]:
    """Every module under ``roots`` by its dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for root in roots:
        for path in sorted((base / root).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module ``name`` is in (``wire.messages.Ask`` → ``wire.messages``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The known modules ``name`` imports: ``from pkg import mod`` names ``pkg.mod``, and
    ``from mod import thing`` names ``mod``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    wanted: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            wanted += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                wanted.append(full if full in modules else base)
    return {owner for w in wanted if (owner := _owner(w, modules)) not in (None, name)}


def cycles(base: Path, roots: Iterable[str]) -> list[list[str]]:
    """The import circles (strongly connected groups of two or more modules), sorted."""
    modules = _modules(base, roots)
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graphs here are a few hundred modules deep at most
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in graph[v]:
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            group = [stack.pop()]
            while group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for name in sorted(graph):
        if name not in order:
            visit(name)
    return sorted(found)


def test_no_import_cycle_in_wire_push_bridges() -> None:
    assert cycles(REPO, ROOTS) == []


def test_a_type_only_circle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import B\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\nB = 1\n"
    )
    (pkg / "c.py").write_text("def f():\n    from . import d\n")
    (pkg / "d.py").write_text("from .c import f\n")
    (pkg / "e.py").write_text("import pkg.a\n")
    assert cycles(tmp_path, ["pkg"]) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]
