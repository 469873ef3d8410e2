"""The web companion in a real browser (Debian's Chromium driven by Playwright) against a real
gateway on a loopback port and SDK agents on real sockets.

Each test walks the page as a person would: taps, types, waits for what shows. Screenshots
of every screen, light and dark, go to ``COLLIE_WEB_SHOTS`` (default: a temp folder).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, Page, expect

import collie_gateway
from collie_gateway.settings import Settings
from collie_gateway.sources import Source
from collie_gateway.strings import Catalogue
from fixtures.agents import desk as desk_agent
from fixtures.browser import PHONE, LiveGateway
from tests.collie_gateway import browser_scene as scene
from tests.collie_gateway.conftest import FAST, Rig, eventually
from wire.agent import Agent, ConversationHandle, FormField, Option, ToolRef
from wire.messages import CONVERSATION_STATES, FEATURES

pytestmark = scene.LOOP  # one Chromium for the module's tests, and their fixtures:
chromium, browser, rig, closing = scene.chromium, scene.browser, scene.rig, scene.closing
expect.set_options(timeout=10_000)  # a shared 2-core machine: slow, never hung
SHOTS = Path(os.environ.get("COLLIE_WEB_SHOTS") or Path(tempfile.gettempdir()) / "collie-web-shots")
PERMISSION = [
    Option(id="allow", label="Yes, run it", role="allow"),
    Option(id="always", label="Always for ls", role="always"),
    Option(id="deny", label="No", role="deny"),
]
TOOL = ToolRef(call_id="t1", name="shell")
S8_THEME = [  # people-in-the-loop S8: property, light, dark
    ("bg", "#ffffff", "#121212"),
    ("fg", "#1a1a1a", "#f1f1f1"),
    ("muted", "#595959", "#bdbdbd"),
    ("line", "#d0d0d0", "#3c3c3c"),
    ("accent", "#0b57d0", "#8ab4f8"),
    ("accent-fg", "#ffffff", "#0b0b0b"),
    ("warn", "#8a4b00", "#ffb74d"),
    ("bad", "#b3261e", "#f28b82"),
    ("radius", "8px", "8px"),
    ("gap", "12px", "12px"),
    ("font", "system-ui, sans-serif", "system-ui, sans-serif"),
]


class Site:
    """An SDK agent ``desk`` with conversation ``c1`` and a live gateway following it."""

    def __init__(self, rig: Rig, live: LiveGateway, agent: Agent, conv: ConversationHandle):
        self.rig, self.live, self.agent, self.conv = rig, live, agent, conv

    @property
    def gw(self) -> Any:
        assert self.live.gateway is not None
        return self.live.gateway


async def site(
    rig: Rig, closing: list[LiveGateway], *, token: str | None = None, clock: Any = None
) -> Site:
    """The site, its gateway closed with the test (``closing``)."""
    agent = rig.agent("desk", runtime="desk", features=list(FEATURES))
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Tidy up")
    live = await gateway_for(rig, closing, sock, clock=clock or rig.clock, token=token)
    s = Site(rig, live, agent, conv)
    await eventually(lambda: s.gw.mirrors["desk"].state.value == "ready")
    return s


async def gateway_for(
    rig: Rig, closing: list[LiveGateway], sock: Path, **settings: Any
) -> LiveGateway:
    """A started live gateway following the agent ``desk`` on ``sock``, closed with the test."""
    live = LiveGateway(
        Settings(
            sources=[Source(name="desk", socket=sock)],
            db_path=rig.tmp / "gateway.db",
            timing=FAST,
            **settings,
        )
    )
    closing.append(live)
    await live.start()
    return live


async def desk_followed(rig: Rig, closing: list[LiveGateway]) -> tuple[Agent, LiveGateway]:
    """The sample desk agent, served, and a live gateway following it (ready)."""
    agent = desk_agent.build(rig.tmp / "desk.agent.db")
    sock = await rig.serve("desk", agent)
    live = await gateway_for(rig, closing, sock)
    gw = live.gateway
    assert gw is not None
    await eventually(lambda: gw.mirrors["desk"].state.value == "ready")
    return agent, live


async def open_page(browser: Browser, url: str, scheme: str = "light") -> Page:
    context = await browser.new_context(viewport=PHONE, color_scheme=scheme)  # type: ignore[arg-type]
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda d: errors.append("dialog: " + d.message))
    await page.goto(url)
    page_errors[id(page)] = errors
    return page


page_errors: dict[int, list[str]] = {}


async def open_chat(browser: Browser, s: Site) -> Page:
    """A page showing the chat ``c1`` ("Tidy up"), drawn."""
    page = await open_page(browser, s.live.url + "#/a/desk/c/c1")
    await expect(page.get_by_role("heading", name="Tidy up")).to_be_visible()
    return page


def no_errors(page: Page) -> None:
    assert page_errors.get(id(page), []) == []


async def serious_violations(page: Page) -> list[str]:
    """axe-core's serious and critical violations on the page as it is drawn now."""
    results = await Axe().run(page)
    return [
        f"{v['id']}: {v['help']} ({len(v['nodes'])} nodes)"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


async def until(page: Page, expression: str, above: int, what: str) -> None:
    """Wait until the page's ``expression`` is above ``above`` (30 s at most).
    (``wait_for_function`` evaluates a string, which the page's CSP forbids: poll instead.)"""
    for _ in range(1200):
        if await page.evaluate(expression) > above:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(what)


async def goto(page: Page, where: str) -> None:
    """Go to a screen of the page already open (no reload) and wait until it is drawn."""
    before = await page.evaluate("window.collie.drawn")
    await page.evaluate("where => { location.hash = where }", where)
    await until(page, "window.collie.drawn", before, f"{where} not drawn")
    await page.wait_for_timeout(150)  # a screen may draw once more as its events replay


async def shot(page: Page, name: str) -> None:
    await page.screenshot(path=str(SHOTS / f"{name}.png"))


# --- served as a page, same origin, nothing from another host ---------------------------------


async def test_web_page_served_with_csp_small_and_from_the_catalogue(
    rig: Rig, closing: Any
) -> None:
    overrides = {"section_durable_agents": "Agenti durevoli", "send": "Invia"}
    agent = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    live = await gateway_for(rig, closing, sock, catalogue=Catalogue(overrides))
    assert agent is not None
    async with aiohttp.ClientSession() as http:
        async with http.get(live.url) as resp:
            assert resp.status == 200
            csp = resp.headers["Content-Security-Policy"]
            page = await resp.text()
        assert "script-src 'self'" in csp
        assert "style-src 'self'" in csp
        assert "connect-src 'self'" in csp
        assert "default-src 'none'" in csp
        sizes = 0
        for name in ("app.js", "app.css", "push.js", "sw.js", "manifest.webmanifest"):
            async with http.get(live.url + "web/" + name) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Security-Policy"] == csp
                body = await resp.read()
                sizes += len(body)
                assert b"://" not in body, f"{name} names another host"
        assert sizes < 150_000
        async with http.get(live.url + "web/app.css") as resp:
            css = await resp.text()
    # S8's theme table: every property, light and dark defaults; the rules use only properties.
    for name, light, dark in S8_THEME:
        both = light if light == dark else f"light-dark({light}, {dark})"
        assert f"--collie-{name}: {both};" in css, name
    rules = css.split("* { box-sizing: border-box; }")[1].replace("width: 1px; height: 1px;", "")
    assert not re.findall(r"#[0-9a-fA-F]{3,6}\b|\brgb|\d+px", rules)
    async with aiohttp.ClientSession() as http:
        async with http.get(live.url + "web/../app.py") as resp:
            assert resp.status == 404
        async with http.get(live.url + "api/v1/strings") as resp:
            strings = (await resp.json())["strings"]
    # --strings changes the API's catalogue and the page's words alike.
    assert strings["section_durable_agents"] == "Agenti durevoli"
    embedded = re.search(r'id="collie-strings">(.*?)</script>', page, re.S)
    assert embedded is not None
    assert json.loads(embedded.group(1)) == strings
    assert not re.search(
        r"<script(?![^>]*(src=\"/web/(app|push).js\"|type=\"application/json\"))", page
    )


async def test_web_every_word_the_page_draws_is_a_catalogue_key() -> None:
    script = (Path(collie_gateway.__file__).parent / "web" / "app.js").read_text(encoding="utf-8")
    keys = set(re.findall(r"\bt\('([a-z0-9_]+)'[,)]", script))
    prefixes = set(re.findall(r"\bS\['([a-z0-9_]+_)' \+", script))
    texts = Catalogue().texts()
    assert len(keys) > 20
    assert keys - set(texts) == set()
    assert prefixes == {"web_tool_", "web_status_"}
    for prefix in prefixes:  # web_tool_ + a tool status, web_status_ + a conversation state
        assert [k for k in texts if k.startswith(prefix)], prefix
    assert {f"web_status_{s}" for s in CONVERSATION_STATES} <= set(texts)
    assert {f"web_tool_{s}" for s in ("running", "done", "failed", "denied")} <= set(texts)


async def test_web_strings_override_changes_the_drawn_page(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    catalogue = Catalogue({"section_durable_agents": "Agenti durevoli"})
    live = await gateway_for(rig, closing, sock, catalogue=catalogue)
    page = await open_page(browser, live.url)
    await expect(page.get_by_role("heading", name="Agenti durevoli")).to_be_visible()
    no_errors(page)


# --- walk to an ask and answer it (D10, L4, A4, T1) -------------------------------------------


async def test_T1_walk_from_dashboard_to_an_ask_and_answer_it_once(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s = await site(rig, closing)
    ask = await s.conv.ask(
        id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION
    )
    await eventually(lambda: s.gw.agents.find_ask("desk", "p") is not None)
    page = await open_page(browser, s.live.url)
    answers: list[str] = []
    page.on("request", lambda r: answers.append(r.url) if r.url.endswith("/answer") else None)
    row = page.locator("li[data-agent=desk] a")
    await expect(row).to_contain_text("Experimental")
    await expect(row.locator(".count.attention")).to_have_text("1 waiting")  # D5: one waiting
    await row.click()
    await page.get_by_role("link", name=re.compile("Tidy up")).click()
    card = page.locator("article.card[data-ask=p]")
    await expect(card).to_contain_text("Needs your answer · desk")
    await card.get_by_role("button", name=re.compile("^Allow")).dblclick()  # a double tap
    await expect(card).to_have_count(0)  # T1: taken, the card closes
    resolution = await asyncio.wait_for(ask.wait(), 5)
    assert resolution.how == "answered"
    assert resolution.answer is not None
    assert resolution.answer.option == "allow"
    assert len(answers) == 1  # one tap sent, so the agent acts once
    # D9: with "pending only" on, the section lists only waiting agents; none waits now.
    await page.get_by_role("link", name="Back").click()
    await page.get_by_role("link", name="Back").click()
    await page.get_by_role("switch", name="Show only panes with pending requests").check()
    await expect(page.locator("li[data-agent=desk]")).to_have_count(0)
    await s.conv.ask(id="p2", kind="text", title="And now?")
    await expect(page.locator("li[data-agent=desk] .count.attention")).to_have_text("1 waiting")
    no_errors(page)


async def test_A3_A8_ask_raised_while_the_page_is_open_appears_without_reload(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s = await site(rig, closing, clock=lambda: datetime.now(UTC))
    page = await open_chat(browser, s)
    await page.evaluate("window.__same = 1")
    deadline = datetime.now(UTC).replace(microsecond=0)
    from datetime import timedelta

    q = await s.conv.ask(
        id="q",
        kind="choice",
        title="Which notebook?",
        options=[Option(id="work", label="Work"), Option(id="home", label="Home")],
        deadline=deadline + timedelta(seconds=50),
    )
    card = page.locator("article.card[data-ask=q]")
    await expect(card).to_contain_text("Which notebook?")
    # A3: the countdown ticks in seconds under a minute.
    label = card.locator(".deadline")
    await expect(label).to_have_text(re.compile(r"^Expires in \d+ s$"))
    first = await label.text_content()
    await expect(label).not_to_have_text(first or "")
    # C3: a reply streams with its cursor, which goes with the final text.
    item = await s.conv.append(kind="reply", final=False)
    await item.delta("Thinking about ")
    line = page.locator(f"#line-{item.id}")
    await expect(line).to_contain_text("Thinking about")
    await expect(line.locator(".cursor")).to_have_count(1)
    await item.finish("Thinking about notebooks.")
    await expect(line).to_contain_text("Thinking about notebooks.")
    await expect(line.locator(".cursor")).to_have_count(0)
    # Six more asks: five cards, then "Show N more" (A8).
    for n in range(5):
        await s.conv.ask(id=f"m{n}", kind="text", title=f"Name {n}?")
    await expect(page.get_by_role("button", name="Show 1 more")).to_be_visible()
    await page.get_by_role("button", name="Show 1 more").click()
    await expect(page.locator("article.card")).to_have_count(6)
    # R3: decided in the agent with no tap: the card goes, the chat keeps a line.
    await q.decide()
    await expect(card).to_have_count(0)
    await expect(page.locator("#thread .receipt .text")).to_have_text(
        "Decided in the durable agent: Which notebook?"
    )
    assert await page.evaluate("window.__same") == 1  # no reload
    no_errors(page)


async def test_A5_always_allow_needs_two_taps(rig: Rig, browser: Browser, closing: Any) -> None:
    s = await site(rig, closing)
    ask = await s.conv.ask(
        id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION
    )
    page = await open_page(browser, s.live.url + "#/a/desk/c/c1")
    always = page.locator("article.card[data-ask=p] button[data-role=always]")
    await expect(always).to_contain_text("Always allow")
    await always.focus()
    await page.keyboard.press("Enter")
    await expect(always).to_contain_text("Tap again to always allow")
    await expect(always).to_contain_text("shell")  # the tool's name
    await asyncio.sleep(0.2)
    assert ask.open  # one tap sent nothing
    await expect(always).to_be_focused()  # the redrawn button keeps the focus: the keyboard
    await page.keyboard.press("Enter")  # sends the second tap
    resolution = await asyncio.wait_for(ask.wait(), 5)
    assert resolution.answer is not None
    assert (resolution.answer.option, resolution.answer.confirmed) == ("always", True)
    no_errors(page)


async def test_A4_choice_text_and_form_cards_answered_in_the_page(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s = await site(rig, closing)
    many = await s.conv.ask(
        id="tags",
        kind="choice",
        title="Which tags?",
        multiple=True,
        options=[Option(id=i, label=i.title()) for i in ("urgent", "later", "idea")],
    )
    text = await s.conv.ask(id="name", kind="text", title="Call it?", max_length=80)
    form = await s.conv.ask(
        id="form",
        kind="form",
        title="Set a reminder",
        fields=[
            FormField(id="what", kind="text", label="What", required=True, max_length=120),
            FormField(
                id="when",
                kind="select",
                label="When",
                options=[Option(id="today", label="Today"), Option(id="week", label="This week")],
            ),
            FormField(id="loud", kind="switch", label="With sound"),
        ],
    )
    page = await open_page(browser, s.live.url + "#/a/desk/c/c1")
    tags = page.locator("article.card[data-ask=tags]")
    await expect(tags).to_contain_text("Pick any number")
    await tags.get_by_role("button", name="Urgent").click()
    await tags.get_by_role("button", name="Idea").click()
    await expect(tags.get_by_role("button", name="Idea")).to_have_attribute("aria-pressed", "true")
    await tags.get_by_role("button", name="Send").click()
    got = await asyncio.wait_for(many.wait(), 5)
    assert got.answer is not None
    assert got.answer.options == ["urgent", "idea"]

    name = page.locator("article.card[data-ask=name]")
    await expect(name).to_contain_text("0 of 80")
    await name.get_by_role("textbox").fill("Garden plans")
    await expect(name).to_contain_text("12 of 80")
    # The chat changes while the person types: what they typed, and the focus, stay.
    await s.conv.update(subtitle="Tidying")
    await expect(page.locator("#line2")).to_have_text("Tidying")
    await expect(name.get_by_role("textbox")).to_be_focused()
    await expect(name.get_by_role("textbox")).to_have_value("Garden plans")
    await name.get_by_role("button", name="Send").click()
    got = await asyncio.wait_for(text.wait(), 5)
    assert got.answer is not None
    assert got.answer.text == "Garden plans"

    card = page.locator("article.card[data-ask=form]")
    await expect(card).to_contain_text("Required")
    send = card.get_by_role("button", name="Send")
    await expect(send).to_be_disabled()  # the required field is empty
    # The select shows what to do before it is opened, not a blank box.
    when = card.get_by_label("When")
    assert await when.evaluate("e => e.options[e.selectedIndex].text") == "Choose…"
    await expect(when).to_have_value("")
    await card.get_by_label(re.compile("^What")).fill("Water the plants")
    await card.get_by_label("When").select_option("week")
    await card.get_by_role("switch", name="With sound").check()
    await send.click()
    got = await asyncio.wait_for(form.wait(), 5)
    assert got.answer is not None
    assert got.answer.fields == {"what": "Water the plants", "when": "week", "loud": True}
    no_errors(page)


async def test_T1_decided_changed_and_retry_with_the_same_request_id(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s = await site(rig, closing)
    decided = await s.conv.ask(id="d", kind="permission", title="Sync?", options=PERMISSION[::2])
    await s.conv.ask(id="r", kind="permission", title="Run ls?", options=PERMISSION[::2])
    changed = await s.conv.ask(id="c", kind="permission", title="Sync?", options=PERMISSION[::2])
    await s.conv.ask(id="a", kind="permission", title="Archive?", options=PERMISSION[::2])
    page = await open_page(browser, s.live.url + "#/a/desk/c/c1")
    await expect(page.locator("article.card")).to_have_count(4)
    # The agent decides while the page's stream is cut: the tap finds it decided.
    await page.route("**/api/v1/events*", lambda route: route.abort())
    await s.live.drop()
    await s.live.start()
    await decided.decide()
    await eventually(lambda: s.gw.agents.find_ask("desk", "d") is None)
    card = page.locator("article.card[data-ask=d]")
    await card.get_by_role("button", name=re.compile("^Allow")).click()
    await expect(card).to_contain_text("Decided in the durable agent.")
    await expect(card.get_by_role("button", name=re.compile("^Allow"))).to_be_disabled()
    # The ask changes unseen: the tap on the old text is not applied; the card reads it again.
    await changed.change(title="Sync and delete?")
    await eventually(lambda: s.gw.agents.find_ask("desk", "c").version == 2)
    card = page.locator("article.card[data-ask=c]")
    await card.get_by_role("button", name=re.compile("^Allow")).click()
    await expect(card).to_contain_text("This ask changed. Read it again, then tap an answer.")
    await expect(card).to_contain_text("Sync and delete?")
    assert changed.open
    await card.get_by_role("button", name=re.compile("^Allow")).click()
    got = await asyncio.wait_for(changed.wait(), 5)
    assert got.answer is not None
    assert got.answer.option == "allow"
    await expect(card).to_have_count(0)
    # Another phone answered first.
    async with aiohttp.ClientSession() as http:
        body = {"request_id": "other-phone", "version": 1, "answer": {"option": "deny"}}
        url = s.live.url + "api/v1/agents/desk/asks/a/answer"
        async with http.post(url, json=body) as resp:
            assert (await resp.json())["outcome"] == "accepted"
    card = page.locator("article.card[data-ask=a]")
    await card.get_by_role("button", name=re.compile("^Allow")).click()
    await expect(card).to_contain_text("Already answered. This card goes away on the next refresh.")
    # The agent's link is down: the tap may not have arrived; Retry sends the same id.
    sent: list[dict[str, Any]] = []
    page.on(
        "request",
        lambda r: (
            sent.append(json.loads(r.post_data or "{}")) if r.url.endswith("/answer") else None
        ),
    )
    runner = s.rig.runners.pop("desk")
    await runner.close()
    await eventually(lambda: s.gw.mirrors["desk"].state.value != "ready")
    card = page.locator("article.card[data-ask=r]")
    await card.get_by_role("button", name=re.compile("^Allow")).click()
    await expect(card).to_contain_text("Not sure the answer arrived. Retry sends it once more.")
    s.rig.runners["desk"] = await s.agent.serve_unix(s.rig.sockets["desk"])
    await card.get_by_role("button", name="Retry").click()
    await eventually(lambda: len(sent) == 2)
    assert sent[0]["request_id"] == sent[1]["request_id"]
    await eventually(lambda: s.gw.agents.find_ask("desk", "r") is None)
    no_errors(page)


# --- the stream: dropped, and the gateway restarted ------------------------------------------


async def test_stream_dropped_and_gateway_restarted_the_page_catches_up(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s = await site(rig, closing)
    page = await open_chat(browser, s)
    await page.evaluate("window.__same = 1")
    await s.conv.append(kind="notice", text="before the drop")
    await expect(page.locator("#thread")).to_contain_text("before the drop")
    before = await page.evaluate("window.collie.lastEventId")
    # A drop: the server goes, the gateway stays; what happens meanwhile is replayed.
    await s.live.drop()
    await expect(page.locator("#net")).to_contain_text("Reconnecting…")
    await s.conv.append(kind="notice", text="during the drop")
    await s.live.start()
    await expect(page.locator("#thread")).to_contain_text("during the drop")
    await expect(page.locator("#net")).to_be_hidden()
    after = await page.evaluate("window.collie.lastEventId")
    assert after.split("-")[0] == before.split("-")[0]  # the same boot: resumed, not reset
    # A restart: a new gateway on the same file and port; the page reads its screen anew.
    await s.live.restart()
    await eventually(lambda: s.gw.mirrors["desk"].state.value == "ready")
    await s.conv.ask(id="late", kind="text", title="Raised after the restart?")
    await expect(page.locator("article.card[data-ask=late]")).to_be_visible()
    await s.conv.append(kind="notice", text="after the restart")
    await expect(page.locator("#thread")).to_contain_text("after the restart")
    assert await page.evaluate("window.__same") == 1
    no_errors(page)


# --- hostile Markdown ------------------------------------------------------------------------


async def test_C2_hostile_markdown_runs_no_script(rig: Rig, browser: Browser, closing: Any) -> None:
    s = await site(rig, closing)
    hostile = (
        "# Hi\n<script>window.__pwned = 1</script>\n"
        '<img src="x" onerror="window.__pwned = 2">\n'
        "[click](javascript:window.__pwned=3) and [ok](https://example.org)\n"
        '<a href="javascript:window.__pwned=4">raw</a>\n'
    )
    await s.conv.append(kind="markdown", text=hostile, id="evil")
    await s.conv.append(kind="link", url="javascript:window.__pwned=5", label="bad link")
    page = await open_page(browser, s.live.url + "#/a/desk/c/c1")
    md = page.locator("#line-evil .md")
    await expect(md).to_contain_text("<script>")  # raw HTML is shown as text (C2)
    await expect(md.locator("script, img, [onerror]")).to_have_count(0)
    hrefs = await page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    assert not [h for h in hrefs if h.lower().startswith("javascript")]
    for link in await md.locator("a").all():
        await link.click(modifiers=["Shift"], no_wait_after=True)
    await page.wait_for_timeout(200)
    assert await page.evaluate("window.__pwned") is None
    no_errors(page)


async def test_C2_C3_markdown_shows_rendered_while_written(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    """Issue 25.2: the page draws a Markdown item being written from its ``html`` (no ``**``
    or ``#`` shown), with the cursor, and its deltas read the chat no more."""
    s = await site(rig, closing)
    page = await open_chat(browser, s)
    reads: list[str] = []
    page.on(
        "request", lambda r: reads.append(r.url) if r.url.endswith("/conversations/c1") else None
    )
    item = await s.conv.append(kind="markdown", final=False, id="plan")
    await item.delta("# Plan\n\n- **first** step\n")
    md = page.locator("#line-plan .md")
    await expect(md.locator("h1")).to_have_text("Plan")
    await expect(md.locator("strong")).to_have_text("first")
    await expect(page.locator("#line-plan .cursor")).to_have_count(1)
    for n in range(5):
        await item.delta(f"- more {n}\n")
    await item.finish()
    await expect(md.locator("li")).to_have_count(6)
    await expect(page.locator("#line-plan .cursor")).to_have_count(0)
    assert "**" not in await md.inner_text()
    assert reads == [], "a delta read the chat again"
    no_errors(page)


# --- without a credential: the page pairs with a code into an HttpOnly cookie (issue 21) ---

ADMIN = "s3cret-token"
WRONG_CODE = "This code is not right. Check it, or make a new one with collie-gateway pair."


async def admin_call(s: Site, method: str, path: str, body: object = None) -> Any:
    base = s.live.url.rstrip("/")
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, base + path, json=body, headers=headers) as resp,
    ):
        return await resp.json()


async def test_web_pairs_with_a_code_into_a_cookie_no_script_reads(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s = await site(rig, closing, token=ADMIN)
    made = await admin_call(s, "POST", "/api/v1/pairings", {})
    page = await open_page(browser, s.live.url)
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    await expect(page.get_by_role("heading", name="Pair this page")).to_be_visible()
    assert await serious_violations(page) == []
    await page.wait_for_timeout(300)
    await expect(page.locator("#net")).to_be_hidden()  # no stream without a credential: no alarm
    await shot(page, "pair-light")
    await page.get_by_label("Pairing code").fill("wrong-code")
    await page.get_by_role("button", name="Pair").click()
    await expect(page.get_by_role("alert")).to_have_text(WRONG_CODE)
    # The refused code stays in the box, selected, described by the alert: fixed, not retyped.
    box = page.get_by_label("Pairing code")
    await expect(box).to_have_value("wrong-code")
    await expect(box).to_be_focused()
    assert await box.evaluate("e => [e.selectionStart, e.selectionEnd]") == [0, 10]
    await expect(box).to_have_attribute("aria-invalid", "true")
    await expect(box).to_have_accessible_description(WRONG_CODE)
    assert await serious_violations(page) == []
    await page.get_by_label("Pairing code").fill(made["code"].upper())
    await page.get_by_role("button", name="Pair").click()
    await expect(page.locator("li[data-agent=desk]")).to_be_visible()
    (cookie,) = [c for c in await page.context.cookies() if c["name"] == "collie_session"]
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/")
    assert await page.evaluate("document.cookie") == ""  # no script can read the credential
    stored = await page.evaluate("JSON.stringify(Object.entries(localStorage))")
    assert "collie." not in stored
    await page.reload()  # paired once: kept
    await expect(page.locator("li[data-agent=desk]")).to_be_visible()
    await page.locator("li[data-agent=desk] a").click()
    await page.get_by_role("link", name=re.compile("Tidy up")).click()
    await s.conv.append(kind="notice", text="streamed to a paired page")
    await expect(page.locator("#thread")).to_contain_text("streamed to a paired page")
    assert not [u for u in urls if "collie." in u or made["code"] in u]
    phones = await admin_call(s, "GET", "/api/v1/phones")
    assert [p["name"] for p in phones["phones"]] == ["Web companion"]
    no_errors(page)


async def test_web_a_page_of_another_origin_cannot_answer_with_the_cookie(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s = await site(rig, closing, token=ADMIN)
    await s.conv.ask(id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    await eventually(lambda: s.gw.agents.find_ask("desk", "p") is not None)
    made = await admin_call(s, "POST", "/api/v1/pairings", {})
    page = await open_page(browser, s.live.url)
    await page.get_by_label("Pairing code").fill(made["code"])
    await page.get_by_role("button", name="Pair").click()
    await expect(page.locator("li[data-agent=desk]")).to_be_visible()

    # Another origin on the same machine (same site: the Strict cookie is sent along).
    async def evil_page(request: web.Request) -> web.Response:
        return web.Response(text="<p>another site</p>", content_type="text/html")

    evil = web.Application()
    evil.router.add_get("/", evil_page)
    runner = web.AppRunner(evil)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        other = page.context.pages[0]
        await other.goto(f"http://127.0.0.1:{runner.addresses[0][1]}/")
        target = s.live.url + "api/v1/agents/desk/asks/p/answer"
        tap = {"request_id": "evil-1", "version": 1, "answer": {"option": "allow"}}
        await other.evaluate(
            "([url, body]) => fetch(url, {method: 'POST', mode: 'no-cors', credentials: 'include',"
            " headers: {'Content-Type': 'text/plain'}, body: JSON.stringify(body)})"
            ".catch(() => null)",
            [target, tap],
        )
        await asyncio.sleep(0.3)
    finally:
        await runner.cleanup()
    answered = await admin_call(s, "GET", "/api/v1/answers/evil-1")
    assert answered["error"] == "not_found"  # refused before anything was recorded or sent
    assert s.gw.agents.find_ask("desk", "p") is not None


# --- accessibility and screenshots, light and dark --------------------------------------------


SCREENS = [
    ("dashboard", ""),
    ("list", "#/a/desk"),
    ("chat", "#/a/desk/c/desk-showcase"),
    ("permission", "#/a/desk/c/desk-permission"),
    ("choice", "#/a/desk/c/desk-choices"),
    ("text", "#/a/desk/c/desk-text"),
    ("form", "#/a/desk/c/desk-form"),
    ("deadline", "#/a/desk/c/desk-deadline"),
    ("new", "#/a/desk/new"),
]


async def test_web_axe_no_serious_violation_on_any_screen_light_and_dark(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    agent = desk_agent.build(rig.tmp / "desk.agent.db")
    sock = await rig.serve("desk", agent)
    await desk_agent.setup(agent)
    live = await gateway_for(rig, closing, sock, spaces=("home",))
    assert live.gateway is not None
    gw = live.gateway
    await eventually(lambda: gw.mirrors["desk"].state.value == "ready")
    await eventually(lambda: gw.agents.find_ask("desk", "desk-form-ask") is not None)
    found: list[str] = []
    for scheme in ("light", "dark"):
        page = await open_page(browser, live.url, scheme)
        for name, where in SCREENS:
            await goto(page, where or "#/")
            if name == "permission":
                await page.locator("button[data-role=always]").click()
            shown = await page.inner_text("body")
            assert not re.search(r"\b(null|undefined|NaN)\b", shown), (name, shown)
            found += [f"{scheme} {name}: {v}" for v in await serious_violations(page)]
            await shot(page, f"{name}-{scheme}")
        await goto(page, "#/a/desk/c/desk-showcase")
        await page.get_by_role("button", name="Conversation menu").click()
        await expect(page.get_by_role("menuitem", name="Close conversation")).to_be_focused()
        found += [f"{scheme} menu: {v}" for v in await serious_violations(page)]
        await shot(page, f"menu-{scheme}")
        await page.keyboard.press("Escape")
        await expect(page.get_by_role("button", name="Conversation menu")).to_be_focused()
        no_errors(page)
        await page.context.close()
    assert found == []


# --- the list: Closed, Load more, Reopen (L2, L4, L6) ----------------------------------------


async def test_L4_L6_closed_group_load_more_and_reopen(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    agent = rig.agent("desk", runtime="desk", features=["history", "reopen"])
    sock = await rig.serve("desk")
    await agent.open_conversation("open1", title="Still open")
    for n in range(101):
        conv = await agent.open_conversation(f"c{n:03}", title=f"Old {n}")
        await conv.close()
        rig.clock.advance(seconds=1)
    live = await gateway_for(rig, closing, sock)
    page = await open_page(browser, live.url + "#/a/desk")
    await expect(page.get_by_role("heading", name="Closed")).to_be_visible()
    closed = page.locator("#closed-rows > li")
    await expect(closed).to_have_count(100)
    await page.get_by_role("button", name="Load more").click()
    await expect(closed).to_have_count(101)
    await expect(page.get_by_role("button", name="Load more")).to_have_count(0)
    await shot(page, "list-closed-light")
    row = page.locator("li[data-conversation=c000]")
    await row.get_by_role("button", name="Reopen").click()
    opened = page.locator("ul.rows").first.locator("li[data-conversation=c000]")
    await expect(opened).to_be_visible()  # L2: back among the open ones, live
    await expect(opened.get_by_role("button", name="Reopen")).to_have_count(0)
    no_errors(page)


# --- the chat: the person's line, dots, bar, menu, New page (C4, C6, B1, B2, G2, N1, N2) ------


async def test_C4_C6_B1_own_line_dots_bar_and_menu(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s = await site(rig, closing, clock=lambda: datetime.now(UTC))
    go = asyncio.Event()
    tapped: list[str] = []

    @s.agent.on_message
    async def reply(conv: ConversationHandle, msg: Any) -> None:
        await go.wait()
        await conv.append(kind="reply", text=f"Got {msg.text}")

    @s.agent.on_button
    async def button(conv: ConversationHandle, button_id: str) -> None:
        tapped.append(button_id)

    from wire.agent import Button, Progress, Step

    await s.conv.update(
        buttons=[
            Button(id="refresh", label="Refresh", icon="refresh"),
            Button(id="share", label="Share", icon="star", disabled=True),
        ]
    )
    page = await open_page(browser, s.live.url + "#/a/desk/c/c1")
    stop = page.locator("#bar-stop")
    await expect(stop).to_have_attribute("aria-disabled", "true")  # B1: no turn runs: dimmed
    await expect(page.locator("#bar-b-share")).to_have_attribute("aria-disabled", "true")
    await page.locator("#bar-b-refresh").click()
    await eventually(lambda: tapped == ["refresh"])
    await page.get_by_role("textbox", name="Write a message").fill("tidy the garden notes")
    await page.get_by_role("button", name="Send", exact=True).click()
    mine = page.locator(".item.mine")
    await expect(mine).to_contain_text("tidy the garden notes")
    await expect(page.locator(".dots")).to_be_visible()  # C6: the agent is working
    await expect(mine.locator(".clock")).to_have_count(0)  # the agent's copy took its place
    await expect(mine).to_have_count(1)
    await expect(stop).not_to_have_attribute("aria-disabled", "true")  # a turn runs
    # H2: while working, line 2 shows the running step; a percent shows with its bar.
    steps = [Step(label="Read", state="done"), Step(label="Save a note", state="running")]
    await s.conv.update(progress=Progress(steps=[*steps, Step(label="Tidy")]))
    await expect(page.locator("#line2")).to_have_text("Step 2 of 3: Save a note")
    await s.conv.update(progress=Progress(percent=42, label="loading"))
    await expect(page.locator("#line2")).to_have_text("42%: loading")
    await expect(page.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "42")
    await shot(page, "chat-sending-light")
    # B3: the turn ends while the page can't hear it; its Stop finds the conversation moved on.
    await page.route("**/api/v1/events*", lambda route: route.abort())
    await s.live.drop()
    await s.live.start()
    go.set()
    await eventually(lambda: not s.conv.running)
    turn = s.conv.turn
    async with aiohttp.ClientSession() as http:  # another phone starts the next turn
        body = {"request_id": "other-phone", "text": "and the roses"}
        url = s.live.url + "api/v1/agents/desk/conversations/c1/messages"
        async with http.post(url, json=body) as resp:
            assert (await resp.json())["outcome"] == "accepted"
    await eventually(lambda: s.conv.turn == turn + 1)
    await stop.click()
    await expect(page.locator("#bar-status")).to_have_text(
        "The conversation moved on, so the action did not run."
    )
    await expect(stop).not_to_have_attribute("aria-disabled", "true")  # it stays usable
    # C4 "Not sent": a steer into that old turn is refused; the text goes back to the composer.
    box = page.get_by_role("textbox", name="Write a message")
    await box.fill("also the tulips")
    async with page.expect_response(lambda r: r.url.endswith("/messages")) as answered:
        await page.locator("#bar-steer").click()
    steer = await (await answered.value).json()
    assert (steer["line_state"], steer["label"]) == ("not_sent", "Not sent")
    await expect(box).to_have_value("also the tulips")
    await expect(page.locator(".item.mine").last).to_contain_text("also the tulipsNot sent")
    await page.unroute("**/api/v1/events*")
    await expect(page.locator("#thread")).to_contain_text("Got tidy the garden notes")
    await expect(page.locator(".dots")).to_have_count(0)
    # G2: the menu has "Close conversation"; closing makes the chat read-only with Reopen.
    await page.get_by_role("button", name="Conversation menu").click()
    await page.get_by_role("menuitem", name="Close conversation").click()
    await expect(page.get_by_role("button", name="Reopen")).to_be_visible()
    await expect(page.get_by_role("textbox", name="Write a message")).to_have_count(0)
    await page.get_by_role("button", name="Reopen").click()
    await expect(page.get_by_role("textbox", name="Write a message")).to_be_visible()
    no_errors(page)


async def test_C4_not_confirmed_then_send_again_with_the_same_request_id(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s = await site(rig, closing)
    page = await open_chat(browser, s)
    sent: list[dict[str, Any]] = []

    def seen(r: Any) -> None:
        if r.url.endswith("/messages"):
            sent.append(json.loads(r.post_data or "{}"))

    page.on("request", seen)
    runner = s.rig.runners.pop("desk")
    await runner.close()
    await eventually(lambda: s.gw.mirrors["desk"].state.value != "ready")
    box = page.get_by_role("textbox", name="Write a message")
    await box.fill("are you there?")
    await page.get_by_role("button", name="Send", exact=True).click()
    await expect(page.locator(".item.mine")).to_contain_text("Sending, not confirmed")
    s.rig.runners["desk"] = await s.agent.serve_unix(s.rig.sockets["desk"])
    await eventually(lambda: s.gw.mirrors["desk"].state.value == "ready")
    await box.fill("are you there?")
    await page.get_by_role("button", name="Send", exact=True).click()
    await eventually(lambda: len(sent) == 2)
    assert sent[0]["request_id"] == sent[1]["request_id"]
    await expect(page.locator(".item.mine")).to_have_count(1)
    await expect(page.locator(".item.mine")).not_to_contain_text("Sending, not confirmed")
    no_errors(page)


async def tab_to(page: Page, target: Any) -> None:
    """Press Tab until ``target`` has the focus (a keyboard-only person's way there)."""
    for _ in range(40):
        if await target.evaluate("el => el === document.activeElement"):
            return
        await page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {target}")


async def test_N1_N2_new_page_starter_opens_a_conversation_by_keyboard(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    _, live = await desk_followed(rig, closing)
    page = await open_page(browser, live.url)
    # Only the keyboard: dashboard row, the New page, a starter, then a message.
    await tab_to(page, page.locator("li[data-agent=desk] a"))
    await page.keyboard.press("Enter")
    await tab_to(page, page.get_by_role("link", name="New conversation"))
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="New conversation")).to_be_visible()
    await tab_to(page, page.get_by_role("button", name=re.compile("^Take a note")))
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="Take a note")).to_be_visible()
    await expect(page.locator("#thread")).to_contain_text("Started “Take a note”")
    await tab_to(page, page.get_by_role("textbox", name="Write a message"))
    await page.keyboard.type("keep it short")
    await page.keyboard.press("Enter")
    await expect(page.locator("#thread")).to_contain_text("Noted: keep it short.")
    no_errors(page)


async def test_N1_a_list_redraw_due_as_the_person_leaves_it_does_not_pull_them_back(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    """A conversation opens while the person taps "New conversation" and the New page is
    still loading: the list's redraw that was due does not draw the list over it."""
    agent, live = await desk_followed(rig, closing)
    page = await open_page(browser, live.url + "#/a/desk")
    await expect(page.get_by_role("heading", name="desk")).to_be_visible()
    held: list[Any] = []
    loading = asyncio.Event()

    async def hold(route: Any) -> None:
        held.append(route)
        loading.set()

    await page.route("**/api/v1/agents/desk/new", hold)
    await page.get_by_role("link", name="New conversation").click()
    await asyncio.wait_for(loading.wait(), 60)  # the New page waits for its read
    events = await page.evaluate("window.collie.events")
    await agent.open_conversation("c9", title="Opened meanwhile")
    await until(page, "window.collie.events", events, "the new conversation not told")
    # Timers run in the order they fall due: the list's redraw (due in 80 ms) has run by now.
    await page.evaluate("new Promise((done) => setTimeout(done, 500))")
    await held[0].continue_()
    await expect(page.get_by_role("heading", name="New conversation")).to_be_visible()
    await expect(page.get_by_text("Opened meanwhile")).to_have_count(0)
    no_errors(page)


async def test_A1_card_sits_under_its_tool_call_and_theme_can_be_fixed(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s = await site(rig, closing)
    await s.conv.append(kind="tool", call_id="t1", name="shell", status="running")
    await s.conv.append(kind="reply", text="After the tool.")
    await s.conv.ask(id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    page = await open_page(browser, s.live.url + "?theme=dark#/a/desk/c/c1")
    card = page.locator("article.card[data-ask=p]")
    await expect(card).to_be_visible()
    after_tool = page.locator(".item.tool[data-call-id=t1] + article.card")
    await expect(after_tool).to_have_attribute("data-ask", "p")
    # The page was asked for dark under a light setting: the theme is fixed.
    bg = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert bg == "rgb(18, 18, 18)"
    no_errors(page)
    # The person's setting decides unless the page is asked for one (S8); light is kept too.
    for scheme, query, drawn in [
        ("dark", "?theme=auto", "rgb(18, 18, 18)"),
        ("light", "", "rgb(255, 255, 255)"),
        ("dark", "?theme=light", "rgb(255, 255, 255)"),
    ]:
        other = await open_page(browser, s.live.url + query + "#/a/desk/c/c1", scheme)
        await expect(other.locator("article.card[data-ask=p]")).to_be_visible()
        bg = await other.evaluate("getComputedStyle(document.body).backgroundColor")
        assert bg == drawn, (scheme, query)


# --- issue 9.1 / 9.10: after a reset the page reads the chat again; a streamed secret -------


async def test_C2_X1_the_page_reads_a_chat_again_after_reset_and_never_shows_a_streamed_secret(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    """The tests' own agent streams "one two " and a Stripe key split in pieces (the page
    shows its mask, never its characters); the gateway's link goes, "LOST-1 " and "LOST-2 "
    are written and the agent's log is cut; back, the gateway gets ``reset`` and the page
    reads the chat again (``chat.reload``): it shows the agent's text, nothing lost."""
    from tests.collie_gateway.chat_phone import LogAgent

    agent = LogAgent()
    sock = rig.tmp / "log.sock"
    await agent.serve(sock)
    live = await gateway_for(rig, closing, sock)
    gw = live.gateway
    assert gw is not None
    try:
        await eventually(lambda: gw.mirrors["desk"].state.value == "ready")
        item = agent.append()
        page = await open_page(browser, live.url + "#/a/desk/c/c1")
        thread = page.locator("#thread")
        await expect(page.get_by_role("heading", name="Notes")).to_be_visible()
        screens: list[str] = []
        for piece in ["one two sk_li", "ve_4eC39Hq", "LyjWDarjtT1", "zdp7dcQ then "]:
            agent.delta(item, piece)
            await asyncio.sleep(0.05)
            screens.append(await thread.inner_text())
        await expect(thread).to_contain_text("one two sk_live_•••• then")
        screens.append(await thread.inner_text())
        for text in screens:
            assert "4eC39Hq" not in text
            assert "sk_li" not in text.replace("sk_live_••••", "")
        await agent.stop()
        await eventually(lambda: gw.mirrors["desk"].state.value != "ready")
        agent.delta(item, "LOST-1 ")
        agent.delta(item, "LOST-2 ")
        agent.cut_log()
        await agent.serve(sock)
        await eventually(lambda: agent.resets > 0)
        agent.delta(item, "three ")
        await expect(thread).to_contain_text("then LOST-1 LOST-2 three")
        no_errors(page)
    finally:
        await agent.stop()
