"""The real Codex TUI (npm ``@openai/codex``, installed into a folder of the tests' own on
first run) in a pseudo-terminal, offline against a fake Responses API, its hooks installed by
``collie-gateway hooks install codex`` (``collie-gateway hook codex`` carrying each to the
bridge): Allow and Deny from the phone.

Codex 0.171.0 runs hooks only with ``[features] hooks = true`` and once they are reviewed in
the TUI; the test passes ``--dangerously-bypass-hook-trust`` in place of that review."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from fixtures.hooks.fake_openai import COMMAND, FakeOpenAI
from tests.bridges.hooks_rig import Hooks, running
from tests.bridges.npm_clients import CACHE, CODEX, npm_binary
from tests.bridges.real_clients import Terminal, in_a_terminal, install_hooks, serving
from tests.collie_gateway.conftest import ClientFactory, eventually


@pytest.fixture
async def hooks(aiohttp_client: ClientFactory) -> AsyncIterator[Hooks]:
    async with running(aiohttp_client) as found:
        yield found


@dataclass
class Asked:
    """Codex in its terminal, waiting on the card its question raised."""

    term: Terminal
    conv: str
    ask: str
    fake: FakeOpenAI

    async def output(self) -> str:
        """The one command output Codex sent the model."""
        await eventually(lambda: bool(self.fake.outputs()), 60)
        [found] = self.fake.outputs()
        return found


@contextlib.asynccontextmanager
async def asked(hooks: Hooks) -> AsyncIterator[Asked]:
    """``codex`` asked to add two numbers unsandboxed, its question on the phone."""
    fake = FakeOpenAI()
    home = hooks.rig.tmp / "codex-home"
    shop = hooks.rig.tmp / "shop"
    home.mkdir()
    async with asyncio.timeout(180), serving(fake.app) as url:
        (home / "config.toml").write_text(
            f'model = "gpt-5-codex"\nmodel_provider = "fake"\napproval_policy = "on-request"\n'
            f'sandbox_mode = "read-only"\n[features]\nhooks = true\n'
            f'[model_providers.fake]\nname = "fake"\nbase_url = "{url}/v1"\n'
            f'wire_api = "responses"\nenv_key = "FAKE_KEY"\n'
            f'[projects."{shop}"]\ntrust_level = "trusted"\n'
        )
        install_hooks(hooks, "codex", {"CODEX_HOME": str(home)})
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(hooks.rig.tmp),
            "CODEX_HOME": str(home),
            "TERM": "xterm-256color",
            "FAKE_KEY": "fake",
            "PYTHONPATH": str(CACHE.parent),
        }
        binary = npm_binary(CODEX)
        argv = [str(binary), "--dangerously-bypass-hook-trust"]
        async with in_a_terminal(argv, env, shop) as term:
            await asyncio.sleep(5)  # the TUI draws by cursor moves: no line to wait for
            await term.type("add two numbers")
            await asyncio.sleep(0.5)
            await term.type("\r")
            try:
                [(conv, ask)] = await hooks.wait_asks(1, within=90)
            except AssertionError:
                raise AssertionError(term.text()[-3000:]) from None
            yield Asked(term, conv, ask, fake)


async def test_real_codex_allowed_on_the_phone(hooks: Hooks) -> None:
    async with asked(hooks) as it:
        title = hooks.bridge.agent._open_asks[it.ask].ask.title
        assert title == f"Codex · Bash: {COMMAND}"
        await hooks.answer(it.ask, {"option": "allow"})
        assert "42" in await it.output()
        # Its rollout (the hooks' transcript_path) read as the session's items.
        await hooks.wait_text(it.conv, "user", "add two numbers", 30)

        async def ran() -> bool:
            tools = [i for i in await hooks.items(it.conv) if i["kind"] == "tool"]
            return any("42" in (t.get("output") or "") for t in tools)

        await eventually(ran, 30)


async def test_real_codex_denied_on_the_phone(hooks: Hooks) -> None:
    async with asked(hooks) as it:
        await hooks.answer(it.ask, {"option": "deny"})
        output = await it.output()
        assert "Denied on the phone." in output  # Codex's rejection carries the message
        assert "42" not in output
