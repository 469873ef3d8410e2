"""Bridges the gateway runs itself (``sources.json`` entries such as ``"stalwart": {…}``): each
is a command line serving a wire-v1 agent on a Unix socket. A bridge that exits is started
again after a pause that doubles up to a cap (and starts over after a long run); every line it
prints goes to the gateway's log under ``collie_gateway.bridge.<name>``.

Minimal on purpose (issue 14); the generic supervisor of issue 13 replaces it when merged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class BridgeCommand:
    """A bridge: ``argv`` serves its agent on ``socket``; ``env`` is added to the gateway's."""

    name: str
    argv: tuple[str, ...]
    socket: Path
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Pauses before a restart: ``first`` seconds, doubling up to ``cap``; a run longer than
    ``stable`` starts from ``first`` again. ``grace``: SIGTERM, then this long, then SIGKILL."""

    first: float = 0.5
    cap: float = 30.0
    stable: float = 10.0
    grace: float = 5.0


class _Child:
    def __init__(self, command: BridgeCommand, backoff: Backoff) -> None:
        self.command = command
        self.backoff = backoff
        self.log = logging.getLogger(f"collie_gateway.bridge.{command.name}")
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def watch(self) -> None:
        loop = asyncio.get_running_loop()
        pause = self.backoff.first
        while not self.stopping.is_set():
            began = loop.time()
            code: int | None = None
            try:
                self.process = await asyncio.create_subprocess_exec(
                    *self.command.argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    env={**os.environ, **self.command.env},
                    start_new_session=True,  # its children are stopped with it
                )
            except OSError as exc:
                self.log.error("cannot start: %s", exc)
            else:
                self.starts += 1
                assert self.process.stdout is not None
                async for line in self.process.stdout:
                    self.log.warning("%s", line.decode("utf-8", "replace").rstrip())
                code = await self.process.wait()
            if self.stopping.is_set():
                return
            if loop.time() - began > self.backoff.stable:
                pause = self.backoff.first
            self.log.warning("exited (%s); starting again in %.1f s", code, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, self.backoff.cap)

    async def stop(self) -> None:
        self.stopping.set()
        proc = self.process
        if proc is not None and proc.returncode is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    await asyncio.wait_for(proc.wait(), self.backoff.grace)
                    break
                except TimeoutError:
                    continue
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


class Supervisor:
    """Every bridge of the gateway: :meth:`start`, then :meth:`close`."""

    def __init__(self, commands: Sequence[BridgeCommand], backoff: Backoff | None = None) -> None:
        self.children = {c.name: _Child(c, backoff or Backoff()) for c in commands}

    def start(self) -> None:
        """Start each bridge (and watch it)."""
        for child in self.children.values():
            child.task = asyncio.ensure_future(child.watch())

    async def close(self) -> None:
        """Stop each bridge."""
        await asyncio.gather(*(child.stop() for child in self.children.values()))
