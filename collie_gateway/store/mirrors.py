"""The mirror of open conversations: agents' hellos and states, open conversations.

Flushed in batches: each flush writes the dirty conversations and the agent's last event id
in one transaction, so after a crash the link resumes from an event id that matches what
was stored.

With several workers the holder of an agent's lease flushes its mirror, and the flush is
fenced as the link's other writes: :attr:`MirrorsRepo.fence` gives the epoch this worker
holds each agent under, and the rows of an agent whose epoch is not live are not written.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from collie_gateway.core.mirror import AgentMirror
from collie_gateway.store.engine import Db, Tx
from wire.messages import Conversation, Hello
from wire.tasks import all_cancelled

log = logging.getLogger(__name__)

# A flush this small runs on SQLite's loop connection; a bigger one (a snapshot of many open
# conversations) goes to its thread so the loop is never held for long.
SMALL_FLUSH_BYTES = 64 * 1024

_UPSERT_AGENT = (
    "INSERT INTO agents(name, state, reason, hello, wire, last_event_id) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET state=excluded.state,"
    " reason=excluded.reason, hello=excluded.hello, wire=excluded.wire,"
    " last_event_id=excluded.last_event_id"
)
_PUT = (
    "INSERT INTO conversations(agent, id, body) VALUES (?, ?, ?)"
    " ON CONFLICT (agent, id) DO UPDATE SET body = excluded.body"
)

_conv_decoder = msgspec.json.Decoder(Conversation)
_hello_decoder = msgspec.json.Decoder(Hello)
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class MirrorBatch:
    """The rows of one flush, taken at one moment of the mirror."""

    agents: list[tuple[Any, ...]]  # (name, state, reason, hello, wire, last_event_id)
    wipe: list[str]  # agents whose every conversation row is rewritten
    puts: list[tuple[str, str, bytes]]  # (agent, conversation id, body)
    deletes: list[tuple[str, str]]  # (agent, conversation id)


class MirrorBatches(ABC):
    """Dirty marks, the flusher and the rows of each flush; a backend writes them
    (``_write``) and reads them back (``_read``)."""

    _errors: tuple[type[BaseException], ...] = (OSError,)  # a flush failing: retried

    def __init__(self) -> None:
        self._dirty: dict[str, set[str]] = {}
        self._dirty_agents: set[str] = set()
        self._mirrors: dict[str, AgentMirror] = {}
        self._flush_wanted = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None

    @abstractmethod
    async def _read(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """Every stored (name, hello, wire, last_event_id) and (agent, body)."""

    @abstractmethod
    async def _write(self, batch: MirrorBatch) -> None:
        """Write one batch in one transaction."""

    async def close(self) -> None:
        """Stop the flusher and write what is pending."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            await all_cancelled([flusher])  # again while it goes on (a cancel may be lost)
        await self.flush()

    async def load_mirrors(self, names: Iterable[str]) -> dict[str, AgentMirror]:
        """The last stored mirror of each named agent; state ``STARTING`` until its link runs."""
        mirrors = {name: AgentMirror(name=name) for name in names}
        agents, conversations = await self._read()
        for name, hello, wire, last in agents:
            mirror = mirrors.get(name)
            if mirror is None:
                continue
            mirror.hello = _hello_decoder.decode(hello) if hello else None
            mirror.wire = wire
            mirror.last_event_id = last
        for agent, body in conversations:
            mirror = mirrors.get(agent)
            if mirror is not None:
                mirror.put(_conv_decoder.decode(body))
        self._mirrors = mirrors
        return mirrors

    def mark(self, agent: str, conversation_id: str | None = None) -> None:
        """Note that ``agent`` (and one of its conversations) changed; a flush follows."""
        self._dirty_agents.add(agent)
        if conversation_id is not None:
            self._dirty.setdefault(agent, set()).add(conversation_id)
        self._flush_wanted.set()

    def mark_all(self, agent: str) -> None:
        """Note that every conversation of ``agent`` may have changed (a new snapshot)."""
        self._dirty[agent] = {"*"}
        self.mark(agent)

    def start_flusher(self, interval: float = 0.05) -> None:
        """Flush marked changes in the background, at most every ``interval`` seconds."""
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_loop(interval), name="store-flush")

    async def _flush_loop(self, interval: float) -> None:
        while True:
            await self._flush_wanted.wait()
            await asyncio.sleep(interval)
            try:
                await self.flush()
            except self._errors:
                log.exception("store flush failed; will retry")
                await asyncio.sleep(1.0)

    async def flush(self) -> None:
        """Write every marked change now, one transaction."""
        self._flush_wanted.clear()
        if not self._dirty_agents:
            return
        agents, self._dirty_agents = self._dirty_agents, set()
        dirty, self._dirty = self._dirty, {}
        # Snapshot the rows synchronously so the transaction matches one moment of the mirror.
        agent_rows: list[tuple[Any, ...]] = []
        wipe: list[str] = []
        puts: list[tuple[str, str, bytes]] = []
        deletes: list[tuple[str, str]] = []
        for name in agents:
            mirror = self._mirrors.get(name)
            if mirror is None:
                continue
            agent_rows.append(
                (
                    name,
                    mirror.state.value,
                    mirror.reason,
                    _encoder.encode(mirror.hello) if mirror.hello else None,
                    mirror.wire,
                    mirror.last_event_id,
                )
            )
            ids = dirty.get(name, set())
            if "*" in ids:
                wipe.append(name)
                ids = set(mirror.conversations)
            for cid in ids:
                conv = mirror.conversations.get(cid)
                if conv is None:
                    deletes.append((name, cid))
                else:
                    puts.append((name, cid, _encoder.encode(conv)))

        await self._write(MirrorBatch(agent_rows, wipe, puts, deletes))


class MirrorsRepo(MirrorBatches):
    """Agents and their open conversations, as last mirrored, in the store."""

    def __init__(self, db: Db) -> None:
        super().__init__()
        self.db = db
        self._errors = (*db.errors, OSError)
        #: The lease epoch this worker holds an agent under (None: not held); None: no fence.
        self.fence: Callable[[str], int | None] | None = None
        db.on_close(self.close)

    async def _read(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        async def read(tx: Tx) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
            agents = await tx.all("SELECT name, hello, wire, last_event_id FROM agents")
            return agents, await tx.all("SELECT agent, body FROM conversations")

        return await self.db.read(read, long=True)

    async def _write(self, batch: MirrorBatch) -> None:
        fence = self.fence

        async def write(tx: Tx) -> None:
            rows = batch if fence is None else await _fenced(tx, batch, fence)
            await tx.many(_UPSERT_AGENT, rows.agents)
            await tx.many("DELETE FROM conversations WHERE agent = ?", [(n,) for n in rows.wipe])
            await tx.many("DELETE FROM conversations WHERE agent = ? AND id = ?", rows.deletes)
            await tx.many(_PUT, rows.puts)

        size = sum(len(body) for _, _, body in batch.puts)
        await self.db.write(write, long=bool(batch.wipe) or size > SMALL_FLUSH_BYTES)


async def _fenced(tx: Tx, batch: MirrorBatch, fence: Callable[[str], int | None]) -> MirrorBatch:
    """The batch without the rows of agents whose lease this worker does not hold now
    (checked in the flush's transaction; the lease rows held to its end)."""
    names = {str(row[0]) for row in batch.agents} | set(batch.wipe)
    names |= {agent for agent, _ in batch.deletes} | {agent for agent, _, _ in batch.puts}
    epochs = {name: fence(name) for name in names}
    held = [(name, epoch) for name, epoch in epochs.items() if epoch is not None]
    from collie_gateway.store.pg.leases import live  # fenced: the shared store's leases

    kept = {name for name, _ in await live(tx, held)}
    return MirrorBatch(
        [row for row in batch.agents if row[0] in kept],
        [name for name in batch.wipe if name in kept],
        [put for put in batch.puts if put[0] in kept],
        [gone for gone in batch.deletes if gone[0] in kept],
    )
