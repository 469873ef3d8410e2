"""Issue 22: the web companion's service worker in Chromium (Debian's, driven by Playwright).

Pushes are delivered through the DevTools protocol (``ServiceWorker.deliverPushMessage``),
their data the plaintext the gateway encrypts (``push.webpush_message``): the worker shows the
ask, a newer ask in the same pane replaces it, and a withdrawal closes exactly the
notification of its ask.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from playwright.async_api import CDPSession, Page, async_playwright, expect

from collie_gateway.settings import Settings
from collie_gateway.strings import Catalogue
from fixtures.browser import PHONE, LiveGateway, chromium_path
from push import (
    AskNotification,
    Content,
    Delivery,
    Device,
    Notification,
    Outcome,
    Provider,
    Withdrawal,
    webpush_message,
)
from tests.collie_gateway.push_fixtures import serve
from tests.push.webpush_fakes import Browser

# Ours only: Chromium may add its own "updated in the background" notice for a push that
# showed nothing (the not-a-Collie-push test sends some), which carries no data of ours.
NOTIFICATIONS = (
    "navigator.serviceWorker.getRegistration('/web/')"
    ".then(r => r.getNotifications())"
    ".then(ns => ns.filter(n => n.data && n.data.type)"
    ".map(n => ({title: n.title, body: n.body, tag: n.tag, data: n.data})))"
)
READY = """navigator.serviceWorker.register('/web/sw.js').then(r => new Promise(done => {
  const w = r.installing || r.waiting || r.active;
  if (w.state === 'activated') done();
  w.addEventListener('statechange', () => { if (w.state === 'activated') done(); });
}))"""


def ask(n: int, pane: str = "c1") -> AskNotification:
    return AskNotification(
        machine="m1", agent="desk", conversation=pane, ask=f"a{n}", pane_key=f"m1/desk/{pane}",
        pane="Deploy", title=f"Run step {n}?", line="make deploy", push_id=f"once-{n}",
    )  # fmt: skip


DEVICE = Device(
    id="d-web",
    provider=Provider.WEBPUSH,
    token="https://push.example.org/p",
    registered_at=0.0,
    webpush=Browser().keys,
)


@dataclass
class Worker:
    page: Page
    cdp: CDPSession
    origin: str
    registration: str

    async def push(self, note: Notification | Withdrawal) -> None:
        content = Content(strings=Catalogue())
        data = webpush_message(DEVICE, note, content=content, now=0.0).plaintext.decode()
        await self.push_raw(data)

    async def push_raw(self, data: str) -> None:
        await self.cdp.send(
            "ServiceWorker.deliverPushMessage",
            {"origin": self.origin, "registrationId": self.registration, "data": data},
        )

    async def shown(
        self, count: int, within: float = 15.0, asks: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """The notifications, once ``count`` show (of ``asks``, sorted, if given; polled, 15 s
        at most: a loaded machine)."""
        notes: list[dict[str, Any]] = []
        for _ in range(int(within / 0.05)):
            notes = await self.page.evaluate(NOTIFICATIONS)
            if len(notes) == count and (
                asks is None or sorted(n["data"]["ask"] for n in notes) == asks
            ):
                return notes
            await asyncio.sleep(0.05)
        raise AssertionError(f"{len(notes)} notifications, not {count} {asks or ''}: {notes}")

    async def deliver(
        self, note: Notification | Withdrawal, count: int, asks: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Push ``note`` until ``count`` notifications show (see ``shown``). On a loaded
        machine the DevTools path may lose a push (the browser restarts a worker it stopped):
        it is delivered again, up to three times, as a push service retries; a notification
        has one tag per pane, so a second delivery still shows once."""
        for attempt in range(3):
            await self.push(note)
            try:
                return await self.shown(count, within=5.0 if attempt < 2 else 15.0, asks=asks)
            except AssertionError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


async def attach(page: Page, cdp: CDPSession, origin: str) -> Worker:
    """The worker the page registered, once it is active."""
    registrations: dict[str, str] = {}
    running: set[str] = set()  # registrations whose active version runs

    def updated(event: dict[str, Any]) -> None:
        for reg in event["registrations"]:
            registrations[reg["scopeURL"]] = reg["registrationId"]

    def versions(event: dict[str, Any]) -> None:
        for version in event["versions"]:
            if (version["status"], version["runningStatus"]) == ("activated", "running"):
                running.add(version["registrationId"])

    cdp.on("ServiceWorker.workerRegistrationUpdated", updated)
    cdp.on("ServiceWorker.workerVersionUpdated", versions)
    await cdp.send("ServiceWorker.enable")
    await page.evaluate(READY)
    # A push delivered before the worker runs may be lost by the DevTools path: wait for it.
    for _ in range(600):
        if registrations.get(origin + "/web/") in running:
            break
        await asyncio.sleep(0.05)
    return Worker(page, cdp, origin, registrations[origin + "/web/"])


@contextlib.asynccontextmanager
async def chromium_page(origin: str) -> AsyncIterator[tuple[Page, CDPSession]]:
    """A page of ``origin`` in Chromium, notifications allowed, with a DevTools session."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path())
        try:
            context = await browser.new_context(viewport=PHONE)  # type: ignore[arg-type]
            await context.grant_permissions(["notifications"], origin=origin)
            page = await context.new_page()
            yield page, await context.new_cdp_session(page)
        finally:
            await browser.close()


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    """The service worker alone, served from a bare page of the tests' own."""
    web_dir = resources.files("collie_gateway").joinpath("web")

    async def index(request: web.Request) -> web.Response:
        return web.Response(text="<!doctype html><title>Collie</title>", content_type="text/html")

    async def sw(request: web.Request) -> web.Response:
        body = web_dir.joinpath("sw.js").read_bytes()
        return web.Response(body=body, content_type="text/javascript")

    app = web.Application()
    app.router.add_get("/", index)
    app.router.add_get("/web/sw.js", sw)
    async with serve(app) as origin, chromium_page(origin) as (page, cdp):
        await page.goto(origin + "/")
        yield await attach(page, cdp, origin)


async def test_an_ask_shows_and_its_withdrawal_closes_it(worker: Worker) -> None:
    [note] = await worker.deliver(ask(1), 1)
    assert note["title"] == "Permission needed in Deploy"
    assert note["body"] == "Run step 1?\nmake deploy"
    assert note["data"] == {
        "type": "ask", "machine": "m1", "agent": "desk", "conversation": "c1", "ask": "a1",
    }  # fmt: skip
    assert await worker.deliver(Withdrawal.of(ask(1)), 0) == []


async def test_a_withdrawal_closes_only_its_own_ask(worker: Worker) -> None:
    await worker.deliver(ask(1), 1)
    await worker.deliver(ask(9, pane="c2"), 2)
    # the same pane: replaces ask 1's notification (one tag)
    await worker.deliver(ask(2), 2, asks=["a2", "a9"])
    await worker.push(Withdrawal.of(ask(1)))  # ask 1 no longer shows: nothing closes
    await asyncio.sleep(0.3)
    assert len(await worker.shown(2)) == 2
    [left] = await worker.deliver(Withdrawal.of(ask(2)), 1)
    assert left["data"]["ask"] == "a9"


async def test_what_is_not_a_collie_push_shows_nothing_of_ours(worker: Worker) -> None:
    for data in ("not json", json.dumps({"v": 2, "tag": "x", "title": "t"}), "[]"):
        await worker.push_raw(data)
    # the worker threw on the ones before; the browser may restart it (see ``deliver``)
    [note] = await worker.deliver(ask(1), 1)
    assert note["data"]["ask"] == "a1"
    assert len(await worker.page.evaluate(NOTIFICATIONS)) == 1  # nothing of the others


async def test_the_page_installs_registers_its_worker_and_shows_a_push(tmp_path: Path) -> None:
    """The real page from a gateway: its manifest and worker pass its CSP; a tap on
    "Notifications on this device" registers the worker (the browser's own push service is
    out of reach here, so the subscription itself fails and the page says so)."""
    live = LiveGateway(Settings(sources=[], db_path=tmp_path / "gateway.db"))
    await live.start()
    try:
        origin = live.url.rstrip("/")
        async with chromium_page(origin) as (page, cdp):
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            await page.goto(live.url)
            manifest = await page.evaluate(
                "fetch(document.querySelector('link[rel=manifest]').href).then(r => r.json())"
            )
            assert (manifest["name"], manifest["display"]) == ("Collie", "standalone")
            assert live.gateway is not None  # a silent outage, as the page shows it
            failure = Delivery.of(DEVICE, Outcome.FAILED, "HTTP 503", status=503)
            await live.gateway.pushing.health.record([DEVICE], failure)
            await page.get_by_role("link", name="Notifications").click()
            health = page.locator("#push-health li")
            await expect(health).to_have_count(1, timeout=10_000)
            await expect(health).to_contain_text("Web Push: failing since ")
            await expect(health).to_contain_text("(HTTP 503)")
            await page.get_by_role("button", name="Notifications on this device").click()
            status = page.locator("#notify-status")
            # Headless Chromium has no push service: the subscription is refused, and said.
            await expect(status).to_have_text(
                "Notifications could not be turned on.", timeout=20_000
            )
            worker = await attach(page, cdp, origin)
            [note] = await worker.deliver(ask(1), 1)
            assert note["title"] == "Permission needed in Deploy"
            assert not [e for e in errors if "Content Security Policy" in e], errors
    finally:
        await live.close()
