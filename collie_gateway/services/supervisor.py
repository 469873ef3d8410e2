"""Bridges the gateway starts and keeps running: any command line that serves a wire-v1 agent
on a Unix socket (``bridges.acp`` today). Each is restarted with backoff when it exits; every
line it prints goes to the gateway's log, under ``collie_gateway.bridge.<name>``, at the level
the line names (else INFO from its output, WARNING from its errors).

With several workers (PostgreSQL) each bridge runs on one worker, the holder of its duty
lease (``services/following.py``): :meth:`Supervisor.run` and :meth:`Supervisor.stop` follow
the lease. A bridge dies with its worker (Linux: ``PR_SET_PDEATHSIG``), so a worker killed
-9 leaves no bridge serving its socket when another takes its place."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence

from bridges.loglines import split_level
from collie_gateway.services.tasks import cancelled
from collie_gateway.sources import Backoff, BridgeCommand

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """In the child, before it runs: SIGTERM when the gateway dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return arm


_ARM = _die_with_parent()


class Supervised:
    """One bridge: started, watched, restarted, stopped."""

    def __init__(self, command: BridgeCommand, backoff: Backoff) -> None:
        self.command = command
        self.backoff = backoff
        self.log = logging.getLogger(f"collie_gateway.bridge.{command.name}")
        self.starts = 0
        self.process: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called."""
        return self._task is not None

    def start(self) -> None:
        """Start watching (the first run starts at once)."""
        self._task = asyncio.create_task(self._run(), name=f"bridge-{self.command.name}")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self.backoff.first
        cmd = self.command
        while not self._stop.is_set():
            started = loop.time()
            try:
                # The default folder (~/.collie/agents) on a fresh machine: only the person's.
                cmd.socket.expanduser().parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                self.process = await asyncio.create_subprocess_exec(
                    *cmd.argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    cwd=cmd.cwd,
                    env={**os.environ, **cmd.env},
                    start_new_session=True,
                    preexec_fn=_ARM,  # one prctl call between fork and exec
                )
            except OSError as exc:
                self.log.error("bridge %s cannot start: %s", cmd.name, exc)
                code: int | None = None
            else:
                self.starts += 1
                assert self.process.stdout is not None
                assert self.process.stderr is not None
                await asyncio.gather(
                    self._relay(self.process.stdout, logging.INFO),
                    self._relay(self.process.stderr, logging.WARNING),
                )
                code = await self.process.wait()
            if self._stop.is_set():
                return
            if loop.time() - started > self.backoff.stable:
                delay = self.backoff.first
            self.log.warning("bridge %s exited (%s); restarting in %.1f s", cmd.name, code, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.backoff.cap)

    async def _relay(self, stream: asyncio.StreamReader, default: int) -> None:
        """Log each line the bridge prints at its own level (else ``default``: INFO for its
        output, WARNING for its errors), under the gateway's timestamp only."""
        while line := await stream.readline():
            level, text = split_level(line.decode("utf-8", "replace").rstrip(), default)
            self.log.log(level, "%s: %s", self.command.name, text)

    async def close(self) -> None:
        """Stop the bridge (SIGTERM, then SIGKILL after the grace period) and its watcher."""
        self._stop.set()
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
        await cancelled(self._task)


class Supervisor:
    """Every bridge of the gateway."""

    def __init__(self, commands: Sequence[BridgeCommand], backoff: Backoff | None = None) -> None:
        self.backoff = backoff or Backoff()
        self.children = {c.name: Supervised(c, self.backoff) for c in commands}
        self.running: set[str] = set()

    def start(self) -> None:
        """Start every bridge (one gateway alone)."""
        for name in self.children:
            self.run(name)

    def run(self, name: str) -> None:
        """Start the bridge ``name`` (this worker holds its lease), unless it runs here."""
        child = self.children.get(name)
        if child is None or name in self.running:
            return
        if child.started:  # it ran here before: anew
            child = self.children[name] = Supervised(child.command, self.backoff)
        self.running.add(name)
        child.start()

    async def stop(self, name: str) -> None:
        """Stop the bridge ``name`` (its lease is not this worker's any more)."""
        child = self.children.get(name)
        if child is not None and name in self.running:
            self.running.discard(name)
            await child.close()

    async def close(self) -> None:
        """Stop every bridge."""
        self.running.clear()
        await asyncio.gather(*(child.close() for child in self.children.values()))
