"""The durable agents this gateway follows: one link each, their mirrors, and every call to
them behind the version gate (V1: nothing is sent to an agent of another wire version)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from collie_gateway.core.mirror import AgentMirror, LinkState
from collie_gateway.core.reconnect import LinkTiming
from collie_gateway.errors import AgentUnreachable, VersionRefused
from collie_gateway.services.links import AgentClient, AgentLink, Fetched, LinkListener, expect
from collie_gateway.sources import Source
from collie_gateway.strings import Catalogue
from wire.messages import WIRE_VERSION, Ask, CommandResult


class Agents:
    """Mirrors and links of every agent named in the sources, in dashboard order."""

    def __init__(
        self,
        sources: Sequence[Source],
        mirrors: Mapping[str, AgentMirror],
        catalogue: Catalogue,
        timing: LinkTiming,
    ) -> None:
        self.sources = {s.name: s for s in sources}
        self.mirrors = dict(mirrors)
        self.catalogue = catalogue
        self.timing = timing
        self.links: dict[str, AgentLink] = {}  # the agents this gateway follows
        # Agents another worker follows: a client for calls only (reads, commands).
        self._callers: dict[str, AgentClient] = {}

    def start(self, listener: LinkListener) -> None:
        """Start one link per agent, telling ``listener`` what each reads; at most
        ``timing.connecting`` of them read their hello and open conversations at once."""
        gate = asyncio.Semaphore(self.timing.connecting)
        for name, source in self.sources.items():
            link = AgentLink(source, self.mirrors[name], listener, self.timing, gate=gate)
            self.links[name] = link
            link.start()

    async def close(self) -> None:
        """Stop every link and client, all at once (thousands in one stop's time)."""
        await asyncio.gather(*(link.close() for link in list(self.links.values())))
        await asyncio.gather(*(caller.close() for caller in self._callers.values()))

    def mirror(self, agent: str) -> AgentMirror:
        """The agent's mirror (``KeyError`` for an agent not in the sources)."""
        return self.mirrors[agent]

    def open_asks(self) -> list[tuple[str, Ask, str | None]]:
        """(agent, ask, pane) of every ask open at this gateway's agents, as last read."""
        return [
            (mirror.name, ask, conv.title)
            for mirror in self.mirrors.values()
            for conv in list(mirror.conversations.values())
            for ask in conv.asks
        ]

    def version_warning(self, agent: str, catalogue: Catalogue | None = None) -> str | None:
        """R5's box for an agent refused for its wire version, in ``catalogue``'s language
        (default: the default's), else None."""
        mirror = self.mirrors[agent]
        if mirror.wire is None or mirror.wire == WIRE_VERSION:
            return None
        cat = catalogue or self.catalogue
        return cat.fmt("version_mismatch", theirs=mirror.wire, ours=WIRE_VERSION)

    def client(self, agent: str) -> AgentClient:
        """The agent's HTTP client, for an agent that speaks wire v1.

        Raises:
            VersionRefused: the agent speaks another wire version (V1: nothing is sent).
            AgentUnreachable: the link has not read the agent's hello in this run yet.
        """
        warning = self.version_warning(agent)
        if warning is not None:
            raise VersionRefused(warning, int(self.mirrors[agent].wire or 0))
        if self.mirrors[agent].state is LinkState.STARTING:
            # This run has not read the agent's hello yet: its stored wire version may be stale
            # (V1). Nothing is sent; a tap stays pending and goes once the link is ready.
            raise AgentUnreachable("the agent's hello has not been read yet")
        link = self.links.get(agent)
        if link is not None:
            return link.client
        caller = self._callers.get(agent)
        if caller is None:
            caller = self._callers[agent] = AgentClient(self.sources[agent], self.timing)
        return caller

    async def command(self, agent: str, path: str, body: object) -> CommandResult:
        """Send one command (the phone's request id inside) and decode its result.

        Raises:
            AgentUnreachable: no answer came back; the command may or may not have run.
            AgentRejected: refused (version) or the agent answered with an error.
        """
        fetched = await self.client(agent).post(path, body)
        return expect(fetched, CommandResult)

    async def starters(self, agent: str) -> Fetched:
        """The agent's starters, read on each visit of the New page."""
        return await self.client(agent).get("/starters", limit=1024 * 1024)

    def find_ask(self, agent: str, ask_id: str) -> Ask | None:
        """The open ask ``ask_id`` of ``agent``, as mirrored."""
        for conv in self.mirrors[agent].conversations.values():
            for ask in conv.asks:
                if ask.id == ask_id:
                    return ask
        return None

    def ready(self) -> list[str]:
        """The agents whose link is ready now."""
        return [n for n, m in self.mirrors.items() if m.state is LinkState.READY]
