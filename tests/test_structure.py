"""The layout's rules (issue 20, STYLE.md "Our layout"), read from the source with ``ast``:
nothing here imports the code it checks.

- no import circle among the modules of ``collie_gateway/``, ``wire/``, ``push/`` and
  ``bridges/``: every import counts, under ``if TYPE_CHECKING:`` and inside functions too;
- no I/O in ``collie_gateway/core/``: no asyncio, aiohttp, sqlite3, aiosqlite, psycopg, socket or
  subprocess, no clock read (``time.time``, ``datetime.now``…), no exemption;
- no function over 80 lines in ``collie_gateway/``;
- no "issue N" in the comments and docstrings of those packages (the spec id says it).

The checkers run on any tree; the tests at the end prove they find what they must.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("collie_gateway", "wire", "push", "bridges")
CORE = "collie_gateway/core"
LONGEST = 80  # lines, from the ``def`` line to the function's last line
BANNED_MODULES = (
    "asyncio",
    "aiohttp",
    "sqlite3",
    "aiosqlite",
    "psycopg",
    "socket",
    "subprocess",
    # the gateway's own shells: a pure room never reaches into them
    "collie_gateway.store",
    "collie_gateway.services",
    "collie_gateway.http",
    "collie_gateway.gateway",
)
PURE_ROOMS = (CORE, "collie_gateway/views")
# What of ``time`` reads the clock or waits.
BANNED_TIME = frozenset(
    {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "sleep"}
)
CLOCK_CALLS = {"datetime": {"now", "utcnow", "today"}, "date": {"today"}}
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)


# --- modules and their imports -----------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    name: str  # dotted, a package by its own name (its ``__init__``)
    path: Path
    is_package: bool

    def tree(self) -> ast.Module:
        return ast.parse(self.path.read_text(encoding="utf-8"), str(self.path))


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line`` (``typing``: under ``if TYPE_CHECKING:``)."""

    source: str
    target: str
    line: int
    typing: bool


def modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Module]:
    """Every module of ``packages`` under ``root``, by dotted name."""
    found: dict[str, Module] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            found[name] = Module(name, path, is_package)
    return found


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """The lines under an ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for stmt in node.body:
                    lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def _base(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module a ``from … import`` names (relative ones resolved)."""
    if node.level == 0:
        return node.module or ""
    package = module.name.split(".")
    if not module.is_package:
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join([*package, node.module] if node.module else package)


def imports(module: Module, known: dict[str, Module]) -> Iterator[Edge]:
    """Each import of ``module`` that names a module of ``known``: ``from pkg import mod``
    is an edge to ``pkg.mod``, ``from pkg import name`` and ``import pkg`` one to ``pkg`` (its
    ``__init__``), ``import pkg.mod`` one to ``pkg.mod`` alone (Python runs ``pkg``'s
    ``__init__`` first, but a package that imports its own modules is no circle)."""
    tree = module.tree()
    typing_lines = _type_checking_lines(tree)
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                targets.append(sub if sub in known else base)
        else:
            continue
        for target in dict.fromkeys(targets):
            if target in known and target != module.name:
                yield Edge(module.name, target, node.lineno, node.lineno in typing_lines)


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, list[Edge]]:
    """Each module's imports of the others, in source order."""
    known = modules(root, packages)
    return {name: sorted(imports(m, known), key=lambda e: e.line) for name, m in known.items()}


def _components(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, at = work.pop()
            if at == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            edges = graph.get(node, [])
            if at < len(edges):
                work.append((node, at + 1))
                target = edges[at].target
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def _path(graph: dict[str, list[Edge]], start: str, goal: str, inside: set[str]) -> list[Edge]:
    """The shortest chain of imports from ``start`` to ``goal`` within ``inside``."""
    came: dict[str, Edge | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            break
        for edge in graph.get(node, []):
            if edge.target in inside and edge.target not in came:
                came[edge.target] = edge
                queue.append(edge.target)
    chain: list[Edge] = []
    node = goal
    while (step := came[node]) is not None:
        chain.append(step)
        node = step.source
    return chain[::-1]


def cycles(graph: dict[str, list[Edge]]) -> list[str]:
    """Each import circle as a readable chain: for every import inside a circle, the shortest
    circle through it (the same circle once)."""
    found: dict[tuple[str, ...], str] = {}
    for component in _components(graph):
        inside = set(component)
        for source in component:
            for edge in graph[source]:
                if edge.target not in inside:
                    continue
                chain = [edge, *_path(graph, edge.target, source, inside)]
                names = [e.source for e in chain]
                turn = names.index(min(names))
                key = tuple(names[turn:] + names[:turn])
                if key not in found:
                    found[key] = _chain(chain[turn:] + chain[:turn])
    return sorted(found.values())


def _chain(chain: list[Edge]) -> str:
    steps = [chain[0].source]
    for edge in chain:
        where = f"line {edge.line}" + (", TYPE_CHECKING" if edge.typing else "")
        steps.append(f"-> {edge.target} ({where})")
    return " ".join(steps)


# --- no I/O in core -----------------------------------------------------------------------------


def _banned_module(name: str) -> bool:
    return any(name == b or name.startswith(b + ".") for b in BANNED_MODULES)


def _clock_call(node: ast.Call) -> str | None:
    """``datetime.now(``, ``datetime.utcnow(``, ``date.today(`` (any spelling of the class)."""
    func = node.func
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value
    owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
    if owner_name in CLOCK_CALLS and func.attr in CLOCK_CALLS[owner_name]:
        return f"{owner_name}.{func.attr}("
    return None


def io_uses(path: Path) -> list[str]:
    """What in one module does I/O or reads the clock, as ``line: what``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[int, str]] = []
    time_names: set[str] = set()  # what ``import time`` is called here
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _banned_module(alias.name):
                    found.append((node.lineno, f"import {alias.name}"))
                if alias.name == "time":
                    time_names.add(alias.asname or "time")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _banned_module(node.module):
                found.append((node.lineno, f"from {node.module} import …"))
            if node.module == "time":
                names = ", ".join(a.name for a in node.names)
                found.append((node.lineno, f"from time import {names}"))
        elif isinstance(node, ast.Call) and (call := _clock_call(node)) is not None:
            found.append((node.lineno, call))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in time_names
            and node.attr in BANNED_TIME
        ):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return [f"{line}: {what}" for line, what in sorted(set(found))]


# --- long functions, issue numbers --------------------------------------------------------------


def long_functions(path: Path, longest: int = LONGEST) -> list[tuple[int, str, int]]:
    """Each function or method over ``longest`` lines: (def line, name, lines)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[int, str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > longest:
                found.append((node.lineno, node.name, lines))
    return sorted(found)


def issue_citations(path: Path) -> list[tuple[int, str]]:
    """Each "issue N" in a comment or a docstring: (line, the words)."""
    source = path.read_text(encoding="utf-8")
    found: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found += [(token.start[0], m.group()) for m in ISSUE.finditer(token.string)]
    for node in ast.walk(ast.parse(source, str(path))):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body = node.body
        if not body or not isinstance(body[0], ast.Expr):
            continue
        doc = body[0].value
        if isinstance(doc, ast.Constant) and isinstance(doc.value, str):
            for m in ISSUE.finditer(doc.value):
                found.append((doc.lineno + doc.value.count("\n", 0, m.start()), m.group()))
    return sorted(found)


def _sources(root: Path, *dirs: str) -> list[Path]:
    return [p for d in dirs for p in sorted((root / d).rglob("*.py"))]


def _where(root: Path, path: Path, line: int) -> str:
    return f"{path.relative_to(root)}:{line}"


# --- the rules, on this repository ---------------------------------------------------------------


def test_no_import_cycle_among_collie_gateway_wire_push_and_bridges() -> None:
    found = cycles(import_graph(REPO))
    assert not found, f"{len(found)} import circles:\n" + "\n".join(found)


def test_core_exists_and_imports_no_io_nor_reads_the_clock() -> None:
    core = REPO / CORE
    assert core.is_dir(), f"{CORE}/ does not exist: the pure decisions have no room yet"
    for room in PURE_ROOMS:
        files = _sources(REPO, room)
        assert files, f"{room}/ holds no module"
        found = [f"{p.relative_to(REPO)}:{use}" for p in files for use in io_uses(p)]
        assert not found, f"I/O, a shell or a clock read in {room}/:\n" + "\n".join(found)


def test_no_function_over_80_lines_in_collie_gateway() -> None:
    found = [
        f"{_where(REPO, p, line)} {name}: {lines} lines"
        for p in _sources(REPO, "collie_gateway")
        for line, name, lines in long_functions(p)
    ]
    assert not found, f"{len(found)} functions over {LONGEST} lines:\n" + "\n".join(found)


def test_no_issue_number_in_source_comments_or_docstrings() -> None:
    found = [
        f"{_where(REPO, p, line)}: {words}"
        for p in _sources(REPO, *PACKAGES)
        for line, words in issue_citations(p)
    ]
    assert not found, f"{len(found)} issue numbers (cite the spec id):\n" + "\n".join(found)


# --- the checkers find what they must (a tree of their own) -------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_cycles_count_type_only_relative_and_function_imports(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import typing\nif typing.TYPE_CHECKING:\n    from pkg import b\n",
            "pkg/b.py": "def f() -> None:\n    from .c import thing\n",
            "pkg/c.py": "from . import a\n",
            "pkg/d.py": "import pkg.sub.e\n",
            "pkg/sub/__init__.py": "from pkg.sub.e import x\n",
            "pkg/sub/e.py": "from .. import d\nfrom pkg.sub import x\n",
            "pkg/leaf.py": "import pkg.a\nimport asyncio\n",
        },
    )
    assert cycles(import_graph(root, ("pkg",))) == [
        "pkg.a -> pkg.b (line 3, TYPE_CHECKING) -> pkg.c (line 2) -> pkg.a (line 1)",
        "pkg.d -> pkg.sub.e (line 1) -> pkg.d (line 1)",
        "pkg.sub -> pkg.sub.e (line 1) -> pkg.sub (line 2)",
    ]


def test_io_uses_finds_modules_time_and_clock_calls(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "import asyncio.locks\nimport time as t\nfrom time import monotonic\n"
        "from aiohttp import web\nimport datetime as dt\nfrom datetime import date, datetime\n"
        "def f() -> None:\n    t.time(); dt.datetime.now(); datetime.utcnow(); date.today()\n"
        "    import socket\n    t.strftime('%Y')\n",
        encoding="utf-8",
    )
    assert io_uses(path) == [
        "1: import asyncio.locks",
        "3: from time import monotonic",
        "4: from aiohttp import …",
        "8: date.today(",
        "8: datetime.now(",
        "8: datetime.utcnow(",
        "8: t.time",
        "9: import socket",
    ]


def test_long_functions_and_issue_citations_are_found(tmp_path: Path) -> None:
    body = "".join(f"    x = {i}\n" for i in range(79))
    path = tmp_path / "m.py"
    path.write_text(
        '"""Mod (Issue 7)."""\n\n\ndef fits() -> None:\n' + body + "\n\n"
        'async def over() -> None:\n    """See issues 12 and\n    issue\n    3."""\n'
        + body
        + "    y = 1  # issue #4; tissue 5 is no citation\n",
        encoding="utf-8",
    )
    assert long_functions(path) == [(86, "over", 84)]
    assert issue_citations(path) == [
        (1, "Issue 7"),
        (87, "issues 12"),
        (88, "issue\n    3"),
        (169, "issue #4"),
    ]
