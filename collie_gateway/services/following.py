"""One follower per agent across workers (PostgreSQL): leases, and what links read shared.

Each worker tries, every third of a lease, to renew the leases it holds and to take those
nobody holds (``protocols.LeasesStore``; expiry on the database's clock). The holder of an
agent's lease runs its link, on a mirror of its own; the link's reads are written to the
shared log as entries fenced by the lease's epoch (:class:`RecordListener`): ``~link`` (state
and hello), ``~snapshot`` (the open conversations), ``~event`` (one agent event). Every worker,
the holder too, applies them in the log's order to the mirror its screens show
(:meth:`Following.apply`): the holder through every sink (pushes, answers, receipts, the
store's mirror, the phones' events, published under its epoch), the others quietly (rows
and chats kept current, nothing told: :data:`~collie_gateway.services.phonebus.QUIET`).
With what a run of its entries told the phones, in the same transaction, the holder writes
``~told`` (the last of its link's events applied); the others keep what they would have
told until a ``~told`` covers it, and the one that takes over a lease that ran out tells
what none covered (its holder died between writing its link's events and what they told).

Each round a worker also says it is live (a heartbeat row) and reads every live lease and
heartbeat (one survey); ``core/balance.py`` decides from it what the worker gives back (its
surplus over ⌈A/N⌉) and what free leases it takes. A lease given back for balance is a clean
hand-over: the link is stopped, what it read is written and applied as the holder's, then
its last state (``~sync``, under its epoch), the stored mirror flushed, then the lease freed;
the worker that takes it reads the log to its end, so its mirror is the log's even if it has
just started, and resumes the agent's stream after the last event the old holder read (no
snapshot, so no phone sees a reset). Duties (the crew's, a bridge's: ``~bridge/<name>``)
are taken by whoever finds them free.

A worker that cannot renew a lease drops the link at once; a write refused for a stale epoch,
or an entry of a newer epoch seen in the log, drops it too. A worker that starts writes
``~hello``; holders answer with ``~sync``, the state of their agents, so its mirrors need
not wait for the next change. A tap taken by a worker that does not hold the agent is handed
over with ``~want`` (services/answering.py); the holder sends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Final

import msgspec

from collie_gateway.core.balance import plan
from collie_gateway.core.mirror import AgentMirror, Change, LinkState, apply_event
from collie_gateway.core.reconnect import LinkTiming
from collie_gateway.services.links import AgentLink
from collie_gateway.services.phonebus import KEPT, QUIET, Localize, Publish, Untold
from collie_gateway.services.router import Router
from collie_gateway.services.tasks import Spawn, cancelled
from collie_gateway.services.worklog import ORIGIN
from collie_gateway.sources import Source
from collie_gateway.store.protocols import LeasesStore
from collie_gateway.store.values import WORKER_ROW, Holding, Lease, StoredEvent, Taken
from collie_gateway.store.values import LogRecord as Record
from wire.messages import AgentEvent, Conversation, Hello

log = logging.getLogger(__name__)

_encoder = msgspec.json.Encoder()


class LinkRec(msgspec.Struct, frozen=True):
    """``~link``: a link's state and hello."""

    state: str
    reason: str
    unauthorized: bool
    hello: Hello | None
    wire: int | None


class SnapRec(msgspec.Struct, frozen=True):
    """``~snapshot``: the open conversations read anew."""

    conversations: list[Conversation]
    last_event_id: str | None


class EventRec(msgspec.Struct, frozen=True):
    """``~event``: one agent event, and the agent's id of it."""

    id: str | None
    event: AgentEvent


class SyncRec(msgspec.Struct, frozen=True):
    """``~sync``: an agent's whole state, for a worker that just started."""

    link: LinkRec
    snapshot: SnapRec


class HelloRec(msgspec.Struct, frozen=True):
    """``~hello``: a worker wants the state of these agents (empty: of all)."""

    agents: list[str] = []


class WantRec(msgspec.Struct, frozen=True):
    """``~want``: a tap on this ask waits for the holder to send it."""

    ask_id: str


class ToldRec(msgspec.Struct, frozen=True):
    """``~told``: what the holder's link events up to this number told the phones is
    written (in the same transaction)."""

    seq: int


_link = msgspec.json.Decoder(LinkRec)
_snap = msgspec.json.Decoder(SnapRec)
_event = msgspec.json.Decoder(EventRec)
_sync = msgspec.json.Decoder(SyncRec)
_want = msgspec.json.Decoder(WantRec)
_hello = msgspec.json.Decoder(HelloRec)
_told = msgspec.json.Decoder(ToldRec)

Write = Callable[[Record], None]
RENEWALS: Final = 3  # a lease is renewed this many times in its time
BRIDGE: Final = "~bridge/"  # the duty of running a bridge named in sources.json
RETOLD: Final = 32  # ours: conversations whose rows a lease that ran out tells again
#: ours: link events per agent followed elsewhere whose phone events are kept until the
#: holder's ``~told`` covers them (it comes with the next write after the event's).
UNTOLD: Final = 1024

#: Per agent followed elsewhere: (the entry's number, its epoch, what it would tell).
Kept = deque[tuple[int, int, tuple[Untold, ...]]]


async def _nothing() -> None:
    return None


async def _no_work(agents: Collection[str] | None) -> None:
    return None


async def _none_read(agent: str, epoch: int) -> StoredEvent | None:
    return None


def _untold(type_: str, payload: object, localize: Localize | None = None, /) -> None:
    return None


def link_rec(mirror: AgentMirror) -> LinkRec:
    """The link part of ``mirror``."""
    return LinkRec(
        mirror.state.value, mirror.reason, mirror.unauthorized, mirror.hello, mirror.wire
    )


def _set_link(mirror: AgentMirror, rec: LinkRec) -> None:
    mirror.state, mirror.reason = LinkState(rec.state), rec.reason
    mirror.unauthorized, mirror.hello, mirror.wire = rec.unauthorized, rec.hello, rec.wire


def _set_snapshot(mirror: AgentMirror, rec: SnapRec) -> None:
    mirror.replace_all(rec.conversations)
    mirror.last_event_id = rec.last_event_id


def _same(mirror: AgentMirror, sync: SyncRec) -> bool:
    """Whether ``mirror`` holds the state ``sync`` carries."""
    snap = sync.snapshot
    return (
        link_rec(mirror) == sync.link
        and mirror.last_event_id == snap.last_event_id
        and list(mirror.conversations.values()) == snap.conversations
    )


class RecordListener:
    """The holder's link listener: what the link reads goes to the shared log, fenced.
    ``known``: the link's mirror is the agent's state as the log has it (resumed on a mirror
    that was, or a snapshot read since); until then it is not sent as a ``~sync``."""

    def __init__(self, write: Write, agent: str, epoch: int, *, known: bool = False) -> None:
        self.write = write
        self.agent = agent
        self.epoch = epoch
        self.known = known

    def _put(self, kind: str, body: msgspec.Struct) -> None:
        self.write(Record(kind, _encoder.encode(body), self.agent, self.epoch))

    def link_changed(self, mirror: AgentMirror) -> None:
        self._put("~link", link_rec(mirror))

    def snapshot_taken(self, mirror: AgentMirror) -> None:
        convs = list(mirror.conversations.values())
        self._put("~snapshot", SnapRec(convs, mirror.last_event_id))
        self.known = True

    def event_received(self, mirror: AgentMirror, event: AgentEvent, change: Change) -> None:
        self._put("~event", EventRec(mirror.last_event_id, event))


class Following:
    """This worker's leases: the links it runs, and the log's link entries applied."""

    def __init__(
        self,
        leases: LeasesStore,
        sources: Sequence[Source],
        mirrors: dict[str, AgentMirror],
        links: dict[str, AgentLink],
        timing: LinkTiming,
        write: Write,
        spawn: Spawn,
        duties: Sequence[str] = (),
    ) -> None:
        self.me = leases.holder
        self.leases = leases
        self.sources = {s.name: s for s in sources}
        self.mirrors = mirrors  # the mirrors the screens show
        self.links = links  # the links this worker runs (Agents.links)
        self.timing = timing
        self.gate = asyncio.Semaphore(timing.connecting)  # links reading their hello at once
        self.write = write
        self.spawn = spawn
        self.duties = tuple(duties)  # leases without a link (the crew's publishing)
        self.held: dict[str, Lease] = {}
        self.full: Router | None = None  # every sink: the holder's
        self.quiet: Router | None = None  # what keeps screens current: the others'
        #: A tap handed over for an agent this worker holds: (agent, ask id) to send.
        self.on_want: Callable[[str, str], None] = lambda agent, ask_id: None
        #: A duty taken (True) or lost (False): a bridge's starts or stops here.
        self.on_duty: Callable[[str, bool], None] = lambda name, held: None
        #: Everything this worker's link wrote is written, applied and the mirror flushed.
        self.settle: Callable[[], Awaitable[None]] = _nothing
        #: The work spawned for these agents (None: any) as their holder has ended (push
        #: decisions in flight made here, not lost with the lease), within a bound.
        self.finish_work: Callable[[Collection[str] | None], Awaitable[None]] = _no_work
        #: A lease taken over (handed over, or run out) and resumed without a snapshot:
        #: what the old holder left undecided is decided here (called under the new epoch).
        self.on_taken_over: Callable[[str], None] = lambda name: None
        #: A lease that ran out resumed: the agent's row and these conversations' rows are
        #: told the phones again (under the new epoch).
        self.retell: Callable[[str, Sequence[str]], None] = lambda agent, convs: None
        #: Tells the phones one event (the bus's publish): what an old holder left untold.
        self.tell: Publish = _untold
        #: The log read to its end (what a worker that gave a lease back wrote).
        self.catch_up: Callable[[], Awaitable[None]] = _nothing
        #: The last entry a link of the agent wrote under the epoch, if still in the log.
        self.last_read: Callable[[str, int], Awaitable[StoredEvent | None]] = _none_read
        self.seen: list[Holding] = []  # the last survey
        #: Agents whose screens' mirror is the log's: a snapshot or sync of them applied
        #: since this worker started, and every entry since (no gap).
        self.current: set[str] = set()
        self._task: asyncio.Task[None] | None = None  # the renewals
        self._balancing: asyncio.Task[None] | None = None
        #: The links stopped by a hand-over under way, until each lease is given back: a
        #: worker starting meanwhile is still sent their state.
        self._handing: dict[str, AgentLink] = {}
        #: Per agent followed elsewhere: the epoch of the last event applied here, and the
        #: conversations the events of that epoch touched (the last :data:`RETOLD`).
        self._touched: dict[str, tuple[int, dict[str, None]]] = {}
        #: Per agent followed elsewhere: what its link events would have told, until the
        #: holder says it told it (``~told``), at most :data:`UNTOLD` events.
        self._untold: dict[str, Kept] = {}
        #: Per agent held: (epoch, number) of the last link event applied as its holder
        #: since the last ``~told`` (written after the run of entries: :meth:`applied`).
        self._told: dict[str, tuple[int, int]] = {}

    def holds(self, name: str) -> bool:
        """Whether this worker holds the lease of an agent (or a duty) now."""
        return name in self.held

    def resync(self, agents: Sequence[str] = ()) -> None:
        """Ask the holders for the state of ``agents`` (empty: of all), which this worker
        missed or has not read yet."""
        self.write(Record("~hello", _encoder.encode(HelloRec(list(agents)))))

    def fell_behind(self) -> None:
        """Entries were pruned before this worker read them: no mirror is the log's until
        the holders' state comes again."""
        self.current.clear()
        self.resync()

    def start(self) -> None:
        """Say hello (holders send their agents' state), then keep leases: renewed on time,
        apart from the balancing (a hand-over takes what it takes)."""
        self.resync()
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._every(self.renew), name="leases")
        self._balancing = loop.create_task(self._every(self.round), name="balance")

    async def close(self) -> None:
        """Stop taking, give every lease back cleanly (another worker takes it at once and
        resumes after what this one read; renewed until then), then stop renewing."""
        await cancelled(self._balancing)  # a hand-over under way is done again below
        try:
            await self.hand_over(list(self.held))
        except Exception as exc:  # the store is gone: the leases run out on their own
            log.warning("leases not given back (%s)", exc)
        await cancelled(self._task)
        for name in list(self.held):
            self.drop(name, "stopping")
        await self.finish_work(None)  # decisions of agents lost meanwhile, made too
        with contextlib.suppress(Exception):
            await self.leases.quit()

    async def _every(self, step: Callable[[], Awaitable[None]]) -> None:
        loop = asyncio.get_running_loop()
        pause = self.leases.seconds / RENEWALS
        while True:
            began = loop.time()
            try:
                await step()
            except Exception as exc:  # the store unreachable: renewals fail, links drop
                log.warning("leases not kept: %s", exc)
            await asyncio.sleep(max(0.0, pause - (loop.time() - began)))

    async def renew(self) -> None:
        """Say this worker is live, renew what is held (drop what is not)."""
        await self.leases.heartbeat()
        batch = dict(self.held)
        if not batch:
            return
        try:
            kept = await self.leases.renew_all(list(batch.values()))
        except Exception:
            for name in batch:
                self.drop(name, "its lease could not be renewed")
            raise
        for name, lease in batch.items():
            if name not in kept and self.held.get(name) == lease:
                self.drop(name, "lease lost")

    async def round(self) -> None:
        """Give back a surplus, or take free leases up to this worker's share, and free
        duties (one survey of the leases table decides)."""
        self.seen = await self.leases.survey()
        workers = [h.holder for h in self.seen if h.name.startswith(WORKER_ROW)]
        holders = {h.name: h.holder for h in self.seen if not h.name.startswith(WORKER_ROW)}
        unread = [n for n, who in holders.items() if who != self.me and n in self.mirrors]
        unread = [n for n in unread if self.mirrors[n].state is LinkState.STARTING]
        if unread:
            # Followed elsewhere, yet nothing read of it here: ask again (a round apart),
            # whatever this worker missed.
            self.resync(unread)
        followed = {a: h for a, h in holders.items() if a in self.sources}
        todo = plan(self.me, workers, list(self.sources), followed)
        if todo.give_back:
            await self.hand_over(todo.give_back)
        taken: list[Taken] = []
        for name in (*todo.take, *(d for d in self.duties if d not in holders)):
            one = await self.leases.take_over(name)
            if one is not None:
                taken.append(one)
        # A lease given back, or one that ran out, resumes after what the old holder wrote
        # when this worker's mirror of the agent is the log's: the new epoch fences it, so
        # the log read to its end now holds all it will ever write (no snapshot, no reset).
        # A mirror that is not (no state of the holder's read here: a lease that ran out
        # under a worker just started, or a hand-over whose ``~sync`` was not written; the
        # stored mirror lags) takes a snapshot: resumed, its asks would be missed, and the
        # events after its stale id taken as new.
        if any(t.given_by is not None or t.lease.agent in self.current for t in taken):
            await self.catch_up()  # the state the old holder sent as it gave the lease back
        for one in taken:
            if one.given_by is not None and one.lease.agent not in self.current:
                await self._read_back(one.lease)
            self._hold(one, resume=one.lease.agent in self.current)

    async def _read_back(self, lease: Lease) -> None:
        """A lease given back by a holder whose last state this worker did not read (it
        started after it was written): that state, the ``~sync`` the hand-over wrote, read
        back from the log and applied, when it is the last entry the old holder's link
        wrote (so the whole of what it read: nothing of it comes after)."""
        if lease.agent not in self.mirrors:
            return  # a duty: no state
        try:
            entry = await self.last_read(lease.agent, lease.epoch - 1)
        except Exception as exc:  # the store unreachable: a snapshot, then
            log.warning("agent %s: its last state not read back (%s)", lease.agent, exc)
            return
        if entry is not None and entry.type == "~sync":
            self.apply(entry)

    def _hold(self, taken: Taken, *, resume: bool = False) -> None:
        lease = taken.lease
        name = lease.agent
        self.held[name] = lease
        if taken.given_by is None:
            log.info("%s: following it (lease epoch %d)", _label(name), lease.epoch)
        else:
            log.info(
                "%s: following it (lease epoch %d), handed over by %s to %s",
                _label(name), lease.epoch, taken.given_by, self.me,
            )  # fmt: skip
        source = self.sources.get(name)
        if source is None:
            self.on_duty(name, True)
            return
        shown = self.mirrors[name]
        # The link's own mirror starts from what the screens show, as STARTING: its first
        # READY is a change, and unsettled taps are sent again then (T1).
        private = AgentMirror(name, hello=shown.hello, wire=shown.wire)
        private.replace_all(list(shown.conversations.values()))
        private.last_event_id = shown.last_event_id
        listener = RecordListener(self.write, name, lease.epoch, known=resume)
        link = AgentLink(source, private, listener, self.timing, gate=self.gate, resume=resume)
        self.links[name] = link
        link.start()
        untold = self._untold.pop(name, ())
        if resume:  # no snapshot: its asks are looked at here (work of the new epoch)
            token = ORIGIN.set((name, lease.epoch))
            try:
                if taken.given_by is None:  # what the old holder may have died before telling
                    self._tell_untold(untold, lease.epoch - 1)
                self.on_taken_over(name)
                if taken.given_by is None:
                    self._retell(name, lease.epoch - 1)
            finally:
                ORIGIN.reset(token)

    def _tell_untold(
        self, untold: Collection[tuple[int, int, tuple[Untold, ...]]], epoch: int
    ) -> None:
        """A lease that ran out: the phone events the old holder's link events (of
        ``epoch``) would have told and no ``~told`` of it covered, told now, in order, once
        (it died between writing what its link read and what that told)."""
        for _, kept_epoch, events in untold:
            if kept_epoch == epoch:
                for type_, payload, localize in events:
                    self.tell(type_, payload, localize)

    def _retell(self, name: str, epoch: int) -> None:
        """A lease that ran out: its holder may have died between writing what its link
        read and writing what that told the phones (two transactions), and the agent does
        not send that again. The rows it may not have told are told again (a row is a
        state: told twice, it is the same row)."""
        touched_epoch, convs = self._touched.pop(name, (0, {}))
        self.retell(name, list(convs) if touched_epoch == epoch else [])

    async def hand_over(self, names: Sequence[str]) -> None:
        """Give these leases back for other workers to take, cleanly: the links stop, what
        they read and then their last state (``~sync``) are written and applied as the
        holder's, the mirror flushed, then each lease is freed (until then a worker starting
        is sent their state too)."""
        leases = {n: self.held[n] for n in names if n in self.held}
        links = {n: link for n in leases if (link := self.links.pop(n, None)) is not None}
        self._handing.update(links)
        try:
            await asyncio.gather(*(link.close() for link in links.values()))
            if links:  # their last state, under this epoch: the next holder resumes on it
                self._sync(list(links))
            await self.settle()
            await self.finish_work(list(leases))  # its push decisions made, under its epoch
            await self.settle()  # what that work told the phones written, while it holds
            for name, lease in leases.items():
                if self.held.get(name) != lease:
                    continue  # lost meanwhile
                del self.held[name]
                await self.leases.give_back(lease)
                if name.startswith(BRIDGE):
                    self.on_duty(name, False)
                log.debug("%s: given back (lease epoch %d)", _label(name), lease.epoch)
        finally:
            for name in links:
                self._handing.pop(name, None)

    def drop(self, name: str, why: str) -> None:
        """Stop following ``name`` at once (its lease is not this worker's any more)."""
        if self.held.pop(name, None) is None:
            return
        link = self.links.pop(name, None)
        if link is not None:
            self.spawn(link.close(), f"drop-{name}")
            log.warning("agent %s: %s, its link is dropped", name, why)
        else:
            log.warning("%s: %s", _label(name), why)
            if name.startswith(BRIDGE):
                self.on_duty(name, False)

    def lost(self, leases: set[tuple[str, int]]) -> None:
        """Writes for these (agent, epoch) were refused: the lease is gone."""
        for name, epoch in leases:
            lease = self.held.get(name)
            if lease is not None and lease.epoch == epoch:
                self.drop(name, "lease lost")

    def apply(self, entry: StoredEvent) -> None:
        """Apply one link entry of the log, in order."""
        kind, name = entry.type, entry.agent
        if kind == "~hello":
            self._sync(_hello.decode(entry.data).agents)
            return
        if name is None or name not in self.mirrors:
            return
        lease = self.held.get(name)
        if lease is not None and entry.epoch is not None and entry.epoch > lease.epoch:
            self.drop(name, "lease lost (a newer holder wrote)")
            lease = None
        own = lease is not None and entry.epoch == lease.epoch
        if kind == "~want":
            if lease is not None:
                self.on_want(name, _want.decode(entry.data).ask_id)
            return
        if kind == "~told":
            if not own and entry.epoch is not None:
                self._forget(name, entry.epoch, _told.decode(entry.data).seq)
            return
        if own and lease is not None:
            self._apply_own(entry, name, lease.epoch)
        else:
            self._apply_quietly(entry, name)

    def _apply_own(self, entry: StoredEvent, name: str, epoch: int) -> None:
        """An entry of this worker's link: every sink, what it tells fenced by the epoch."""
        if self.full is None:
            return
        token = ORIGIN.set((name, epoch))
        try:
            self._route(entry.type, entry.data, self.mirrors[name], self.full, True)
        finally:
            ORIGIN.reset(token)
        if entry.type == "~event":
            self._told[name] = (epoch, entry.seq)

    def _apply_quietly(self, entry: StoredEvent, name: str) -> None:
        """Another worker's entry: screens kept current, nothing told; what a link event
        would have told is kept until its holder's ``~told`` covers it."""
        if self.quiet is None:
            return
        kept: list[Untold] | None = [] if entry.epoch is not None else None
        quiet, keep = QUIET.set(True), KEPT.set(kept if entry.type == "~event" else None)
        try:
            touched = self._route(entry.type, entry.data, self.mirrors[name], self.quiet, False)
        finally:
            KEPT.reset(keep)
            QUIET.reset(quiet)
        if entry.epoch is None:
            return
        self._forget(name, entry.epoch, 0)  # an older holder's: the next one told it
        if touched is not None:
            self._touch(name, entry.epoch, touched)
        if kept:
            untold = self._untold.get(name)
            if untold is None:
                untold = self._untold[name] = deque(maxlen=UNTOLD)
            untold.append((entry.seq, entry.epoch, tuple(kept)))

    def _forget(self, name: str, epoch: int, upto: int) -> None:
        """What the agent's link events told is written: those of ``epoch`` up to number
        ``upto`` (and all of older epochs)."""
        untold = self._untold.get(name)
        while untold and (untold[0][1] < epoch or (untold[0][1] == epoch and untold[0][0] <= upto)):
            untold.popleft()

    def applied(self) -> None:
        """A run of entries applied: for each agent held whose link events it applied, a
        ``~told`` (written in one transaction with what they told: services/worklog.py)."""
        told, self._told = self._told, {}
        for name, (epoch, seq) in told.items():
            lease = self.held.get(name)
            if lease is not None and lease.epoch == epoch:
                self.write(Record("~told", _encoder.encode(ToldRec(seq)), name, epoch))

    def _touch(self, name: str, epoch: int, conversation: str) -> None:
        kept = self._touched.get(name)
        if kept is None or kept[0] != epoch:
            kept = self._touched[name] = (epoch, {})
        convs = kept[1]
        convs.pop(conversation, None)
        convs[conversation] = None
        if len(convs) > RETOLD:
            del convs[next(iter(convs))]

    def _route(
        self, kind: str, data: bytes, mirror: AgentMirror, router: Router, own: bool
    ) -> str | None:
        """Apply one link entry to ``mirror`` and hand it to ``router``: the conversation
        an event touched."""
        if kind == "~event":
            rec = _event.decode(data)
            if rec.id is not None:
                mirror.last_event_id = rec.id
            change = apply_event(mirror, rec.event)
            router.event_received(mirror, rec.event, change)
            return change.conversation_id
        if kind == "~link":
            _set_link(mirror, _link.decode(data))
            router.link_changed(mirror)
        elif kind == "~snapshot":
            _set_snapshot(mirror, _snap.decode(data))
            self.current.add(mirror.name)
            router.snapshot_taken(mirror)
        elif kind == "~sync" and not own:
            sync = _sync.decode(data)
            self.current.add(mirror.name)
            if not _same(mirror, sync):  # (one that is the log's already: nothing to do)
                _set_link(mirror, sync.link)
                _set_snapshot(mirror, sync.snapshot)
                router.link_changed(mirror)
                router.snapshot_taken(mirror)
        return None

    def _sync(self, agents: Sequence[str]) -> None:
        """A worker started (or missed entries): the state of ``agents`` (empty: every
        agent) this worker follows, for it. The link's own mirror (of a link a hand-over
        stopped: its last), not the screens': it holds every entry the link queued before
        this one, so the state is the log's where this entry lands (the screens' lags by
        what is queued and not yet read back). A link that has not read its snapshot yet
        sends nothing: its mirror is the stored one, which may lag."""
        for name, lease in self.held.items():
            if agents and name not in agents:
                continue
            link = self.links.get(name) or self._handing.get(name)
            listener = link.listener if link is not None else None
            if link is None or not isinstance(listener, RecordListener) or not listener.known:
                continue  # (a snapshot not read yet: its ``~snapshot`` brings the state)
            mirror = link.mirror
            snap = SnapRec(list(mirror.conversations.values()), mirror.last_event_id)
            body = _encoder.encode(SyncRec(link_rec(mirror), snap))
            self.write(Record("~sync", body, name, lease.epoch))

    def want(self, agent: str, ask_id: str) -> None:
        """Hand a tap over to the agent's holder (this worker does not hold it)."""
        self.write(Record("~want", _encoder.encode(WantRec(ask_id)), agent))


def _label(name: str) -> str:
    """An agent's, a bridge's or a duty's name as the log says it."""
    if name.startswith(BRIDGE):
        return f"bridge {name.removeprefix(BRIDGE)}"
    return f"duty {name}" if name.startswith("~") else f"agent {name}"
