"""The real command-line agents for the hooks tests: installed with npm into a folder of the
tests' own (``.cache/``, on first use), run in a pseudo-terminal, their hooks installed by
``collie-gateway hooks install`` pointing at the rig's bridge, a fake model API served on
127.0.0.1 (``../shared/notes/real-clients.md`` says what each needs)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from collie_gateway.__main__ import main
from tests.bridges.hooks_rig import Hooks

CACHE = Path(__file__).resolve().parents[2] / ".cache"


def npm_binary(package: str, version: str, native: str, bin_name: str) -> Path:
    """``package``'s native binary (``native``: a glob under ``node_modules``), installed
    with npm when missing (a few seconds here); npm may leave a wrapper's postinstall unrun,
    so the platform package's binary is preferred to ``.bin/<bin_name>``.

    Test processes running in parallel take turns (a lock file): one installs, into a folder
    of its own renamed into place whole, and the others then find it there."""
    name = f"{package.rsplit('/', 1)[-1]}-{version}"
    where = CACHE / name
    wrapper = where / "node_modules" / ".bin" / bin_name
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not wrapper.exists():
            shutil.rmtree(where, ignore_errors=True)  # a partial install of an older run
            fresh = tempfile.mkdtemp(dir=CACHE, prefix=f"{name}.")
            try:
                argv = ["npm", "install", "--prefix", fresh, "--no-audit", "--no-fund"]
                subprocess.run(
                    [*argv, f"{package}@{version}"], check=True, timeout=600, capture_output=True
                )
                os.rename(fresh, where)
            finally:
                shutil.rmtree(fresh, ignore_errors=True)  # what is left of a failed install
    found = sorted((where / "node_modules").glob(native))
    return found[0] if found else wrapper


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
