"""A bridge's life in its process: start it, serve it on its socket until SIGINT or SIGTERM,
then one clean stop (the peer's side first, then the agent)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import ClassVar

from wire.agent import Agent, AgentRunner


class AgentBridge:
    """A peer made a durable agent: ``self.agent`` (built in ``__init__``, or by :meth:`start`
    when it needs the peer's answer first) and the peer's side, which a bridge adds to
    :meth:`start` and :meth:`close`.

    Usage::

        class Desk(AgentBridge):
            protocol = "desk"

            def __init__(self, state: Path) -> None:
                super().__init__(Agent(state_path=state, runtime="desk"))

        await serve_until_stopped(Desk(Path("desk.db")), Path("desk.sock"))
    """

    protocol: ClassVar[str] = "wire"  # the peer's protocol, in the bridge's lines
    refused: ClassVar[tuple[type[Exception], ...]] = (OSError,)  # a start refused so: exit 1

    def __init__(self, agent: Agent | None = None) -> None:
        self._agent = agent

    @property
    def agent(self) -> Agent:
        """The wire-v1 agent."""
        assert self._agent is not None, "start the bridge first"
        return self._agent

    async def start(self) -> None:
        """Open the agent's state file."""
        await self.agent.start()

    async def serve_unix(self, path: Path) -> AgentRunner:
        """Serve the wire side on a Unix socket (0600)."""
        return await self.agent.serve_unix(path)

    async def serve(self, socket: Path) -> None:
        """Serve what the process serves once started: the wire side on ``socket``."""
        await self.serve_unix(socket)

    async def close(self) -> None:
        """Stop serving and close the agent."""
        if self._agent is not None:
            await self._agent.close()

    def serving(self) -> str:
        """What the started bridge serves, named in its ready line."""
        return self.agent.hello.runtime or self.protocol

    def ready_line(self, socket: Path) -> str:
        """The line printed once the bridge serves on ``socket``."""
        return f"bridge {self.protocol}: serving {self.serving()} on {socket}"


async def serve_until_stopped(bridge: AgentBridge, socket: Path) -> int:
    """Start ``bridge`` (a start refused with one of its ``refused`` exits 1, said in one
    line), serve it on ``socket``, print its ready line, wait for SIGINT or SIGTERM, close it.
    Returns the exit code."""
    try:
        await bridge.start()
    except bridge.refused as exc:
        print(f"bridge {bridge.protocol}: {exc}", file=sys.stderr)
        await bridge.close()
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await bridge.serve(socket)
        print(bridge.ready_line(socket), flush=True)
        await stop.wait()
    finally:
        await bridge.close()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    return 0
