"""The web companion shows what the phone API shows, in a real browser (Debian's Chromium
driven by Playwright) against a real gateway on a loopback port and SDK agents on real sockets.

A permission card draws its call as the API's card has it (S1): each argument with its origin
in words, the reasons verbatim, the irreversible warning; a secret in an argument stays masked
(X1). An agent whose link is down says why on its screen, in its home header's words (D6), and
one refused for its wire version says so once (R5). Every string is checked against the API's
own answer for the same thing, and axe finds nothing serious on those screens.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio
from playwright.async_api import Browser, Locator, Page, expect

from collie_gateway.core.redact import MASK
from collie_gateway.settings import Settings
from collie_gateway.sources import Source
from collie_gateway.strings import Catalogue
from fixtures.browser import LiveGateway
from tests.collie_gateway import browser_scene as scene
from tests.collie_gateway.conftest import FAST, Rig, eventually
from tests.collie_gateway.test_web import (
    PERMISSION,
    SHOTS,
    TOOL,
    Site,
    no_errors,
    open_chat,
    open_page,
    serious_violations,
    shot,
    site,
)
from wire.agent import Argument

pytestmark = scene.LOOP  # one Chromium for the module's tests, and their fixtures:
chromium, browser, rig, closing = scene.chromium, scene.browser, scene.rig, scene.closing

CHAT = "api/v1/agents/desk/conversations/c1"
ARGUMENTS = [
    Argument(name="amount", value=40, origin="typed"),
    Argument(name="order_id", value="4411", origin="reply"),
    Argument(name="customer", value="c-208", origin="context"),
    Argument(name="total", value=40.5, origin="computed"),
    Argument(name="card", value="visa-0019", origin="result:lookup_customer"),
    Argument(name="memo", value="Thanks!", origin="model"),
    Argument(name="split", value={"parts": [1, 2], "ok": True}, origin="agent"),
]
REASONS = ["argument_origin: amount", "tainted_call: untrusted:read_inbox"]
STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dcQ"  # a planted secret the redactor masks (X1)
CURL = f"curl -H 'Authorization: Bearer {STRIPE}' https://api.example.test/v1/charges"
WORDS = Catalogue()


async def api_json(live: LiveGateway, path: str) -> Any:
    """GET ``path`` of the phone API, as any phone on loopback reads it."""
    async with aiohttp.ClientSession() as http, http.get(live.url + path) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def api_card(live: LiveGateway, ask_id: str) -> dict[str, Any]:
    chat = await api_json(live, CHAT + "?all_cards=true")
    card: dict[str, Any] = next(c for c in chat["cards"]["cards"] if c["ask_id"] == ask_id)
    return card


async def asked(rig: Rig, closing: Any, title: str, **ask: Any) -> tuple[Site, dict[str, Any]]:
    """The site with the permission ask ``p`` raised in ``c1``, and the API's card for it."""
    s = await site(rig, closing)
    await s.conv.ask(id="p", kind="permission", title=title, tool=TOOL, options=PERMISSION, **ask)
    await eventually(lambda: s.gw.agents.find_ask("desk", "p") is not None)
    return s, await api_card(s.live, "p")


async def axe_clean(page: Page, name: str) -> list[str]:
    """axe's serious findings on the page in light and in dark (a screenshot of each)."""
    found: list[str] = []
    for scheme in ("light", "dark"):
        await page.emulate_media(color_scheme=scheme)
        found += [f"{name} {scheme}: {v}" for v in await serious_violations(page)]
        SHOTS.mkdir(parents=True, exist_ok=True)
        await shot(page, f"{name}-{scheme}")
    return found


async def shows_call_of(card: Locator, api: dict[str, Any]) -> None:
    """The drawn card holds every string of the API card's call, each in its place."""
    call = api["call"]
    drawn = card.locator(".call")
    await expect(drawn.locator("h4")).to_have_text([call["arguments_title"], call["reasons_title"]])
    rows = drawn.locator(".argument")
    await expect(rows).to_have_count(len(call["arguments"]))
    for n, arg in enumerate(call["arguments"]):
        await expect(rows.nth(n).locator("dt")).to_have_text(arg["name"])
        await expect(rows.nth(n).locator(".value")).to_have_text(arg["value"])
        await expect(rows.nth(n).locator(".origin")).to_have_text(arg["origin_label"])
    await expect(drawn.locator(".reasons li")).to_have_text(call["reasons"])
    await expect(drawn.locator(".irreversible")).to_have_text(call["irreversible"])


# --- S1: the call as the API's card has it ----------------------------------------------------


async def test_S1_a_permission_card_shows_each_argument_its_origin_the_reasons_and_the_warning(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s, api = await asked(
        rig, closing, "Run charge_card?", arguments=ARGUMENTS, reasons=REASONS, irreversible=True
    )
    call = api["call"]
    # The API's words, the catalogue's: what the page must show and not word again.
    assert call["arguments_title"] == WORDS["argumentsTitle"]
    assert call["reasons_title"] == WORDS["reasonsTitle"]
    assert call["irreversible"] == WORDS["irreversible"]
    assert call["reasons"] == REASONS
    assert [a["origin_label"] for a in call["arguments"]] == [
        WORDS[f"origin_{o}"]
        for o in ("typed", "reply", "context", "computed", "result", "model", "agent")
    ]
    page = await open_chat(browser, s)
    card = page.locator("article.card[data-ask=p]")
    await shows_call_of(card, api)
    # Read in order: the question, what it will use and why, then the answers.
    order = await card.evaluate(
        "c => [...c.children].map(e => e.className || e.tagName.toLowerCase())"
    )
    assert order.index("call") < order.index("choices")
    await expect(card.get_by_role("note").filter(has_text=call["irreversible"])).to_be_visible()
    assert await axe_clean(page, "permission-call") == []
    no_errors(page)


async def test_S1_an_origin_with_no_words_shows_the_agents_own_and_a_plain_ask_no_call(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s, api = await asked(
        rig, closing, "Run sync?", arguments=[Argument(name="cc", value="team", origin="calendar")]
    )
    await s.conv.ask(id="plain", kind="permission", title="Run ls?", options=PERMISSION)
    await eventually(lambda: s.gw.agents.find_ask("desk", "plain") is not None)
    [arg] = api["call"]["arguments"]
    assert (arg["origin"], arg["origin_label"]) == ("calendar", None)
    assert (await api_card(s.live, "plain"))["call"] is None
    page = await open_chat(browser, s)
    card = page.locator("article.card[data-ask=p]")
    await expect(card.locator(".argument .origin")).to_have_text("calendar")
    await expect(card.locator("h4")).to_have_text([api["call"]["arguments_title"]])
    await expect(card.locator(".irreversible")).to_have_count(0)  # it can be undone
    await expect(page.locator("article.card[data-ask=plain] .call")).to_have_count(0)
    shown = await page.inner_text("main")
    assert not re.search(r"\b(null|undefined|NaN)\b", shown), shown
    no_errors(page)


# --- X1: a secret in an argument stays masked -------------------------------------------------


async def test_X1_S1_a_secret_in_an_argument_shows_masked_as_the_api_masks_it(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    command = Argument(name="command", value=CURL, origin="model")
    reasons = [f"tainted_call: {STRIPE}", "write"]
    s, api = await asked(
        rig, closing, "Run shell?", arguments=[command], reasons=reasons, irreversible=True
    )
    [arg] = api["call"]["arguments"]
    secret = STRIPE[len("sk_live_") :]
    assert secret not in arg["value"]
    assert f"Bearer sk_live_{MASK}' https://api.example.test" in arg["value"]  # the rest shows
    assert all(secret not in r for r in api["call"]["reasons"])
    page = await open_chat(browser, s)
    card = page.locator("article.card[data-ask=p]")
    await shows_call_of(card, api)
    await expect(card.locator(".notice")).to_have_text(api["notices"])
    for part in (await page.content(), await page.inner_text("body")):
        assert secret not in part
        assert secret[:8] not in part
    assert await axe_clean(page, "permission-secret") == []
    no_errors(page)


# --- D6, R5: an agent's screen says why its link is down ----------------------------------------


async def started(rig: Rig, sources: list[Source]) -> LiveGateway:
    """A live gateway following ``sources``, started (the caller closes it)."""
    live = LiveGateway(
        Settings(sources=sources, db_path=rig.tmp / "gateway.db", timing=FAST, clock=rig.clock)
    )
    await live.start()
    return live


@contextlib.asynccontextmanager
async def silent_socket(path: Path) -> AsyncIterator[None]:
    """A Unix socket that takes connections and never answers (an agent that hangs)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # until the gateway gives up and closes

    server = await asyncio.start_unix_server(hold, path)
    try:
        yield
    finally:
        server.close()
        for writer in held:
            writer.close()
        await server.wait_closed()


@pytest_asyncio.fixture(loop_scope="module")
async def down(rig: Rig) -> AsyncIterator[LiveGateway]:
    """A gateway following ``locked`` (refuses the gateway's token), ``gone`` (nothing
    serves its socket), ``silent`` (takes the connection, never answers) and ``old`` (speaks
    wire v2)."""
    locked = rig.agent("locked", runtime="desk", token="the-right-one")
    old = rig.agent("old", runtime="desk", features=["history"], wire_version=2)
    async with silent_socket(rig.tmp / "silent.sock"):
        sources = [
            Source(name="locked", url=await rig.serve_tcp("locked", locked), token="wrong"),
            Source(name="gone", socket=rig.tmp / "gone.sock"),
            Source(name="silent", socket=rig.tmp / "silent.sock"),
            Source(name="old", socket=await rig.serve("old", old)),
        ]
        live = await started(rig, sources)
        try:
            yield live
        finally:
            await live.close()


async def home_when(live: LiveGateway, agent: str, **expected: Any) -> dict[str, Any]:
    """The agent's home header (``GET /api/v1/agents/{agent}``), once it has ``expected``."""
    homes: list[dict[str, Any]] = []

    async def there() -> bool:
        homes.append(await api_json(live, f"api/v1/agents/{agent}"))
        return all(homes[-1][k] == v for k, v in expected.items())

    await eventually(there, within=15)
    return homes[-1]


async def says_once(page: Page, text: str) -> None:
    shown: str = await page.inner_text("main")
    assert shown.count(text) == 1, shown


async def test_D6_an_unreachable_agents_screen_says_why_as_its_home_header_does(
    rig: Rig, browser: Browser, down: LiveGateway
) -> None:
    refused = await home_when(down, "locked", state="unreachable")
    gone = await home_when(down, "gone", state="unreachable")
    silent = await home_when(down, "silent", state="unreachable")
    assert refused["reason"] == WORDS["agent_unauthorized"]
    assert gone["reason"] == silent["reason"] == WORDS["error_no_answer"]
    page = await open_page(browser, down.url)
    await expect(page.locator("li[data-agent=silent] .state-label")).to_have_text(
        WORDS["state_unreachable"]
    )
    found: list[str] = []
    for name, home in (("locked", refused), ("gone", gone), ("silent", silent)):
        await page.locator(f"li[data-agent={name}] a").click()
        await expect(page.get_by_role("heading", name=name)).to_be_visible()
        link = page.get_by_role("status").filter(has_text=home["reason"])
        await expect(link.locator("strong")).to_have_text(WORDS["state_unreachable"])
        await expect(link.locator("p")).to_have_text(home["reason"])
        await says_once(page, home["reason"])
        found += await axe_clean(page, f"unreachable-{name}")
        await page.get_by_role("link", name="Back").click()
    assert found == []
    no_errors(page)


async def test_R5_an_agent_refused_for_its_version_says_its_home_warning_once(
    rig: Rig, browser: Browser, down: LiveGateway
) -> None:
    home = await home_when(down, "old", state="version_mismatch")
    assert home["reason"] is None
    assert home["warning"]
    page = await open_page(browser, down.url + "#/a/old")
    await expect(page.get_by_role("alert")).to_have_text(home["warning"])
    await says_once(page, home["warning"])
    await expect(page.locator("#link-state")).to_have_count(0)  # no link reason: it answered
    assert await axe_clean(page, "version-refused") == []
    no_errors(page)


async def test_D6_the_screen_shown_says_why_when_the_link_goes_down_each_reason_and_not_once_back(
    rig: Rig, browser: Browser, closing: list[LiveGateway]
) -> None:
    agent = rig.agent("desk", runtime="desk", features=["history"], token="one")
    url = await rig.serve_tcp("desk", agent)
    await agent.open_conversation("c1", title="Tidy up")
    live = await started(rig, [Source(name="desk", url=url, token="one")])
    closing.append(live)
    await home_when(live, "desk", state="ready")
    page = await open_page(browser, live.url + "#/a/desk")
    row = page.get_by_role("link", name=re.compile("Tidy up"))
    await row.focus()  # a keyboard person on the row keeps their place through the redraw
    await page.evaluate("window.__same = 1")
    await expect(page.locator("#link-state")).to_have_count(0)
    port = int(url.rsplit(":", 1)[1])

    async def serve_with(token: str) -> None:  # the agent restarted with another token
        await rig.stop("desk")
        again = rig.agent("desk", runtime="desk", features=["history"], token=token)
        rig.runners["desk"] = await again.serve_tcp("127.0.0.1", port)

    await serve_with("two")
    refused = WORDS["agent_unauthorized"]
    home = await home_when(live, "desk", state="unreachable", reason=refused)
    link = page.get_by_role("status").filter(has_text=home["reason"])
    await expect(link).to_contain_text(WORDS["state_unreachable"])  # without a reload
    await expect(row).to_be_focused()
    await says_once(page, home["reason"])
    # Still Unreachable, for another reason: the agent is gone now. The screen says the new one.
    await rig.stop("desk")
    home = await home_when(live, "desk", state="unreachable", reason=WORDS["error_no_answer"])
    await expect(page.locator("#link-state p")).to_have_text(home["reason"])
    await says_once(page, home["reason"])
    await serve_with("one")
    await home_when(live, "desk", state="ready")
    await expect(page.locator("#link-state")).to_have_count(0)
    assert await page.evaluate("window.__same") == 1  # the same page all along: no reload
    no_errors(page)
