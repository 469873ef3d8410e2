"""The web companion in Chromium on loopback.

Run: ``python bench/web_bench.py [--rounds N] [--events N]``.

(a) time to a drawn dashboard: from navigation start to the page's first drawn screen
(``window.collie.drawnAt``, ``performance.now()`` in the page), fresh page each round, beside
the same page's ``fetch`` of ``/api/v1/dashboard`` read as JSON (the API alone).
(b) time to a drawn chat of 500 items (replies, Markdown, code, tools, links), opened
directly by its address, beside the page's ``fetch`` of the same chat as JSON.
(c) the delay from an agent's event (a notice appended through the SDK) to the page's
change (a MutationObserver in the page sees the text), beside the same event read from the
API's stream (``GET /api/v1/events`` with aiohttp) in the same run.

The agent, the gateway and the stream reader share this process's event loop (so the API
reader and the page wait on the same gateway); Chromium is Debian's, driven by Playwright.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import aiohttp
from playwright.async_api import Browser, Page, async_playwright

from bench._common import Json, bench_main, heading, pct, ratio, row, short_dir, sse_events
from collie_gateway.settings import Settings
from collie_gateway.sources import Source
from fixtures.browser import PHONE, LiveGateway, chromium_path
from wire.agent import Agent, ConversationHandle
from wire.messages import FEATURES

CHAT_ITEMS = 500
DRAWN_TARGET_MS = 1000.0  # ours: a phone's screen within a second on loopback
DELAY_TARGET_MS = 100.0  # ours: an event reaches the page within 100 ms


async def big_chat(conv: ConversationHandle) -> None:
    """500 items of every kind the chat draws."""
    for n in range(CHAT_ITEMS):
        match n % 5:
            case 0:
                await conv.append(kind="reply", text=f"Reply {n}: the notes are in order.")
            case 1:
                await conv.append(kind="markdown", text=f"## Note {n}\n- **bold** and *soft*\n")
            case 2:
                await conv.append(kind="code", text=f"print({n})\n", language="python")
            case 3:
                await conv.append(kind="tool", call_id=f"c{n}", name="read", status="done")
            case _:
                await conv.append(kind="link", text="", url=f"https://example.org/{n}")


async def drawn_ms(browser: Browser, url: str, api_path: str) -> tuple[float, float]:
    """A fresh page at ``url``: ms to its first drawn screen, and ms for its fetch of
    ``api_path`` as JSON."""
    context = await browser.new_context(viewport=PHONE)  # type: ignore[arg-type]
    page = await context.new_page()
    await page.goto(url)
    for _ in range(400):
        if await page.evaluate("window.collie && window.collie.drawnAt"):
            break
        await asyncio.sleep(0.01)
    drawn = float(await page.evaluate("window.collie.drawnAt"))
    fetched = float(
        await page.evaluate(
            """async (path) => {
                const t = performance.now();
                await (await fetch(path)).json();
                return performance.now() - t;
            }""",
            api_path,
        )
    )
    await context.close()
    return drawn, fetched


async def watch(page: Page) -> None:
    """Record, in the page, the wall-clock ms when each ``tick-N`` text appears."""
    await page.evaluate(
        """() => {
            window.__seen = {};
            new MutationObserver((records) => {
                const now = performance.timeOrigin + performance.now();
                for (const r of records) for (const n of r.addedNodes) {
                    const m = /tick-(\\d+)\\./.exec(n.textContent || '');
                    if (m && !(m[1] in window.__seen)) window.__seen[m[1]] = now;
                }
            }).observe(document.getElementById('app'), {childList: true, subtree: true});
        }"""
    )


async def api_reader(http: aiohttp.ClientSession, url: str, seen: dict[int, float]) -> None:
    """The API's stream: the wall-clock ms when each ``tick-N`` item arrives."""
    async with http.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
        async for event in sse_events(resp):
            if event.event == "chat.item" and "tick-" in event.data:
                n = int(json.loads(event.data)["item"]["text"][5:-1])
                seen.setdefault(n, time.time() * 1000)


async def run(args: argparse.Namespace) -> Json:
    out: Json = {}
    with short_dir("wb-") as tmp:
        agent = Agent(
            state_path=tmp / "desk.db", runtime="desk", features=list(FEATURES), keep_events=50_000
        )
        runner = await agent.serve_unix(tmp / "desk.sock")
        live = LiveGateway(
            Settings(sources=[Source(name="desk", socket=tmp / "desk.sock")], db_path=tmp / "g.db")
        )
        try:
            big = await agent.open_conversation("big", title="Five hundred items")
            await big_chat(big)
            ticks = await agent.open_conversation("ticks", title="Ticks")
            await live.start()
            gw = live.gateway
            assert gw is not None
            for _ in range(500):
                if gw.mirrors["desk"].state.value == "ready":
                    break
                await asyncio.sleep(0.01)
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=chromium_path())
                dash = [
                    await drawn_ms(browser, live.url, "/api/v1/dashboard")
                    for _ in range(args.rounds)
                ]
                chat_api = "/api/v1/agents/desk/conversations/big"
                chat = [
                    await drawn_ms(browser, live.url + "#/a/desk/c/big", chat_api)
                    for _ in range(args.rounds)
                ]
                out["dashboard"] = dash
                out["chat"] = chat
                out["delay"] = await delays(browser, live, ticks, args.events)
                await browser.close()
        finally:
            await live.close()
            await runner.close()
            await agent.close()
    return out


async def delays(browser: Browser, live: LiveGateway, conv: ConversationHandle, n: int) -> Json:
    context = await browser.new_context(viewport=PHONE)  # type: ignore[arg-type]
    page = await context.new_page()
    await page.goto(live.url + "#/a/desk/c/ticks")
    await page.get_by_role("heading", name="Ticks").wait_for()
    await watch(page)
    sent: dict[int, float] = {}
    api_seen: dict[int, float] = {}
    async with aiohttp.ClientSession() as http:
        reader = asyncio.create_task(api_reader(http, live.url + "api/v1/events", api_seen))
        await asyncio.sleep(0.3)
        for i in range(n):
            sent[i] = time.time() * 1000
            await conv.append(kind="notice", text=f"tick-{i}.")
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    page_seen: dict[str, float] = await page.evaluate("window.__seen")
    await context.close()
    page_ms = [page_seen[str(i)] - sent[i] for i in range(n) if str(i) in page_seen]
    api_ms = [api_seen[i] - sent[i] for i in range(n) if i in api_seen]
    return {"page": page_ms, "api": api_ms, "sent": n}


def report(results: Any, args: argparse.Namespace) -> None:
    heading("(a) time to a drawn dashboard (ms from navigation start), fresh page each round")
    drawn = [d for d, _ in results["dashboard"]]
    fetched = [f for _, f in results["dashboard"]]
    median_drawn = statistics.median(drawn)
    row("page drawn, median / max", f"{median_drawn:.0f} / {max(drawn):.0f} ms")
    row("API fetch alone, median", f"{statistics.median(fetched):.1f} ms")
    row(
        "target",
        f"< {DRAWN_TARGET_MS:.0f} ms: {'MET' if median_drawn < DRAWN_TARGET_MS else 'MISSED'}",
    )
    heading(f"(b) time to a drawn chat of {CHAT_ITEMS} items (ms from navigation start)")
    drawn = [d for d, _ in results["chat"]]
    fetched = [f for _, f in results["chat"]]
    median_chat = statistics.median(drawn)
    row("page drawn, median / max", f"{median_chat:.0f} / {max(drawn):.0f} ms")
    row("API fetch alone, median", f"{statistics.median(fetched):.1f} ms")
    row(
        "target",
        f"< {DRAWN_TARGET_MS:.0f} ms: {'MET' if median_chat < DRAWN_TARGET_MS else 'MISSED'}",
    )
    d = results["delay"]
    heading(f"(c) an agent's event to what shows ({d['sent']} notices, 50 ms apart)")
    row("API stream (aiohttp) p50 / p95", f"{pct(d['api'], 50):.1f} / {pct(d['api'], 95):.1f} ms")
    row("page changed p50 / p95", f"{pct(d['page'], 50):.1f} / {pct(d['page'], 95):.1f} ms")
    row("page beside API, p50", ratio(pct(d["page"], 50), pct(d["api"], 50)))
    row("seen: page / API", f"{len(d['page'])} / {len(d['api'])} of {d['sent']}")
    p95 = pct(d["page"], 95)
    row("target", f"p95 < {DELAY_TARGET_MS:.0f} ms: {'MET' if p95 < DELAY_TARGET_MS else 'MISSED'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--events", type=int, default=50)
    bench_main(parser, run, report)
