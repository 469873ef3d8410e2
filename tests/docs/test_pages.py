"""The README and every page of docs/ render as written and read as a newcomer needs: every
code fence closes where it opened, no heading or table falls into code, no paragraph is said
twice, every link to a file of the repository finds it, no page cites an issue number, and
the README stays a short front door."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from fixtures.agents.harness import REPO

README = REPO / "README.md"
PAGES = [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
# Pages other work adds; the README links them before they land (each is checked once there).
PENDING: set[Path] = set()
ISSUE = re.compile(r"\bissues? #?\d|\(issue\b|\bissue's\b", re.I)


def _tokens(page: Path) -> tuple[list[str], list[Token]]:
    text = page.read_text(encoding="utf-8")
    return text.splitlines(), MarkdownIt("commonmark").enable("table").parse(text)


def _covered(tokens: list[Token], kinds: set[str]) -> set[int]:
    """The source lines (0-based) inside blocks of these token types."""
    lines: set[int] = set()
    for token in tokens:
        if token.type in kinds and token.map is not None:
            lines.update(range(*token.map))
    return lines


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings."""
    tokens = _tokens(page)[1]
    titles = [b.content for a, b in itertools.pairwise(tokens) if a.type == "heading_open"]
    return {re.sub(r"[^\w\- ]", "", t.lower()).replace(" ", "-") for t in titles}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_fence_closes_where_it_opened_and_holds_no_heading(page: Path) -> None:
    lines, tokens = _tokens(page)
    for fence in [t for t in tokens if t.type == "fence"]:
        assert fence.map is not None
        start, end = fence.map
        opening, closing = lines[start], lines[end - 1]
        indent = opening[: len(opening) - len(opening.lstrip())]
        assert closing == indent + fence.markup, f"the fence of line {start + 1} never closes"
        headings = [x for x in fence.content.splitlines() if re.match(r"#{2,6} ", x)]
        assert headings == [], f"headings inside the code of line {start + 1}: {headings}"
    assert not [t for t in tokens if t.type == "code_block"], "text indented into code"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_heading_and_table_line_renders_as_one(page: Path) -> None:
    lines, tokens = _tokens(page)
    code = _covered(tokens, {"fence", "code_block"})
    headings = {t.map[0] for t in tokens if t.type == "heading_open" and t.map is not None}
    tables = _covered(tokens, {"table_open"})
    for number, line in enumerate(lines):
        if number in code:
            continue
        if re.match(r"#{1,6} ", line):
            assert number in headings, f"line {number + 1} is no heading: {line}"
        if line.startswith("|"):
            assert number in tables, f"line {number + 1} is in no table: {line}"


def test_the_pages_keep_their_headings() -> None:
    def headings(page: str) -> list[str]:
        tokens = _tokens(REPO / page)[1]
        pairs = itertools.pairwise(tokens)
        return [b.content for a, b in pairs if a.type == "heading_open"]

    assert "A crew: a lead's gateway showing member machines (W1–W4, V2)" in headings(
        "docs/crew.md"
    )
    assert "The folders" in headings("docs/architecture.md")
    assert "Answer bodies (T1, A5)" in headings("docs/phone-api.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_paragraph_is_said_twice(page: Path) -> None:
    _, tokens = _tokens(page)
    said: list[str] = []
    for opening, inline in itertools.pairwise(tokens):
        if opening.type == "paragraph_open" and len(inline.content) > 60:
            said.append(" ".join(inline.content.split()))
    assert {p for p in said if said.count(p) > 1} == set()


def test_the_readme_says_once_where_to_look_and_the_folders_are_said_once() -> None:
    said = README.read_text(encoding="utf-8")
    assert said.count("It prints where to look (") == 1
    folders = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert folders.count("`wire/` the protocol and the agent SDK") == 1


def test_the_readme_is_a_front_door_under_300_lines_with_a_picture() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 300
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text):
        path = REPO / image
        assert path.is_file(), image
        assert path.stat().st_size < 150_000, f"{image} is over 150 KB"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "page",
    [*PAGES, REPO / "bench" / "README.md"],
    ids=lambda p: p.relative_to(REPO).as_posix(),
)
def test_no_page_cites_an_issue_number(page: Path) -> None:
    lines = page.read_text(encoding="utf-8").splitlines()
    cited = [f"{n}: {line}" for n, line in enumerate(lines, 1) if ISSUE.search(line)]
    assert cited == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_link_to_a_file_finds_it_and_its_heading(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            if path not in PENDING:
                missing.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            missing.append(target)
    assert missing == []
