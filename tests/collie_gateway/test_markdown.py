"""Markdown rendering for the chat (spec C2) against the hostile corpus in fixtures/markdown/."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it.token import Token

from collie_gateway.core.markdown import (
    _MD,
    ALLOWED_ATTRIBUTES,
    ALLOWED_TAGS,
    LINK_REL,
    MAX_NESTING,
    MAX_SOURCE_CHARS,
    render,
    safe_link,
)

HOSTILE: list[dict[str, str]] = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "markdown" / "hostile.json").read_text("utf-8")
)
VOID = frozenset({"br", "hr"})
LANGUAGE_CLASS = re.compile(r"language-[A-Za-z0-9_+#.-]{1,32}")


class _Checker(HTMLParser):
    """Collects every way an HTML string breaks the chat's allowlist."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.tags = 0
        self.depth = 0
        self.max_depth = 0

    def _tag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags += 1
        if tag not in ALLOWED_TAGS:
            self.problems.append(f"tag <{tag}>")
        allowed = ALLOWED_ATTRIBUTES.get(tag, frozenset())
        for name, value in attrs:
            if name not in allowed:
                self.problems.append(f"attribute {name} on <{tag}>")
            elif not _attribute_ok(name, value or ""):
                self.problems.append(f"{name}={value!r} on <{tag}>")
        if tag == "a" and "href" not in dict(attrs):
            self.problems.append("<a> without href")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag(tag, attrs)
        if tag not in VOID:
            self.depth += 1
            self.max_depth = max(self.max_depth, self.depth)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        self.tags += 1
        self.depth -= 1
        if tag not in ALLOWED_TAGS:
            self.problems.append(f"end tag </{tag}>")

    def handle_comment(self, data: str) -> None:
        self.problems.append(f"comment {data!r}")

    def handle_decl(self, decl: str) -> None:
        self.problems.append(f"declaration {decl!r}")

    def handle_pi(self, data: str) -> None:
        self.problems.append(f"processing instruction {data!r}")

    def unknown_decl(self, data: str) -> None:
        self.problems.append(f"declaration {data!r}")


def _attribute_ok(name: str, value: str) -> bool:
    match name:
        case "href":
            return value.startswith("https://") and not re.search(r"[\s\x00-\x1f\x7f]", value)
        case "rel":
            return value == LINK_REL
        case "class":
            return LANGUAGE_CLASS.fullmatch(value) is not None
        case "start":
            return value.isdigit()
    return False


def violations(html: str) -> list[str]:
    """Why ``html`` is not safe chat HTML; empty when it is."""
    checker = _Checker()
    checker.feed(html)
    checker.close()
    problems = checker.problems
    lowered = html.lower()
    problems += [f"contains {s}" for s in ("<script", "<img", "<iframe", "<svg") if s in lowered]
    # Every "<" opens an allowed tag: nothing from the input survived as markup.
    if html.count("<") != checker.tags:
        problems.append(f"{html.count('<')} '<' for {checker.tags} tags")
    if checker.depth != 0:
        problems.append(f"unbalanced tags (depth {checker.depth})")
    if checker.max_depth > 2 * MAX_NESTING + 4:
        problems.append(f"nested {checker.max_depth} deep")
    return problems


def test_corpus_size() -> None:
    assert len(HOSTILE) >= 40


@pytest.mark.parametrize("case", HOSTILE, ids=[c["description"] for c in HOSTILE])
def test_C2_hostile_input_renders_safe(case: dict[str, str]) -> None:
    html = render(case["input"])
    assert violations(html) == []
    if "expect" in case:
        assert html == case["expect"]


@pytest.mark.parametrize(
    ("source", "html"),
    [
        ("# Title", "<h1>Title</h1>\n"),
        ("###### Six", "<h6>Six</h6>\n"),
        ("Sub\n---", "<h2>Sub</h2>\n"),
        ("*em* and **strong**", "<p><em>em</em> and <strong>strong</strong></p>\n"),
        ("_em_ and __strong__", "<p><em>em</em> and <strong>strong</strong></p>\n"),
        ("use `x < y`", "<p>use <code>x &lt; y</code></p>\n"),
        ("- a\n- b", "<ul>\n<li>a</li>\n<li>b</li>\n</ul>\n"),
        ("1. a\n2. b", "<ol>\n<li>a</li>\n<li>b</li>\n</ol>\n"),
        ("3. c\n4. d", '<ol start="3">\n<li>c</li>\n<li>d</li>\n</ol>\n'),
        ("> quoted", "<blockquote>\n<p>quoted</p>\n</blockquote>\n"),
        ("a\n\n---\n\nb", "<p>a</p>\n<hr />\n<p>b</p>\n"),
        ("line  \nbreak", "<p>line<br />\nbreak</p>\n"),
        (
            "```python\nprint('<hi>')\n```",
            "<pre><code class=\"language-python\">print('&lt;hi&gt;')\n</code></pre>\n",
        ),
        ("```\nplain\n```", "<pre><code>plain\n</code></pre>\n"),
        ("    indented", "<pre><code>indented\n</code></pre>\n"),
        (
            "[docs](https://example.com/a?b=1&c=2)",
            f'<p><a href="https://example.com/a?b=1&amp;c=2" rel="{LINK_REL}">docs</a></p>\n',
        ),
        (
            '[t](https://example.com "the title")',
            f'<p><a href="https://example.com" rel="{LINK_REL}">t</a></p>\n',
        ),
        (
            "<https://example.com/x>",
            f'<p><a href="https://example.com/x" rel="{LINK_REL}">https://example.com/x</a></p>\n',
        ),
        (
            "[r][1]\n\n[1]: https://example.com/r",
            f'<p><a href="https://example.com/r" rel="{LINK_REL}">r</a></p>\n',
        ),
        (
            "[up](HTTPS://Example.COM/Path)",
            f'<p><a href="https://example.com/Path" rel="{LINK_REL}">up</a></p>\n',
        ),
        ("[plain](http://example.com)", "<p>[plain](http://example.com)</p>\n"),
        ("<b>bold?</b>", "<p>&lt;b&gt;bold?&lt;/b&gt;</p>\n"),
        ("![chart](ftp://x/y.png)", "<p>![chart](ftp://x/y.png)</p>\n"),
        (
            "![chart](https://example.com/c.png)",
            f'<p><a href="https://example.com/c.png" rel="{LINK_REL}">chart</a></p>\n',
        ),
        (
            "![](https://example.com/c.png)",
            f'<p><a href="https://example.com/c.png" rel="{LINK_REL}">https://example.com/c.png</a>'
            "</p>\n",
        ),
        (
            "![a ![b](https://x.example/b.png) `c`\nd *e*](https://x.example/a.png)",
            f'<p><a href="https://x.example/a.png" rel="{LINK_REL}">a b c d e</a></p>\n',
        ),
        (
            "[![](https://x.example/badge.svg)](https://ci.example)",
            f'<p><a href="https://ci.example" rel="{LINK_REL}">https://ci.example</a></p>\n',
        ),
        (
            "[![build](https://x.example/badge.svg)](https://ci.example)",
            f'<p><a href="https://ci.example" rel="{LINK_REL}">build</a></p>\n',
        ),
    ],
)
def test_C2_markdown_renders(source: str, html: str) -> None:
    assert render(source) == html
    assert violations(html) == []


@pytest.mark.parametrize(
    ("url", "expect"),
    [
        ("https://example.com", "https://example.com"),
        ("  https://example.com/a\n", "https://example.com/a"),
        ("HTTPS://EXAMPLE.com/Keep", "https://example.com/Keep"),
        ("https://example.com:8443/p?q=1#f", "https://example.com:8443/p?q=1#f"),
        ("https://пример.рф/путь", "https://xn--e1afmkfd.xn--p1ai/%D0%BF%D1%83%D1%82%D1%8C"),
        ('https://example.com/"><script>', "https://example.com/%22%3E%3Cscript%3E"),
        ("https://[::1]:8080/x", "https://[::1]:8080/x"),
        ("http://example.com", None),
        ("javascript:alert(1)", None),
        ("JavaScript:alert(1)", None),
        ("data:text/html,<script>", None),
        ("vbscript:msgbox(1)", None),
        ("//example.com/x", None),
        ("/relative/path", None),
        ("example.com", None),
        ("https://", None),
        ("https:///path", None),
        ("https:\\\\evil.example", None),
        ("https://user:pass@example.com", None),
        ("https://example.com@evil.example", None),
        ("https://exa mple.com", None),
        ("https://example.com/\u202ecod.exe", None),
        ("https://example.com/\x00", None),
        ("java\tscript:alert(1)", None),
        ("https://example.com:99999/", None),
        ("https://example.com/" + "a" * 3000, None),
        ("", None),
    ],
)
def test_C2_safe_link(url: str, expect: str | None) -> None:
    assert safe_link(url) == expect


def test_source_is_capped() -> None:
    html = render("a" * (MAX_SOURCE_CHARS * 2))
    assert html == "<p>" + "a" * (MAX_SOURCE_CHARS - 1) + "…</p>\n"


def test_nesting_is_capped() -> None:
    html = render("*" * 3000 + "x" + "*" * 3000 + "\n\n" + ">" * 3000 + " q")
    assert html.count("<strong>") <= MAX_NESTING
    assert html.count("<blockquote>") <= MAX_NESTING
    assert violations(html) == []


def test_images_past_the_nesting_cap_are_dropped() -> None:
    deep = "*" * 60 + "![](https://x.example/i.png)![alt](https://x.example/j.png)" + "*" * 60
    html = render(deep)
    assert "i.png" not in html
    assert "alt" in html
    assert violations(html) == []


def test_raw_html_tokens_would_render_as_text() -> None:
    """Defence in depth: were HTML parsing ever turned on, its tokens render as text."""
    token = Token("html_inline", "", 0, content="<b onclick=x>hi</b>")
    assert _MD.renderer.render([token], _MD.options, {}) == "&lt;b onclick=x&gt;hi&lt;/b&gt;"


# Markdown syntax and hostile pieces, so generated text exercises links, HTML and nesting.
_PIECES = [
    *"[]()<>!*_`#>-~&:;\"'\\\n\t ",
    "```",
    "    ",
    "1. ",
    "- ",
    "> ",
    "](",
    "&#x61;",
    "&colon;",
    "&#0;",
    "javascript:",
    "JaVaScRiPt:",
    "data:",
    "https://a.example",
    "http://b.example",
    "//c.example",
    "<script>",
    "<img src=x onerror=alert(1)>",
    "<!--",
    "-->",
    "<a href=",
    "onclick=",
    "<svg/onload=",
    "\x00",
    "\u202e",
]
_MARKDOWN = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=6)), max_size=40).map(
    "".join
)


@settings(max_examples=400, deadline=None)
@given(_MARKDOWN)
def test_C2_any_text_renders_safe(text: str) -> None:
    assert violations(render(text)) == []


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_C2_safe_link_is_https_or_none(url: str) -> None:
    out = safe_link(url)
    assert out is None or (out.startswith("https://") and safe_link(out) == out)
