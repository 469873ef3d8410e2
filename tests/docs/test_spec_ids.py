"""docs/spec-ids.md stays true (issue 11.4): every id once, every path there, code that names
the id, and tests named after it."""

from __future__ import annotations

import re
from pathlib import Path

from fixtures.agents.harness import REPO

PAGE = REPO / "docs" / "spec-ids.md"
ROW = re.compile(r"^\| ([A-Z]\d+) \| (.+?) \| (.+?) \| (.+?) \|$", re.M)
PATH = re.compile(r"`([\w./]+\.py)`")
FAMILIES = {"D": 10, "G": 2, "L": 8, "A": 8, "T": 1, "R": 5, "C": 6, "H": 3, "B": 3, "N": 3}
FAMILIES |= {"P": 3, "X": 1, "V": 2, "W": 4, "S": 9}


def _resolve(path: str, default: str) -> Path:
    if path.startswith("views/"):
        return REPO / "collie_gateway" / path
    return REPO / (path if "/" in path else f"{default}/{path}")


def _names(text: str, spec_id: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9]){spec_id}(?![0-9])", text) is not None


def test_every_id_once_with_its_code_and_tests() -> None:
    rows = ROW.findall(PAGE.read_text(encoding="utf-8"))
    ids = [r[0] for r in rows]
    expected = [f"{family}{n}" for family, count in FAMILIES.items() for n in range(1, count + 1)]
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
        if test_paths and not spec_id.startswith("S"):
            first = _resolve(test_paths[0], "tests/collie_gateway").read_text(encoding="utf-8")
            if not re.search(rf"def test_\w*?(?<![A-Za-z0-9]){spec_id}(?![0-9])", first):
                problems.append(f"{spec_id}: no test named after it in {test_paths[0]}")
    assert problems == []
