"""The real command-line agents for the hooks tests (``npm_clients``: installed with npm into
a folder of the tests' own), run in a pseudo-terminal, their hooks installed by
``collie-gateway hooks install`` pointing at the rig's bridge, a fake model API served on
127.0.0.1 (``../shared/notes/real-clients.md`` says what each needs)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from collie_gateway.__main__ import main
from tests.bridges.hooks_rig import Hooks


@dataclass
class Terminal:
    """A program in a pseudo-terminal: what it printed, and keys typed into it."""

    proc: asyncio.subprocess.Process
    master: int
    screen: bytearray = field(default_factory=bytearray)

    def text(self) -> str:
        """What it printed, without terminal escapes (a TUI's spaces may be cursor moves)."""
        plain = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", b"", bytes(self.screen))
        return plain.decode(errors="replace")

    async def type(self, keys: str) -> None:
        for ch in keys:
            os.write(self.master, ch.encode())
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        await self.proc.wait()
        asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)


@contextlib.asynccontextmanager
async def in_a_terminal(
    argv: list[str], env: Mapping[str, str], cwd: Path
) -> AsyncIterator[Terminal]:
    """Run ``argv`` in a new pseudo-terminal (its own session, killed after)."""
    master, slave = os.openpty()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    os.close(slave)
    term = Terminal(proc, master)

    def readable() -> None:
        with contextlib.suppress(OSError):
            term.screen += os.read(master, 65536)

    asyncio.get_running_loop().add_reader(master, readable)
    try:
        yield term
    finally:
        await term.close()


def install_hooks(hooks: Hooks, client: str, env: Mapping[str, str]) -> None:
    """``collie-gateway hooks install CLIENT`` for the rig's bridge, under ``env``'s homes."""
    old = os.environ.copy()
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME"):
        os.environ.pop(name, None)
    os.environ.update(env)
    try:
        argv = ["hooks", "install", client, "--port", str(hooks.bridge.port)]
        assert main([*argv, "--keys", str(hooks.bridge.keys_path)]) == 0
    finally:
        os.environ.clear()
        os.environ.update(old)


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """``app`` on 127.0.0.1, a free port; yields its URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
