"""Markdown to safe HTML for the chat (spec C2): raw HTML shown as text, only https:// links.

Pure: no I/O. markdown-it-py parses CommonMark with HTML off; the token stream is then
rebuilt so the output holds only the tags of ``ALLOWED_TAGS`` and the attributes of
``ALLOWED_ATTRIBUTES``. Images are never loaded: an image becomes its alt text, linked to its
address when that is an https:// link.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.common.normalize_url import normalizeLink
from markdown_it.common.utils import escapeHtml
from markdown_it.token import Token

__all__ = [
    "ALLOWED_ATTRIBUTES",
    "ALLOWED_TAGS",
    "LINK_REL",
    "MAX_NESTING",
    "MAX_SOURCE_CHARS",
    "MAX_URL_CHARS",
    "real_host",
    "render",
    "safe_link",
]

MAX_SOURCE_CHARS: Final = 100_000  # longer text is cut (with "…") before parsing
# markdown-it's CommonMark default: blocks nested deeper are left out, and inline markup
# nested deeper keeps its text but loses its tags.
MAX_NESTING: Final = 20
MAX_URL_CHARS: Final = 2048
# Links open outside the chat without telling the site where they came from. No target:
# how a link opens is the app's choice.
LINK_REL: Final = "noopener noreferrer nofollow"
ALLOWED_TAGS: Final = frozenset(
    {"h1", "h2", "h3", "h4", "h5", "h6", "p", "ul", "ol", "li", "em", "strong", "code", "pre"}
    | {"a", "blockquote", "hr", "br"}
)
ALLOWED_ATTRIBUTES: Final[Mapping[str, frozenset[str]]] = {
    "a": frozenset({"href", "rel"}),
    "code": frozenset({"class"}),  # "language-…" of a fenced block
    "ol": frozenset({"start"}),  # an ordered list's first number ("3. …"); only digits
}
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")
# Categories no link may hold: controls, format characters (bidi overrides, zero widths),
# separators and unassigned or private code points.
_BAD_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})


def safe_link(url: str) -> str | None:
    """Return ``url`` normalised when it is an absolute https:// link, else None.

    Surrounding whitespace is dropped; any other whitespace or control character, a missing
    host, or a user name or password in the address makes the link unsafe.
    """
    url = url.strip()
    if not url or len(url) > MAX_URL_CHARS:
        return None
    if any(unicodedata.category(c) in _BAD_CATEGORIES for c in url):
        return None
    return _https(normalizeLink(url))


def _https(url: str) -> str | None:
    """Check an already normalised URL; return it with scheme and host in lower case."""
    if url[:8].lower() != "https://" or len(url) > MAX_URL_CHARS:
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return None
    if parts.scheme.lower() != "https" or not parts.hostname or "@" in parts.netloc:
        return None
    return "https://" + parts.netloc.lower() + url[8 + len(parts.netloc) :]


# A name in a label that reads as a host: dotted words ending in a letter run ("paypal.com",
# "accounts.example.com", "pаypal.com" with a Cyrillic "а").
_HOST_IN_LABEL: Final = re.compile(r"(?:[^\W_](?:[\w-]*[^\W_])?\.)+[^\W\d_]{2,}")


def real_host(label: str, href: str) -> str | None:
    """The host to show beside a link's label, when the label may lie about where the link
    goes (C2, link items), else None: the target's host is not plain ASCII (an IDN, shown in
    punycode), the label holds a format character (a bidi override can make it read as
    another address), or the label names a host that is neither the target's nor one it
    lies under (``example.com`` for ``www.example.com`` is true)."""
    host = urlsplit(href).hostname or ""
    try:
        ascii_host = host.encode("idna").decode("ascii").lower() if host else ""
    except UnicodeError:
        return host or None
    if not ascii_host.isascii() or any(part.startswith("xn--") for part in ascii_host.split(".")):
        return ascii_host
    if any(unicodedata.category(c) == "Cf" for c in label):
        return ascii_host
    for named in _HOST_IN_LABEL.findall(label):
        try:
            name = named.encode("idna").decode("ascii").lower()
        except UnicodeError:
            return ascii_host
        if name != ascii_host and not ascii_host.endswith("." + name):
            return ascii_host
    return None


class _Markdown(MarkdownIt):
    """CommonMark with raw HTML off and only https:// link destinations."""

    def validateLink(self, url: str) -> bool:
        """Accept a normalised link destination only when it is https://."""
        return _https(url) is not None


def _inline_text(tokens: Sequence[Token]) -> str:
    """Plain text of inline tokens (an image's alt text), with line breaks as spaces."""
    out: list[str] = []
    for tok in tokens:
        if tok.type in ("text", "code_inline", "text_special"):
            out.append(tok.content)
        elif tok.type == "image":
            out.append(_inline_text(tok.children or ()))
        elif tok.type in ("softbreak", "hardbreak"):
            out.append(" ")
    return "".join(out)


def _link_tokens(href: str, label: str, level: int) -> list[Token]:
    opening = Token("link_open", "a", 1, attrs={"href": href}, level=level)
    text = Token("text", "", 0, content=label, level=level + 1)
    closing = Token("link_close", "a", -1, level=level)
    return [opening, text, closing]


def _clean_inline(children: list[Token]) -> list[Token]:
    """Drop unsafe links and too-deep markup, turn images into text or a link, strip attributes.

    A dropped opening tag drops its closing tag too; the text between them stays.
    """
    out: list[Token] = []
    stack: list[bool] = []  # per open tag: whether it is kept
    depth = 0  # open tags kept
    link: str | None = None  # the address of the link we are in
    link_text: list[str] = []  # the text of the link we are in
    for tok in children:
        if link is not None and tok.type in ("text", "code_inline", "text_special"):
            link_text.append(tok.content)
        if tok.nesting == -1:
            if stack and stack.pop():
                out.append(tok)
                depth -= 1
                if tok.type == "link_close" and link is not None:
                    shown = real_host("".join(link_text), link)
                    if shown is not None:  # the label may lie: the real host beside it
                        out.append(Token("text", "", 0, content=f" ({shown})", level=tok.level))
                    link, link_text = None, []
            continue
        if tok.type == "image":
            # Not loaded: its alt text, linked to it when it may be; inside a link with no alt
            # text, the link's own address, so the link stays visible.
            label = _inline_text(tok.children or ())
            src = _https(str(tok.attrs.get("src", "")))
            if src is not None and link is None and depth < MAX_NESTING:
                out.extend(_link_tokens(src, label or src, tok.level))
            elif label or link:
                link_text.append(label)
                out.append(Token("text", "", 0, content=label or str(link), level=tok.level))
            continue
        keep = tok.nesting == 0 or depth < MAX_NESTING
        if tok.type == "link_open":
            href = _https(str(tok.attrs.get("href", "")))
            keep = keep and href is not None and link is None
            tok.attrs = {"href": str(href)}
            link = href if keep else link
        else:
            tok.attrs = {}
        if tok.nesting == 1:
            stack.append(keep)
            depth += keep
        if keep:
            out.append(tok)
    return out


def _clean(tokens: list[Token]) -> list[Token]:
    for tok in tokens:
        if tok.type == "inline":
            tok.children = _clean_inline(tok.children or [])
        elif tok.type == "ordered_list_open":
            start = str(tok.attrs.get("start", ""))
            tok.attrs = {"start": start} if start.isdigit() else {}
        else:
            tok.attrs = {}
    return tokens


def _render_link_open(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    href = escapeHtml(str(tokens[idx].attrs["href"]))
    return f'<a href="{href}" rel="{LINK_REL}">'


def _render_code(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    tok = tokens[idx]
    words = tok.info.split() if tok.type == "fence" else []
    lang = words[0] if words and _LANGUAGE.fullmatch(words[0]) else None
    cls = f' class="language-{escapeHtml(lang)}"' if lang else ""
    return f"<pre><code{cls}>{escapeHtml(tok.content)}</code></pre>\n"


def _render_as_text(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    return escapeHtml(tokens[idx].content)


def _build() -> _Markdown:
    md = _Markdown("commonmark", {"html": False, "maxNesting": MAX_NESTING, "linkify": False})
    md.add_render_rule("link_open", _render_link_open)
    md.add_render_rule("fence", _render_code)
    md.add_render_rule("code_block", _render_code)
    # Never reached (HTML is off and _clean replaces images); text, should that change.
    for name in ("html_block", "html_inline", "image"):
        md.add_render_rule(name, _render_as_text)
    return md


_MD: Final = _build()


def render(text: str) -> str:
    """Render Markdown ``text`` to HTML that uses only the allowed tags and attributes."""
    if len(text) > MAX_SOURCE_CHARS:
        text = text[: MAX_SOURCE_CHARS - 1] + "…"
    env: dict[str, Any] = {}
    tokens = _clean(_MD.parse(text, env))
    html: str = _MD.renderer.render(tokens, _MD.options, env)
    return html
