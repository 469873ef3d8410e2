"""The web companion at common phone and desktop widths (issue 25.8): 375, 390 and 600 px in
desktop Chromium with its scrollbars shown (they take room, as on a desktop). Nothing
overflows sideways, the bottom bar's buttons wrap, the message box is whole, no empty band
above the chat, no empty "Spaces" heading without ``--space``, the version sentence once.
Screenshots of each go to ``COLLIE_WEB_SHOTS`` as ``width-<screen>-<px>.png``."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, expect

from collie_gateway.settings import Settings
from collie_gateway.sources import Source
from fixtures.browser import LiveGateway
from tests.collie_gateway import browser_scene as scene
from tests.collie_gateway.conftest import FAST, Rig
from tests.collie_gateway.test_web import SHOTS
from wire.agent import Button, Option, ToolRef
from wire.messages import FEATURES

WIDTHS = [375, 390, 600]
HEIGHT = 700
VERSION = (
    "Program speaks wire v2, this Collie speaks v1. Update Collie, or the durable agent's SDK."
)
BUTTONS = [
    Button(id="refresh", label="Refresh", icon="refresh"),
    Button(id="archive", label="Archive", icon="archive"),
    Button(id="sync", label="Syncing", icon="send", busy=True),
    Button(id="share", label="Share", icon="star", disabled=True),
]


pytestmark = scene.LOOP  # one Chromium and one gateway for the module's tests (read-only)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium() -> AsyncIterator[Browser]:
    """Chromium as on a desktop: scrollbars shown and taking room."""
    async for launched in scene.launch(ignored=["--hide-scrollbars"]):
        yield launched


@pytest_asyncio.fixture(loop_scope="module")
async def browser(chromium: Browser) -> AsyncIterator[Browser]:
    """The module's Chromium for one test (its contexts closed after it)."""
    async for launched in scene.fresh(chromium):
        yield launched


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def live() -> AsyncIterator[LiveGateway]:
    """``desk`` (a long chat ``long`` with six bar buttons, a chat ``ask`` with only a card)
    and ``old`` (speaks wire 2), behind a gateway given no ``--space``; the tests only look."""
    async for rig in scene.agents():
        async for gateway in _scene(rig):
            yield gateway


async def _scene(rig: Rig) -> AsyncIterator[LiveGateway]:
    """The agents of ``live`` served by ``rig``, and their gateway."""
    desk = rig.agent("desk", runtime="desk", features=list(FEATURES))
    long = await desk.open_conversation("long", title="Weekly review", buttons=BUTTONS)
    for n in range(12):
        item = await long.append(kind="reply", final=False)
        await item.delta(f"Line {n}: notes about the garden, the kitchen and the week. " * 2)
        await item.finish()
    asking = await desk.open_conversation("ask", title="Delete old notes", buttons=BUTTONS)
    await asking.ask(
        id="p",
        kind="permission",
        title="Delete 3 old notes?",
        tool=ToolRef(call_id="t1", name="delete_notes"),
        options=[
            Option(id="yes", label="Delete these 3 notes", role="allow"),
            Option(id="no", label="Keep them", role="deny"),
        ],
    )
    old = rig.agent("old", features=["history"], wire_version=2)
    sources = [
        Source(name="desk", socket=await rig.serve("desk")),
        Source(name="old", socket=await rig.serve("old", old)),
    ]
    gateway = LiveGateway(
        Settings(sources=sources, db_path=rig.tmp / "gateway.db", timing=FAST, clock=rig.clock)
    )
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.close()


async def _open(browser: Browser, url: str, width: int) -> Page:
    context = await browser.new_context(viewport={"width": width, "height": HEIGHT})
    page = await context.new_page()
    await page.goto(url)
    return page


async def _box(page: Page, selector: str) -> dict[str, float]:
    box: dict[str, float] = await page.eval_on_selector(
        selector,
        "e => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right,"
        " top: r.top, bottom: r.bottom, scroll: e.scrollWidth, client: e.clientWidth}; }",
    )
    return box


async def _page_width(page: Page) -> tuple[int, int]:
    """The page's width inside its scrollbar, and the width of what it holds."""
    sizes: list[int] = await page.evaluate(
        "() => [document.documentElement.clientWidth, document.documentElement.scrollWidth]"
    )
    return sizes[0], sizes[1]


async def _shot(page: Page, name: str, width: int) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"width-{name}-{width}.png"))


@pytest.mark.parametrize("width", WIDTHS)
async def test_B1_C4_the_bar_wraps_and_the_message_box_is_whole(
    browser: Browser, live: LiveGateway, width: int
) -> None:
    page = await _open(browser, live.url + "#/a/desk/c/long", width)
    await expect(page.get_by_role("heading", name="Weekly review")).to_be_visible()
    await expect(page.locator("#bottom button", has_text="Share")).to_be_visible()
    inside, content = await _page_width(page)
    assert inside < width, "no scrollbar shown: the test would not measure a desktop"
    assert content == inside, "the page scrolls sideways"
    bar = await _box(page, ".bar")
    assert bar["scroll"] <= bar["client"], "the bar's buttons overflow sideways"
    for button in await page.locator(".bar button").all():
        box = await button.bounding_box()
        assert box is not None
        label = await button.inner_text()
        assert box["x"] >= 0, label
        assert box["x"] + box["width"] <= inside, label
    for part in ("#composer", "#send"):
        edges = await _box(page, part)
        assert edges["left"] >= 0, part
        assert edges["right"] <= inside, f"{part} clipped: {edges['right']} > {inside}"
        assert edges["bottom"] <= HEIGHT, f"{part} below the window"
    await _shot(page, "chat", width)


@pytest.mark.parametrize("width", WIDTHS)
async def test_H1_C1_no_empty_band_above_the_chat(
    browser: Browser, live: LiveGateway, width: int
) -> None:
    for chat, first in (("long", "#thread > :first-child"), ("ask", ".card")):
        page = await _open(browser, live.url + f"#/a/desk/c/{chat}", width)
        await expect(page.locator(first).first).to_be_visible()
        await page.evaluate("() => window.scrollTo(0, 0)")
        top = await _box(page, ".top")
        below = await _box(page, first)
        assert below["top"] - top["bottom"] <= 16, (
            f"{chat}: a band of {below['top'] - top['bottom']} px"
        )
        inside, content = await _page_width(page)
        assert content == inside
        await _shot(page, chat + "-top", width)


@pytest.mark.parametrize("width", WIDTHS)
async def test_D7_no_spaces_heading_without_spaces_and_nothing_to_scroll(
    browser: Browser, live: LiveGateway, width: int
) -> None:
    page = await _open(browser, live.url, width)
    await expect(page.get_by_role("heading", name="Durable agents")).to_be_visible()
    headings = await page.locator("h2").all_inner_texts()
    assert [h.strip().lower() for h in headings] == ["durable agents"]
    heights: list[int] = await page.evaluate(
        "() => [document.documentElement.scrollHeight, window.innerHeight]"
    )
    assert heights[0] <= heights[1], "a page that fits scrolls anyway (a phantom scrollbar)"
    inside, content = await _page_width(page)
    assert content == inside == width, "a scrollbar shown on a page that fits"
    await _shot(page, "dashboard", width)


@pytest.mark.parametrize("width", WIDTHS)
async def test_R5_L6_a_wire2_agent_says_its_version_once(
    browser: Browser, live: LiveGateway, width: int
) -> None:
    page = await _open(browser, live.url + "#/a/old", width)
    await expect(page.get_by_role("alert")).to_have_text(VERSION)
    text: Any = await page.locator("main").inner_text()
    assert text.count(VERSION) == 1, text
    await _shot(page, "wire2", width)


@pytest.mark.parametrize("width", WIDTHS)
async def test_D5_the_counts_say_what_they_count(
    browser: Browser, live: LiveGateway, width: int
) -> None:
    page = await _open(browser, live.url, width)
    row = page.locator("li[data-agent=desk]")
    await expect(row.locator(".count")).to_have_text(["2 open", "1 waiting"])
    for count in await row.locator(".count").all():
        edges = await count.bounding_box()
        assert edges is not None
        assert edges["x"] + edges["width"] <= width
    name = await _box(page, "li[data-agent=desk] .name")
    assert name["scroll"] <= name["client"], "the agent's name is cut"
    await expect(row.get_by_role("link")).to_have_accessible_name(
        re.compile(r"desk .*2 open.*1 waiting")
    )


@pytest.mark.parametrize("width", WIDTHS)
async def test_H1_a_title_beside_its_badge_stays_readable(
    browser: Browser, live: LiveGateway, width: int
) -> None:
    page = await _open(browser, live.url + "#/a/desk/c/ask", width)
    title = page.get_by_role("heading", name="Delete old notes")
    await expect(title).to_be_visible()
    box = await _box(page, ".top h1")
    whole: bool = await page.eval_on_selector(
        ".top h1", "e => e.scrollHeight <= e.clientHeight && e.scrollWidth <= e.clientWidth"
    )
    assert whole, f"the title is cut at {width} px: {box}"
    badge = await _box(page, ".top .badge")
    assert badge["scroll"] <= badge["client"]
    assert badge["left"] >= box["right"]
