"""The layout's rules (STYLE.md "Our layout"), read from the source with ``ast``: nothing here
imports the code it checks.

- no import circle among the modules of ``collie_gateway/``, ``wire/``, ``push/`` and
  ``bridges/``: every import counts, under ``if TYPE_CHECKING:`` and inside functions too;
- no I/O in the pure rooms (``PURE_ROOMS``: ``collie_gateway/core/``, ``views/``, wire's
  protocol, push's policy, the bridges' mappings) nor anywhere they reach: each module
  one of them imports, at any depth through ``collie_gateway``, ``wire``, ``push`` and
  ``bridges`` (a package's ``__init__`` with each of its modules), imports no asyncio,
  aiohttp, httpx, SQL driver, socket or subprocess, reads no clock (``time.time``,
  ``datetime.now``…) and is none of the gateway's shells; no exemption. Only what runs
  when a module is imported or called is followed: not what is imported under
  ``if TYPE_CHECKING:``, nor a package's names loaded on first use (``push``'s senders);
- SQL (sqlite3, aiosqlite, psycopg) only in the store modules (``SQL_HOMES``), and the
  gateway's engines (``store/database.py``, ``store/engine.py``, ``store/pg/``) named only in
  its store;
- no function over 80 lines;
- no "issue N" in the comments and docstrings of those packages (the spec id says it).

Each rule holds the rooms named in its constant (``PURE_ROOMS``, ``LONG_FUNCTION_ROOMS``,
``SQL_ROOMS``); a room joins once it keeps the rule. The checkers run on any tree; the
tests at the end prove they find what they must.
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
SQL_MODULES = ("sqlite3", "aiosqlite", "psycopg")
# The store's engines: no module outside the store names SQLite or PostgreSQL (it sees protocols
# and ``store/stores.py``).
ENGINE_MODULES = (
    "collie_gateway.store.database",
    "collie_gateway.store.engine",
    "collie_gateway.store.pg",
)
BANNED_MODULES = (
    "asyncio",
    "aiohttp",
    "httpx",
    "httpx2",
    "anyio",
    "uvicorn",
    "starlette",
    *SQL_MODULES,
    "socket",
    "subprocess",
    # the gateway's own shells: a pure room never reaches into them
    "collie_gateway.store",
    "collie_gateway.services",
    "collie_gateway.http",
    "collie_gateway.gateway",
)

# The rooms each rule holds: a folder (with everything under it) or one module. A room that
# does not keep a rule yet is left out of its list, and joins once it does.

# Pure: no I/O import and no clock read in them nor in any module they reach.
PURE_ROOMS = (
    CORE,
    "collie_gateway/views",
    # wire outside its SDK (wire/agent) and its one shell (wire/body.py reads an aiohttp body)
    "wire/__init__.py",
    "wire/answers.py",
    "wire/errors.py",
    "wire/messages.py",
    "wire/schema.py",
    "wire/sse.py",
    "wire/agent/_rules.py",  # the SDK's decisions
    # push's policy (its senders, sender.py, webhook.py and relay/ are its shells)
    "push/__init__.py",
    "push/_jwt.py",
    "push/_retry.py",
    "push/errors.py",
    "push/health.py",
    "push/limits.py",
    "push/models.py",
    "push/once.py",
    "push/payloads.py",
    "push/vapid.py",
    # what the bridges share, and their mappings (peer ⇄ wire)
    "bridges/loglines.py",
    "bridges/acp/jsonrpc.py",
    "bridges/acp/mapping.py",
    "bridges/acp/schema.py",
    "bridges/mcp/tools.py",
    "bridges/kit/asks.py",
    "bridges/kit/fit.py",
)
# No function over ``LONGEST`` lines.
LONG_FUNCTION_ROOMS = ("collie_gateway", "wire", "push", "bridges")
# SQL only in the store modules: the gateway's store room, the SDK's store, the relay's store,
# the bridges' state (bridges/kit/state.py).
SQL_HOMES = (
    "collie_gateway/store",
    "wire/agent/_store.py",
    "push/relay/store.py",
    "bridges/kit/state.py",
)
SQL_ROOMS = ("collie_gateway", "wire", "push", "bridges")
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
    """``source`` imports ``target`` at ``line`` (``typing``: under ``if TYPE_CHECKING:``;
    ``lazy``: in the module's ``__getattr__``, run when one of its names is first used)."""

    source: str
    target: str
    line: int
    typing: bool
    lazy: bool = False


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


def _lazy_lines(tree: ast.Module) -> set[int]:
    """The lines of a module-level ``__getattr__`` (PEP 562: a package's names loaded on
    first use)."""
    return {
        line
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }


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
    typing_lines, lazy_lines = _type_checking_lines(tree), _lazy_lines(tree)
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
                typing, lazy = node.lineno in typing_lines, node.lineno in lazy_lines
                yield Edge(module.name, target, node.lineno, typing, lazy)


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


# --- no I/O in the pure rooms, nor in what they reach ----------------------------------------


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


def _in_room(rel: str, room: str) -> bool:
    return rel == room or rel.startswith(room.rstrip("/") + "/")


def _runtime_edges(graph: dict[str, list[Edge]], name: str) -> Iterator[Edge]:
    """What importing ``name`` (or calling into it) runs: its imports but the type-only and
    the lazy ones, and the ``__init__`` of each package it is in (line 0)."""
    yield from (edge for edge in graph.get(name, []) if not edge.typing and not edge.lazy)
    parts = name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:end])
        if parent in graph:
            yield Edge(name, parent, 0, typing=False)


def reach(graph: dict[str, list[Edge]], starts: list[str]) -> dict[str, list[Edge]]:
    """Every module ``starts`` reach at run time, each with its shortest chain of imports
    from one of them (``[]`` for a start)."""
    came: dict[str, Edge | None] = dict.fromkeys(starts)
    queue = deque(starts)
    while queue:
        node = queue.popleft()
        for edge in _runtime_edges(graph, node):
            if edge.target not in came:
                came[edge.target] = edge
                queue.append(edge.target)
    chains: dict[str, list[Edge]] = {}
    for name in came:
        chain: list[Edge] = []
        node = name
        while (step := came[node]) is not None:
            chain.append(step)
            node = step.source
        chains[name] = chain[::-1]
    return chains


def _reach_chain(chain: list[Edge]) -> str:
    steps = [chain[0].source]
    for edge in chain:
        steps.append(f"-> {edge.target} ({f'line {edge.line}' if edge.line else 'its package'})")
    return " ".join(steps)


def impure(root: Path, rooms: tuple[str, ...], packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """What in each of ``rooms`` (a folder or one module), or in any module it reaches, does
    I/O, reads the clock or is one of the gateway's shells: ``room: path:line: what``, after
    the chain of imports that reaches it from the room."""
    known = modules(root, packages)
    graph = {name: sorted(imports(m, known), key=lambda e: e.line) for name, m in known.items()}
    uses: dict[str, list[str]] = {}
    found: list[str] = []
    for room in rooms:
        starts = [
            n for n, m in known.items() if _in_room(m.path.relative_to(root).as_posix(), room)
        ]
        for name, chain in sorted(reach(graph, starts).items()):
            rel = known[name].path.relative_to(root)
            how = f" (reached: {_reach_chain(chain)})" if chain else ""
            if name not in uses:
                uses[name] = io_uses(known[name].path)
            if _banned_module(name):
                found.append(f"{room}: {rel}: a shell{how}")
            found += [f"{room}: {rel}:{use}{how}" for use in uses[name]]
    return found


def sql_uses(path: Path) -> list[tuple[int, str]]:
    """Each import of a SQL driver in one module, anywhere in it: (line, module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if any(name == m or name.startswith(m + ".") for m in SQL_MODULES + ENGINE_MODULES):
                found.append((node.lineno, name))
    return sorted(found)


def sql_outside_homes(
    root: Path, rooms: tuple[str, ...], homes: tuple[str, ...] = SQL_HOMES
) -> list[str]:
    """Each SQL driver imported in ``rooms`` outside the store modules ``homes``."""
    found: list[str] = []
    for path in _sources(root, *rooms):
        rel = path.relative_to(root).as_posix()
        if any(_in_room(rel, home) for home in homes):
            continue
        found += [f"{rel}:{line}: {name}" for line, name in sql_uses(path)]
    return found


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


def functions_over(root: Path, rooms: tuple[str, ...], longest: int = LONGEST) -> list[str]:
    """Each function over ``longest`` lines in ``rooms``: ``path:line name: n lines``."""
    return [
        f"{_where(root, p, line)} {name}: {lines} lines"
        for p in _sources(root, *rooms)
        for line, name, lines in long_functions(p, longest)
    ]


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


def _sources(root: Path, *rooms: str) -> list[Path]:
    """The modules of ``rooms``, each a folder or one module."""
    found: list[Path] = []
    for room in rooms:
        where = root / room
        found += [where] if where.suffix == ".py" else sorted(where.rglob("*.py"))
    return found


def _where(root: Path, path: Path, line: int) -> str:
    return f"{path.relative_to(root)}:{line}"


# --- the rules, on this repository ---------------------------------------------------------------


def test_no_import_cycle_among_collie_gateway_wire_push_and_bridges() -> None:
    found = cycles(import_graph(REPO))
    assert not found, f"{len(found)} import circles:\n" + "\n".join(found)


def test_the_pure_rooms_reach_no_io_nor_read_the_clock() -> None:
    assert (REPO / CORE).is_dir(), f"{CORE}/ does not exist: the pure decisions have no room yet"
    for room in PURE_ROOMS:
        assert _sources(REPO, room), f"{room} holds no module (renamed? update PURE_ROOMS)"
    found = impure(REPO, PURE_ROOMS)
    assert not found, "I/O, a shell or a clock read in a pure room or its reach:\n" + "\n".join(
        found
    )


def test_no_function_over_80_lines() -> None:
    found = functions_over(REPO, LONG_FUNCTION_ROOMS)
    assert not found, f"{len(found)} functions over {LONGEST} lines:\n" + "\n".join(found)


def test_sql_only_in_the_store_modules() -> None:
    found = sql_outside_homes(REPO, SQL_ROOMS)
    assert not found, (
        f"{len(found)} SQL imports outside the store modules {', '.join(SQL_HOMES)}:\n"
        + "\n".join(found)
    )


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


def test_impure_follows_what_a_pure_room_reaches(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/core/__init__.py": "",
            "pkg/core/a.py": "from typing import TYPE_CHECKING\nfrom pkg.util import f\n"
            "if TYPE_CHECKING:\n    from pkg import shell\n",
            "pkg/core/b.py": "from pkg.lazy import thing\nimport pkg.deep\n",
            "pkg/core/c.py": "from collie_gateway.store import rows\n",
            "pkg/util.py": "import pkg.lib.pure\ndef f() -> None: ...\n",
            "pkg/lib/__init__.py": "import asyncio\n",
            "pkg/lib/pure.py": "",
            "pkg/lazy/__init__.py": "def __getattr__(name: str) -> object:\n"
            "    from pkg import shell\n    return shell\n",
            "pkg/deep.py": "def f() -> None:\n    import pkg.shell\n",
            "pkg/shell.py": "import socket\nimport time\ntime.time()\n",
            "collie_gateway/__init__.py": "",
            "collie_gateway/store/__init__.py": "",
            "collie_gateway/store/rows.py": "",
        },
    )
    assert impure(root, ("pkg/core", "pkg/lib/pure.py"), ("pkg", "collie_gateway")) == [
        "pkg/core: collie_gateway/store/__init__.py: a shell (reached: pkg.core.c"
        " -> collie_gateway.store.rows (line 1) -> collie_gateway.store (its package))",
        "pkg/core: collie_gateway/store/rows.py: a shell (reached: pkg.core.c"
        " -> collie_gateway.store.rows (line 1))",
        "pkg/core: pkg/core/c.py:1: from collie_gateway.store import …",
        "pkg/core: pkg/lib/__init__.py:1: import asyncio (reached: pkg.core.a"
        " -> pkg.util (line 2) -> pkg.lib.pure (line 1) -> pkg.lib (its package))",
        "pkg/core: pkg/shell.py:1: import socket (reached: pkg.core.b -> pkg.deep (line 2)"
        " -> pkg.shell (line 2))",
        "pkg/core: pkg/shell.py:3: time.time (reached: pkg.core.b -> pkg.deep (line 2)"
        " -> pkg.shell (line 2))",
        "pkg/lib/pure.py: pkg/lib/__init__.py:1: import asyncio (reached: pkg.lib.pure"
        " -> pkg.lib (its package))",
    ]


def test_functions_over_the_limit_are_found_in_each_room(tmp_path: Path) -> None:
    def function(name: str, lines: int) -> str:
        return f"def {name}() -> None:\n" + "".join(f"    x = {i}\n" for i in range(lines - 1))

    root = _tree(
        tmp_path,
        {
            "bridges/acp/bridge.py": function("fits", 80) + function("run", 81),
            "bridges/kit/cli.py": "class Cli:\n    " + function("main", 90).replace("\n", "\n    "),
            "wire/agent/_agent.py": function("serve", 80),
            "elsewhere/m.py": function("long", 200),
        },
    )
    assert functions_over(root, ("bridges", "wire/agent")) == [
        "bridges/acp/bridge.py:81 run: 81 lines",
        "bridges/kit/cli.py:2 main: 90 lines",
    ]


def test_sql_outside_the_store_modules_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "collie_gateway/store/db.py": "import sqlite3\nimport aiosqlite\n",
            "collie_gateway/services/rows.py": "import sqlite3.dbapi2\nimport sqlite3_tools\n",
            "collie_gateway/workers.py": "from collie_gateway.store.pg.leases import Leases\n",
            "collie_gateway/store/stores.py": "from collie_gateway.store.pg import database\n",
            "wire/agent/_store.py": "import aiosqlite\n",
            "wire/agent/_agent.py": "def f() -> None:\n    import aiosqlite\n",
            "bridges/kit/state.py": "import sqlite3\n",
            "bridges/acp/bridge.py": "from psycopg import sql\nfrom psycopg_pool import x\n",
            "elsewhere/m.py": "import sqlite3\n",
        },
    )
    assert sql_outside_homes(root, ("collie_gateway", "wire", "bridges")) == [
        "collie_gateway/services/rows.py:1: sqlite3.dbapi2",
        "collie_gateway/workers.py:1: collie_gateway.store.pg.leases",
        "wire/agent/_agent.py:2: aiosqlite",
        "bridges/acp/bridge.py:1: psycopg",
    ]
