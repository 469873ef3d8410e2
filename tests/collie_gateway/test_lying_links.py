"""Links that lie (issue 9.9, C2): a link whose label names another host than its target,
whose label holds a bidi override, or whose host is not plain ASCII shows its real host (in
punycode) beside the label — in Markdown and in link items, through the phone API."""

from __future__ import annotations

import pytest

from collie_gateway.core.markdown import render
from tests.collie_gateway.conftest import Rig
from tests.collie_gateway.test_chat_http import chat, seen_by_gateway, start

REL = 'rel="noopener noreferrer nofollow"'

LIES = [
    (
        "[https://accounts.example.com/reset](https://evil.example/reset)",
        f'<a href="https://evil.example/reset" {REL}>https://accounts.example.com/reset</a>'
        " (evil.example)",
    ),
    (
        "[paypal.com](https://paypa1.example/)",
        f'<a href="https://paypa1.example/" {REL}>paypal.com</a> (paypa1.example)',
    ),
    (
        "[\u202emoc.lapyap//:sptth](https://evil.example)",
        f'<a href="https://evil.example" {REL}>\u202emoc.lapyap//:sptth</a> (evil.example)',
    ),
    (
        "<https://xn--pypal-4ve.com>",
        f'<a href="https://xn--pypal-4ve.com" {REL}>https://p\u0430ypal.com</a>'
        " (xn--pypal-4ve.com)",
    ),
    (
        "[see *paypal.com*](https://evil.example)",
        f'<a href="https://evil.example" {REL}>see <em>paypal.com</em></a> (evil.example)',
    ),
]
TRUE = [
    "[docs](https://docs.python.org/3/)",
    "[example.com](https://www.example.com/a)",
    "<https://example.com/a>",
    "[https://example.com/b](https://example.com/b)",
    "[v1.2 notes](https://example.com/notes)",
]


@pytest.mark.parametrize(("source", "html"), LIES)
def test_C2_a_link_that_lies_shows_its_real_host(source: str, html: str) -> None:
    assert render(source) == f"<p>{html}</p>\n"


@pytest.mark.parametrize("source", TRUE)
def test_C2_a_true_link_shows_no_host(source: str) -> None:
    html = render(source)
    assert html.endswith("</a></p>\n"), html


async def test_C2_lying_links_through_the_chat(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig)
    await chat(client)
    await conv.append(kind="markdown", text="Reset it: [paypal.com](https://paypa1.example/)")
    await conv.append(kind="link", url="https://paypa1.example/", label="paypal.com")
    await conv.append(kind="link", url="https://p\u0430ypal.com/login", label="PayPal")
    await conv.append(kind="link", url="https://example.com/a", label="example.com")
    await seen_by_gateway(gw, conv, "done")
    md, lying, idn, true = (await chat(client))["lines"]
    assert md["html"].endswith("paypal.com</a> (paypa1.example)</p>\n")
    assert (lying["label"], lying["host"]) == ("paypal.com", "paypa1.example")
    assert (idn["url"], idn["host"]) == ("https://xn--pypal-4ve.com/login", "xn--pypal-4ve.com")
    assert "host" not in true
