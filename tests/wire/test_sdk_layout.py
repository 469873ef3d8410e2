"""The SDK's rooms, read from the source with ``ast``: its decisions (``_rules``) do no I/O and
import none of the shells, its SQL is in ``_store`` alone, and no function is over 80 lines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_structure import REPO, io_uses, long_functions

SDK = REPO / "wire" / "agent"
PURE = ("_rules.py", "_state.py")  # held to no I/O import (ruff's TID251 too)
SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|PRAGMA|BEGIN|COMMIT)\b", re.I)


def _sources() -> list[Path]:
    return sorted(SDK.glob("*.py"))


def test_the_pure_rooms_do_no_io_and_read_no_clock() -> None:
    found = [f"{name}: {use}" for name in PURE for use in io_uses(SDK / name)]
    assert not found, "\n".join(found)


def test_the_rules_import_nothing_of_the_sdk_but_the_wire() -> None:
    tree = ast.parse((SDK / "_rules.py").read_text(encoding="utf-8"))
    names = [
        node.module or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0
    ]
    assert [n for n in names if n.startswith("wire.agent")] == []


def _sql_uses(path: Path) -> list[str]:
    """Each import of SQLite and each SQL statement written in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = {a.name for a in node.names} | {getattr(node, "module", None) or ""}
            if {"sqlite3", "aiosqlite"} & names:
                found.append(f"{path.name}:{node.lineno} imports SQLite")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.match(node.value):
            found.append(f"{path.name}:{node.lineno} {node.value[:40]!r}")
    return found


def test_sql_is_written_in_the_store_alone() -> None:
    assert _sql_uses(SDK / "_store.py"), "the store holds the SDK's SQL"
    found = [use for path in _sources() if path.name != "_store.py" for use in _sql_uses(path)]
    assert not found, "\n".join(found)


def test_no_function_over_80_lines_in_the_sdk() -> None:
    found = [
        f"{p.name}:{line} {name} ({n})" for p in _sources() for line, name, n in long_functions(p)
    ]
    assert not found, "\n".join(found)
