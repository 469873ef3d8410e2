"""One Chromium per test module of the web companion: launching it (and Playwright's driver)
for every test cost about a second of each. A module that imports these fixtures runs its
tests in one event loop (``pytestmark = LOOP``), since a browser belongs to the loop that
launched it; each test gets fresh contexts, closed after it, and its own ``rig`` and
``closing`` in that loop. The module's tests share one xdist worker (``tests/conftest.py``
groups a module-scoped scene)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient
from playwright.async_api import Browser, async_playwright

from fixtures.browser import LiveGateway, chromium_path
from tests.collie_gateway.conftest import Rig, rigged

LOOP: Final = pytest.mark.asyncio(loop_scope="module")


async def no_test_client(app: web.Application) -> TestClient[Any, Any]:
    """A browser test serves its gateway on a real port (``LiveGateway``), never in-process."""
    raise AssertionError("a browser test's rig has no in-process client: use LiveGateway")


async def launch(*args: str, ignored: list[str] | None = None) -> AsyncIterator[Browser]:
    """Debian's Chromium, closed with its driver at the end."""
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(
            executable_path=chromium_path(), args=list(args), ignore_default_args=ignored or []
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium() -> AsyncIterator[Browser]:
    """The module's Chromium."""
    async for launched in launch():
        yield launched


async def fresh(launched: Browser) -> AsyncIterator[Browser]:
    """``launched`` for one test: every context the test opened is closed after it."""
    try:
        yield launched
    finally:
        for context in list(launched.contexts):
            await context.close()


@pytest_asyncio.fixture(loop_scope="module")
async def browser(chromium: Browser) -> AsyncIterator[Browser]:
    """The module's Chromium for one test."""
    async for launched in fresh(chromium):
        yield launched


async def agents() -> AsyncIterator[Rig]:
    """Agents on sockets in a fresh folder, closed at the end."""
    async for made in rigged(no_test_client):
        yield made


@pytest_asyncio.fixture(loop_scope="module")
async def rig() -> AsyncIterator[Rig]:
    """Agents on sockets, in the module's loop."""
    async for made in agents():
        yield made


@pytest_asyncio.fixture(loop_scope="module")
async def closing() -> AsyncIterator[list[LiveGateway]]:
    """Live gateways the test opened, closed after it."""
    opened: list[LiveGateway] = []
    yield opened
    for live in opened:
        await live.close()
