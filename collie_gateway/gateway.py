"""The composition root: builds the rooms, wires the router's sinks in order, closes them in
reverse. No logic of its own (docs/architecture.md)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

from collie_gateway.core.redact import Redactor
from collie_gateway.core.texts import MaskedAsks
from collie_gateway.services.agents import Agents
from collie_gateway.services.answered import tell_answered
from collie_gateway.services.answering import Answering
from collie_gateway.services.answers import Answers
from collie_gateway.services.chats import ChatConfig, Chats
from collie_gateway.services.crew import Crew, Duty
from collie_gateway.services.phonebus import PhoneBus
from collie_gateway.services.phones import Phones
from collie_gateway.services.pushing import PushConfig, Pushing
from collie_gateway.services.router import (
    AnswerSink,
    AskSink,
    ChatSink,
    MirrorSink,
    NoticeSink,
    ReceiptSink,
    Router,
    RowSink,
)
from collie_gateway.services.rows import Rows
from collie_gateway.services.supervisor import Supervisor
from collie_gateway.services.tasks import Tasks
from collie_gateway.services.worklog import ORIGIN
from collie_gateway.settings import Settings
from collie_gateway.store.stores import Stores, open_stores
from collie_gateway.workers import CREW_DUTY, Work, Workers, roster
from push import Content

REDACT_CACHE = 65_536  # titles masked on every visit are remembered (bench/chat_bench.py)


def _origin() -> str | None:
    """The agent whose link's reads its holder applies now, if any (services/worklog.py)."""
    origin = ORIGIN.get()
    return None if origin is None else origin[0]


class Gateway:
    """Every room of one gateway, built by :meth:`open` and closed by :meth:`close`."""

    def __init__(self, settings: Settings, stores: Stores) -> None:
        self.settings = settings
        self.stores = stores
        self.tasks = Tasks(owner=_origin)  # a holder's work, waited for at a hand-over
        self.bus: PhoneBus = PhoneBus(settings.phone_ring, settings.stream_frame)
        self.workers: Workers | None = None  # several workers on PostgreSQL
        self.redactor = Redactor(enabled=settings.redact)
        self.redact = functools.lru_cache(maxsize=REDACT_CACHE)(self.redactor.mask)
        self.masked_asks = MaskedAsks(self.redact)  # one masked copy per ask version (X1)
        self.mirrors_repo = stores.mirrors
        self.crew_repo = stores.crew
        self.supervisor = Supervisor(
            [s.bridge for s in settings.sources if s.bridge is not None], settings.bridge_backoff
        )

    @classmethod
    async def open(cls, settings: Settings) -> Gateway:
        """Open the store, load the last mirror, build every service, start the links."""
        gw = cls(settings, await open_stores(settings.db_path, settings.database_url))
        if gw.stores.cluster is not None:
            gw.workers = await Workers.open(gw.stores.cluster, settings)
            gw.bus = gw.workers.bus
        await gw._build()
        gw.mirrors_repo.start_flusher()
        gw.tasks.spawn(gw.answers.resend_loop(settings.resend_interval), "resend-loop")
        if gw.stores.shared:  # a worker that died owing a push leaves it to the others
            owed = gw.pushing.owed_loop(settings.resend_interval, gw.agents.open_asks)
            gw.tasks.spawn(owed, "owed-loop")
        gw.crew.restore(await gw.crew_repo.saved_rows())
        gw.crew.start()
        if gw.workers is None:
            gw.supervisor.start()
            gw.agents.start(gw.router)
        else:  # one worker follows each agent (and runs each bridge): its lease's holder
            routers = (gw.router, gw._router(quiet=True))
            duties = (CREW_DUTY,) if settings.crew else ()
            follow = (gw.agents, gw.answers, gw.ledger, routers, gw.tasks.spawn)
            work = Work(gw.tasks.settled, gw.pushing, gw._retell)
            gw.workers.start(settings, *follow, duties, gw.mirrors_repo, gw.supervisor, work)
        return gw

    async def _build(self) -> None:
        s, spawn, publish = self.settings, self.tasks.spawn, self.bus.publish
        mirrors = await self.mirrors_repo.load_mirrors(source.name for source in s.sources)
        self.agents = Agents(s.sources, mirrors, s.catalogue, s.timing)
        self.mirrors = self.agents.mirrors
        self.roster = roster(self.workers, self.agents, self.supervisor, s.clock)
        self.ledger = Answering(self.stores.ledger, s.clock, shared=self.stores.shared)
        await self.ledger.load()
        self.answers = Answers(self.agents, self.ledger, s.catalogue, s.clock, self.redact, publish)
        items_mask = self.redactor.mask if self.redactor.enabled else None
        chat_config = ChatConfig(s.languages, s.clock, self.redact, items_mask)
        notes = self.stores.notes
        self.chats = Chats(self.agents, notes, self.answers.cards, publish, spawn, chat_config)
        languages = {tag: s.languages.get(tag) for tag in s.languages.languages}
        ttl, redact = s.push_ttl, self.redact
        content = Content(strings=s.catalogue, redact=redact, default_ttl=ttl, languages=languages)
        push = PushConfig(s.machine, s.apns_environment, s.clock, s.languages)
        pushes, notify = self.stores.pushes, self.stores.notify
        self.pushing = await Pushing.open(
            pushes, notify, publish, push, content, s.push_targets, self.masked_asks
        )
        workers = self.workers  # with several, one worker tells the phones of the crew
        holds = functools.partial(workers.holds, CREW_DUTY) if workers else lambda: True
        duty = Duty(publish, self.pushing, self.crew_repo, spawn, holds)
        self.crew = Crew(s.crew, s.catalogue, s.timing, duty, mask=self.redact)
        sections = self.crew.sections
        self.rows = Rows(
            s.sources, self.agents.mirror, s.languages, s.spaces, publish, sections, self.redact
        )
        self.router = self._router()
        monotonic = asyncio.get_running_loop().time
        phones, token = self.stores.phones, s.token
        self.phones = Phones(
            phones, admin_token=token, clock=s.clock, monotonic=monotonic, shared=self.stores.shared
        )
        await self.phones.start()
        self.answers.on_accepted = tell_answered(self.stores.phones, self.pushing, spawn)

    def _retell(self, agent: str, conversations: Sequence[str]) -> None:
        """Tell the phones the agent's row, and these conversations' rows, as they are."""
        self.rows.tell(self.mirrors[agent])
        self.chats.retell(agent, conversations)

    def _router(self, *, quiet: bool = False) -> Router:
        """The sinks, in the order each hears what a link read (services/router.py);
        ``quiet``: only those that keep a worker's screens current, for what another
        worker's link read (services/following.py)."""
        spawn, publish = self.tasks.spawn, self.bus.publish
        mirror, rows = MirrorSink(self.mirrors_repo), RowSink(self.rows, publish)
        receipts = ReceiptSink(self.chats, self.ledger.tapped, self.redact, spawn)
        asks = AskSink(self.pushing, publish, spawn, self.masked_asks)
        answers = AnswerSink(self.answers, self.ledger, spawn)
        chats = ChatSink(self.chats)
        notices = NoticeSink(self.pushing, spawn)
        if quiet:  # (the asks only told: kept, in case the holder dies before it told them)
            kept = NoticeSink(self.pushing, spawn, kept=True)
            told = AskSink(self.pushing, publish, spawn, self.masked_asks, told=True)
            on_event = (rows, told, chats, kept)
            return Router(self.settings.clock, (rows,), (rows, chats), on_event)
        return Router(
            self.settings.clock,
            on_link=(mirror, rows, answers),
            on_snapshot=(mirror, rows, chats, asks),
            on_event=(mirror, rows, receipts, asks, notices, answers, chats),
        )

    async def close(self) -> None:
        """Stop every link and task, and close the store (the reverse of :meth:`open`)."""
        await self.crew.close()
        if self.workers is not None:  # its leases given back: another worker follows at once
            await self.workers.close()
        await self.agents.close()
        await self.supervisor.close()
        # A member's last rows are what its section shows after a restart: let their writes
        # finish (one SQLite statement each) rather than cancel them.
        await self.tasks.close(finish=("crew-rows",))
        await self.chats.close()
        await self.pushing.close()
        await self.phones.close()
        await self.stores.close()
