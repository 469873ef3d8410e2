"""The real ``claude`` binary (npm ``@anthropic-ai/claude-code``, installed into a folder of
the tests' own on first run) in a pseudo-terminal, offline against a fake Anthropic API, its
hooks installed by ``collie-gateway hooks install``: Allow and Deny from the phone, and the
desk answering first."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from bridges.hooks import mapping
from fixtures.hooks.fake_anthropic import COMMAND, FakeAnthropic
from tests.bridges.hooks_rig import Hooks, running
from tests.bridges.npm_clients import CLAUDE, npm_binary
from tests.bridges.real_clients import Terminal, in_a_terminal, install_hooks, serving
from tests.collie_gateway.conftest import ClientFactory, eventually

DESK_FIRST = mapping.DESK_FIRST.format(client="Claude Code")
KEY = "sk-ant-api03-" + "x" * 40 + "fakefakefakefake1234"


@contextlib.asynccontextmanager
async def claude_in_a_terminal(hooks: Hooks, api_url: str) -> AsyncIterator[Terminal]:
    home = hooks.rig.tmp / "home"
    shop = hooks.rig.tmp / "shop"
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    (home / ".claude.json").write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "lastOnboardingVersion": CLAUDE.version,
                "customApiKeyResponses": {"approved": [KEY[-20:]], "rejected": []},
                "projects": {str(shop): {"hasTrustDialogAccepted": True}},
            }
        )
    )
    install_hooks(hooks, "claude-code", {"HOME": str(home)})
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "TERM": "xterm-256color",
        "ANTHROPIC_BASE_URL": api_url,
        "ANTHROPIC_API_KEY": KEY,
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    binary = npm_binary(CLAUDE)
    async with in_a_terminal([str(binary)], env, shop) as term:
        yield term


@pytest.fixture
async def hooks(aiohttp_client: ClientFactory) -> AsyncIterator[Hooks]:
    async with running(aiohttp_client) as found:
        yield found


@pytest.fixture
async def api() -> AsyncIterator[tuple[FakeAnthropic, str]]:
    fake = FakeAnthropic()
    async with serving(fake.app) as url:
        yield fake, url


@dataclass
class Asked:
    """Claude Code in its terminal, waiting on the card its question raised."""

    term: Terminal
    conv: str
    ask: str
    fake: FakeAnthropic

    async def result(self) -> dict[str, Any]:
        """The one tool result Claude Code sent the model."""
        await eventually(lambda: bool(self.fake.tool_results()), 60)
        [found] = self.fake.tool_results()
        return found


@contextlib.asynccontextmanager
async def asked(hooks: Hooks, api: tuple[FakeAnthropic, str]) -> AsyncIterator[Asked]:
    """``claude`` asked to add two numbers, its Bash question on the phone (180 s at most)."""
    fake, url = api
    async with asyncio.timeout(180), claude_in_a_terminal(hooks, url) as term:
        await eventually(lambda: "shortcuts" in term.text(), 60)  # the prompt box
        await asyncio.sleep(0.5)
        await term.type("add two numbers")
        await asyncio.sleep(0.3)
        await term.type("\r")
        try:
            [(conv, ask)] = await hooks.wait_asks(1, within=90)
        except AssertionError:
            raise AssertionError(term.text()[-3000:]) from None
        yield Asked(term, conv, ask, fake)


async def test_real_claude_allowed_on_the_phone(
    hooks: Hooks, api: tuple[FakeAnthropic, str]
) -> None:
    async with asked(hooks, api) as it:
        title = hooks.bridge.agent._open_asks[it.ask].ask.title
        assert title == f"Claude Code · Bash: {COMMAND}"
        await hooks.answer(it.ask, {"option": "allow"})
        result = await it.result()
        assert (result["content"], result["is_error"]) == ("42", False)
        await hooks.wait_text(it.conv, "reply", "Done.", within=30)
        tools = [i for i in await hooks.items(it.conv) if i["kind"] == "tool"]
        assert [(t["name"], t["status"], t["output"]) for t in tools] == [("Bash", "done", "42")]


async def test_real_claude_denied_on_the_phone(
    hooks: Hooks, api: tuple[FakeAnthropic, str]
) -> None:
    async with asked(hooks, api) as it:
        await hooks.answer(it.ask, {"option": "deny"})
        result = await it.result()
        assert result["is_error"] is True
        assert "Denied on the phone." in json.dumps(result["content"])


async def test_real_claude_the_desk_answers_first(
    hooks: Hooks, api: tuple[FakeAnthropic, str]
) -> None:
    async with asked(hooks, api) as it:
        await eventually(lambda: "proceed?" in it.term.text().replace(" ", ""), 30)
        await it.term.type("1")  # "Yes", at the desk
        result = await it.result()
        assert (result["content"], result["is_error"]) == ("42", False)
        await hooks.wait_asks(0, within=10)  # within seconds, not at the next Stop
        late = await hooks.answer(it.ask, {"option": "deny"}, request_id="late")
        assert late["outcome"] == "decided"
        await hooks.wait_text(it.conv, "notice", DESK_FIRST)
