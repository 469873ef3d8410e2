"""docs/spec-ids.md stays true: every id once, every path there, code that names the id, and
tests named after it; its "What is done" table names every id once too."""

from __future__ import annotations

import re
from pathlib import Path

from fixtures.agents.harness import REPO

PAGE = REPO / "docs" / "spec-ids.md"
ROW = re.compile(r"^\| ([A-Z]\d+) \| (.+?) \| (.+?) \| (.+?) \|$", re.M)
PATH = re.compile(r"`([\w./]+\.py)`")
FAMILIES = {"D": 10, "G": 2, "L": 8, "A": 8, "T": 1, "R": 5, "C": 6, "H": 3, "B": 3, "N": 3}
FAMILIES |= {"P": 3, "X": 1, "V": 2, "W": 4, "S": 9}
PROVED_BY_OTHERS = {"S9"}  # its limits are the S1, S5, S6 and S7 tests' subject


def _resolve(path: str, default: str) -> Path:
    if path.startswith("views/"):
        return REPO / "collie_gateway" / path
    return REPO / (path if "/" in path else f"{default}/{path}")


def _names(text: str, spec_id: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9]){spec_id}(?![0-9])", text) is not None


def test_every_id_once_with_its_code_and_tests() -> None:
    glossary = PAGE.read_text(encoding="utf-8").split("\n## What is done\n", 1)[0]
    rows = ROW.findall(glossary)
    ids = [r[0] for r in rows]
    expected = [f"{family}{n}" for family, count in FAMILIES.items() for n in range(1, count + 1)]
    expected.append("S0")  # people-in-the-loop counts from S0
    assert sorted(ids) == sorted(expected)
    problems: list[str] = []
    for spec_id, meaning, code, tests in rows:
        if not meaning.endswith("."):
            problems.append(f"{spec_id}: the meaning is no sentence")
        for path in PATH.findall(code):
            source = _resolve(path, "collie_gateway")
            if not source.is_file():
                problems.append(f"{spec_id}: no file {path}")
            elif not spec_id.startswith("S") and not _names(source.read_text("utf-8"), spec_id):
                problems.append(f"{spec_id}: {path} does not name it")
        test_paths = PATH.findall(tests)
        for path in test_paths:
            if not _resolve(path, "tests/collie_gateway").is_file():
                problems.append(f"{spec_id}: no test file {path}")
        named = rf"def test_\w*?(?<![A-Za-z0-9]){spec_id}(?![0-9])"
        if test_paths and not spec_id.startswith("S"):
            first = _resolve(test_paths[0], "tests/collie_gateway").read_text(encoding="utf-8")
            if not re.search(named, first):
                problems.append(f"{spec_id}: no test named after it in {test_paths[0]}")
        elif test_paths and spec_id not in PROVED_BY_OTHERS:
            # An adopted guarantee: one of its test files at least names it.
            texts = [_resolve(p, "tests/collie_gateway").read_text("utf-8") for p in test_paths]
            if not any(re.search(named, text) for text in texts):
                problems.append(f"{spec_id}: no test named after it in {', '.join(test_paths)}")
    assert problems == []


def _ids_in(cell: str) -> list[str]:
    """The ids a cell of "What is done" names: ``D1–D10`` is ten, ``G1, G2`` two."""
    found: list[str] = []
    for family, first, last in re.findall(r"\b([A-Z])(\d+)(?:–[A-Z](\d+))?\b", cell):
        found += [f"{family}{n}" for n in range(int(first), int(last or first) + 1)]
    return found


def test_the_what_is_done_table_names_every_id_once() -> None:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("\n## What is done\n", 1)[1].split("\n## ", 1)[0]
    first_cells = re.findall(r"^\| (.+?) \|", section, re.M)
    ids = [i for cell in first_cells for i in _ids_in(cell)]
    page = [r[0] for r in ROW.findall(text.split("\n## What is done\n", 1)[0])]
    assert sorted(ids) == sorted(page)
