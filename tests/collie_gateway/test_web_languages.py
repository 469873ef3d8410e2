"""The web companion in Italian in a real browser (Chromium with an Italian locale, so its
requests say ``Accept-Language: it-IT``): the page's own words, the gateway's screens and
``<html lang>`` in Italian, the agent's words untouched (issue 26)."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

from playwright.async_api import Browser, Page, expect

from fixtures.browser import PHONE
from tests.collie_gateway import browser_scene as scene
from tests.collie_gateway.conftest import Rig, eventually
from tests.collie_gateway.test_web import (
    PERMISSION,
    SHOTS,
    TOOL,
    no_errors,
    page_errors,
    shot,
    site,
)

pytestmark = scene.LOOP  # one Chromium for the module's tests, and their fixtures:
chromium, browser, rig, closing = scene.chromium, scene.browser, scene.rig, scene.closing


async def open_in(browser: Browser, url: str, locale: str) -> Page:
    context = await browser.new_context(viewport=PHONE, color_scheme="light", locale=locale)  # type: ignore[arg-type]
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(url)
    page_errors[id(page)] = errors
    return page


async def test_web_the_companion_in_italian(rig: Rig, browser: Browser, closing: Any) -> None:
    s = await site(rig, closing)
    deadline = rig.clock() + timedelta(minutes=4, seconds=30)
    ask = await s.conv.ask(
        id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION,
        deadline=deadline,
    )  # fmt: skip
    await eventually(lambda: s.gw.agents.find_ask("desk", "p") is not None)
    page = await open_in(browser, s.live.url, "it-IT")
    assert await page.evaluate("document.documentElement.lang") == "it"
    await expect(page.get_by_role("heading", name="Agenti durevoli")).to_be_visible()
    row = page.locator("li[data-agent=desk] a")
    await expect(row).to_contain_text("Sperimentale")
    await expect(row.locator(".count").first).to_have_text("1 aperta")
    await row.click()
    await page.get_by_role("link", name=re.compile("Tidy up")).click()  # the agent's title
    card = page.locator("article.card[data-ask=p]")
    await expect(card).to_contain_text("Risposta richiesta · desk")
    await expect(card).to_contain_text("Scade tra 4 min")
    await expect(card).to_contain_text("Run ls?")
    await expect(card.get_by_role("button", name=re.compile("^Consenti sempre"))).to_be_visible()
    await expect(page.get_by_placeholder("Scrivi un messaggio")).to_be_visible()
    SHOTS.mkdir(parents=True, exist_ok=True)
    await shot(page, "permission-italian-light")
    await card.get_by_role("button", name=re.compile("^Consenti\\b")).first.click()
    await expect(card).to_have_count(0)
    resolution = await asyncio.wait_for(ask.wait(), 5)
    assert resolution.answer is not None
    assert resolution.answer.option == "allow"
    no_errors(page)


async def test_web_an_english_browser_reads_english(
    rig: Rig, browser: Browser, closing: Any
) -> None:
    s = await site(rig, closing)
    page = await open_in(browser, s.live.url, "fr-FR")  # no French catalogue: English
    assert await page.evaluate("document.documentElement.lang") == "en"
    await expect(page.get_by_role("heading", name="Durable agents")).to_be_visible()
    no_errors(page)
