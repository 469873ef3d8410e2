"""The gateway's core: agents' mirrors and links, the store, answers, and the phone's stream."""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
from collections.abc import Callable, Coroutine
from datetime import datetime
from urllib.parse import quote

import msgspec

from collie_gateway.answering import Answering, Result
from collie_gateway.answers import Outcome, Tap, card_state
from collie_gateway.chats import Chats
from collie_gateway.crew import Crew
from collie_gateway.errors import AgentRejected, AgentUnreachable, AnswerMisfit
from collie_gateway.links import AgentClient, AgentLink, Fetched, expect
from collie_gateway.mirror import AgentMirror, Change, LinkState
from collie_gateway.phonebus import PhoneBus
from collie_gateway.pushing import Pushing, PushTargets
from collie_gateway.redact import Redactor
from collie_gateway.settings import Settings
from collie_gateway.sources import Source
from collie_gateway.store import Store
from collie_gateway.strings import Catalogue
from collie_gateway.supervisor import Supervisor
from collie_gateway.views.cards import CardState, build_card
from collie_gateway.views.chat import NOTE_WORDS, Note
from collie_gateway.views.dashboard import Dashboard, EncodedRow, agent_row, build_dashboard
from collie_gateway.views.text import TITLE_LIMIT, clean
from wire.answers import misfit
from wire.messages import (
    WIRE_VERSION,
    AgentEvent,
    Answer,
    Ask,
    AskChanged,
    AskRaised,
    AskResolved,
    CommandResult,
    ItemAppended,
    ItemDelta,
    ItemUpdated,
    Reply,
    ReplyResult,
    decode,
)

log = logging.getLogger(__name__)
CREW_ROWS = "crew.rows:"  # kv key prefix of a member's last known rows


def _saved_member_rows(conn: sqlite3.Connection) -> dict[str, bytes]:
    rows = conn.execute(
        "SELECT key, value FROM kv WHERE substr(key, 1, ?) = ?", (len(CREW_ROWS), CREW_ROWS)
    ).fetchall()
    return {str(k)[len(CREW_ROWS) :]: bytes(v) for k, v in rows}


_encoder = msgspec.json.Encoder()
ANSWER_GRACE = 0.5  # ours: at a stop, answers on their way get this long to settle (issue 10)
# R3, R4: an ask that closed without the person's tap gets a receipt in its chat.
RECEIPTS = {"expired": "receipt_expired", "decided": "receipt_decided"}


class Gateway:
    """Owns every agent link; the routes ask it, the links tell it."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self.bus = PhoneBus(settings.phone_ring, settings.stream_frame)
        self.sources: dict[str, Source] = {s.name: s for s in settings.sources}
        self.mirrors: dict[str, AgentMirror] = {}
        self.links: dict[str, AgentLink] = {}
        self.answering = Answering(store, settings.clock)
        self.chats = Chats(self)
        self.redactor = Redactor(enabled=settings.redact)
        # The same titles are masked on every visit: remember them (bench/chat_bench.py).
        self._mask = functools.lru_cache(maxsize=65_536)(self.redactor.mask)
        self.card_states: dict[tuple[str, str], dict[str, CardState]] = {}
        self._rows: dict[str, EncodedRow] = {}  # each agent's row, as last encoded
        # Each agent's row in another language: (the default's row it follows, the row).
        self._worded_rows: dict[tuple[str, str], tuple[EncodedRow, EncodedRow]] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self.hooks: list[Callable[[AgentMirror, AgentEvent, Change], None]] = []
        self.pushing: Pushing = Pushing(self, PushTargets())
        self._replies: set[asyncio.Future[Fetched]] = set()  # answers on their way
        self.supervisor = Supervisor(
            [s.bridge for s in settings.sources if s.bridge is not None], settings.bridge_backoff
        )
        self.crew = Crew(
            settings.crew,
            settings.catalogue,
            settings.timing,
            self.bus.publish,
            self._member_ask,
            self._save_member_rows,
            self._member_ask_resolved,
        )

    @property
    def redact(self) -> Callable[[str], str]:
        """The redaction applied to titles, subtitles and push text (X1)."""
        return self._mask

    @classmethod
    async def open(cls, settings: Settings) -> Gateway:
        """Open the store, load the last mirror, and start one link per agent."""
        store = await Store.open(settings.db_path)
        gateway = cls(settings, store)
        gateway.mirrors = await store.load_mirrors(gateway.sources)
        await gateway.answering.load()
        gateway.pushing = await Pushing.open(gateway, settings.push_targets)
        store.start_flusher()
        gateway.supervisor.start()
        gateway.spawn(gateway._resend_loop(), "resend-loop")
        gateway.crew.restore(await store.run(_saved_member_rows))
        gateway.crew.start()
        for source in settings.sources:
            link = AgentLink(source, gateway.mirrors[source.name], gateway, settings.timing)
            gateway.links[source.name] = link
            link.start()
        return gateway

    async def close(self) -> None:
        """Stop every link and task, and close the store."""
        await self.crew.close()
        for link in self.links.values():
            await link.close()
        await self.supervisor.close()
        # A member's last rows are what its section shows after a restart: let their writes
        # finish (one SQLite statement each) rather than cancel them.
        saving = [t for t in self._tasks if t.get_name() == "crew-rows"]
        await asyncio.gather(*saving, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.chats.close()
        await self.pushing.close()
        await self.store.close()

    def spawn(self, coro: Coroutine[object, object, object], name: str) -> None:
        """Run ``coro`` in the background, kept until it ends."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- LinkListener ----------------------------------------------------------------------

    def link_changed(self, mirror: AgentMirror) -> None:
        """A link's state or hello changed: store it, tell the phones."""
        self.store.mark(mirror.name)
        self._publish_row(mirror)
        if mirror.state is LinkState.READY:
            self.spawn(self.resend_pending(mirror.name), f"resend-{mirror.name}")

    def snapshot_taken(self, mirror: AgentMirror) -> None:
        """A link read the open conversations anew."""
        self.store.mark_all(mirror.name)
        self._publish_row(mirror)
        self.bus.publish("list.reset", {"agent": mirror.name})
        # The list snapshot holds no items: what the chats missed in a gap (a reset: the
        # agent's log was cut or lost) is read again, chat by chat (wire §10 step 4).
        self.chats.read_again(mirror.name)
        # Asks raised while the gateway was away push now; once per ask (P3) keeps the rest
        # quiet.
        for conv in list(mirror.conversations.values()):
            for ask in conv.asks:
                self.spawn(
                    self.pushing.ask_raised(mirror.name, ask, conv.title, from_snapshot=True),
                    "push",
                )
                self._publish_ask(mirror.name, ask, conv.title, from_snapshot=True)

    def event_received(self, mirror: AgentMirror, event: AgentEvent, change: Change) -> None:
        """An agent event was applied to the mirror."""
        # Item events change no stored row: they do not wake the store. (The stored last
        # event id then lags behind them; a link takes a snapshot when it starts anyway.)
        if not isinstance(event, ItemDelta | ItemAppended | ItemUpdated):
            self.store.mark(mirror.name, change.conversation_id)
        if change.counts_changed:
            self._publish_row(mirror)
        now = self.settings.clock()
        if isinstance(event, AskRaised):
            conv = mirror.conversations.get(event.ask.conversation)
            pane = conv.title if conv is not None else None
            self.spawn(self.pushing.ask_raised(mirror.name, event.ask, pane), "push")
            self._publish_ask(mirror.name, event.ask, pane, from_snapshot=False)
        if isinstance(event, AskResolved):
            # Tasks only for work there is: most resolved asks need no receipt, owe no push
            # and leave no tap unsettled (each task costs the loop; bench/answer_bench.py).
            if change.resolved is not None:
                if event.how in RECEIPTS:
                    self.spawn(self._receipt(mirror.name, event, change.resolved, now), "receipt")
                # A push still owed for it is no longer wanted (P3, issue 10).
                if self.pushing.owes(mirror.name, change.resolved):
                    self.spawn(self.pushing.ask_resolved(mirror.name, change.resolved), "push")
                # A lead following this gateway settles its own push for it (W4).
                self.bus.publish("ask.resolved", {"agent": mirror.name, "ask": change.resolved})
            if self.answering.may_settle(mirror.name, event.ask_id, event.request_id):
                self.spawn(self._settle(mirror.name, event), "settle")
        if isinstance(event, AskChanged):
            # An unsettled tap on the old version can no longer be applied, but it holds the
            # ask's claim: send it again now, so it settles ("changed") and frees the claim
            # for a tap on the new version.
            self.spawn(self.resend_pending(mirror.name, event.ask.id), "settle")
        self.chats.on_event(mirror.name, event, change, now)
        for hook in self.hooks:
            hook(mirror, event, change)

    def _publish_row(self, mirror: AgentMirror) -> None:
        """Tell the phones of a row that changed, and only then (in each language in use)."""
        name = mirror.name
        encoded = self._encode_row(name, self.settings.catalogue)
        kept = self._rows.get(name)
        if kept is None or kept.raw != encoded.raw:
            self._rows[name] = encoded
            languages = self.settings.languages
            self.bus.publish(
                "dashboard.row", encoded.raw, lambda lang: self._row(name, languages.get(lang)).raw
            )

    def _encode_row(self, name: str, catalogue: Catalogue) -> EncodedRow:
        row = agent_row(self.sources[name], self.mirrors[name], catalogue)
        return EncodedRow(msgspec.Raw(_encoder.encode(row)), row.waiting)

    def _row(self, name: str, catalogue: Catalogue | None = None) -> EncodedRow:
        """The agent's row as last encoded, in ``catalogue``'s language (default: the
        default's). The default's is kept at each change (and published); another language's
        is encoded once per change of the default's, on its first read."""
        kept = self._rows.get(name)
        if kept is None:
            kept = self._rows[name] = self._encode_row(name, self.settings.catalogue)
        if catalogue is None or catalogue is self.settings.catalogue:
            return kept
        worded = self._worded_rows.get((catalogue.lang, name))
        if worded is None or worded[0] is not kept:
            worded = (kept, self._encode_row(name, catalogue))
            self._worded_rows[catalogue.lang, name] = worded
        return worded[1]

    # --- reads ----------------------------------------------------------------------------

    def dashboard(
        self, *, pending_only: bool = False, catalogue: Catalogue | None = None
    ) -> Dashboard:
        """The dashboard as the phone draws it now, in ``catalogue``'s language (default: the
        default's): this machine's section, from the rows encoded for the live stream (for
        encoding only: its rows are ``msgspec.Raw``), then each crew member's (W1)."""
        cat = catalogue or self.settings.catalogue
        rows = [self._row(s.name, cat) for s in self.settings.sources]
        return build_dashboard(
            rows,
            self.settings.spaces,
            cat,
            pending_only=pending_only,
            members=self.crew.sections(),
        )

    # --- the crew (W1–W4) ----------------------------------------------------------------

    def _publish_ask(self, agent: str, ask: Ask, pane: str | None, *, from_snapshot: bool) -> None:
        """Tell the stream of an ask raised here: a lead following this gateway pushes it to
        its own phones (W4); a phone may ignore it."""
        payload = {"agent": agent, "ask": ask, "pane": pane, "from_snapshot": from_snapshot}
        self.bus.publish("ask.raised", payload)

    def _save_member_rows(self, machine: str, rows: bytes) -> None:
        """Keep a member's last known rows: after a restart its section shows them until it
        answers."""
        key = CREW_ROWS + machine
        self.spawn(
            self.store.run(
                lambda conn: conn.execute(
                    "INSERT OR REPLACE INTO kv(key, value) VALUES (?, ?)", (key, rows)
                )
            ),
            "crew-rows",
        )

    def _member_ask_resolved(self, machine: str, agent: str, ask: Ask) -> None:
        """A crew member's ask closed: a push the lead still owes for it is not sent."""
        self.spawn(self.pushing.ask_resolved(agent, ask, machine=machine), "push")

    def _member_ask(
        self, machine: str, agent: str, ask: Ask, pane: str | None, from_snapshot: bool
    ) -> None:
        """A crew member's agent raised an ask: push it under this gateway's own limits, with
        P3's key naming the member."""
        self.spawn(
            self.pushing.ask_raised(agent, ask, pane, from_snapshot=from_snapshot, machine=machine),
            "push",
        )

    def version_warning(self, agent: str, catalogue: Catalogue | None = None) -> str | None:
        """R5's box for an agent refused for its wire version, else None."""
        mirror = self.mirrors[agent]
        if mirror.wire is None or mirror.wire == WIRE_VERSION:
            return None
        return (catalogue or self.settings.catalogue).fmt(
            "version_mismatch", theirs=mirror.wire, ours=WIRE_VERSION
        )

    def client(self, agent: str) -> AgentClient:
        """The agent's HTTP client, for an agent that speaks wire v1.

        Raises:
            AgentRejected: the agent speaks another wire version (V1: nothing is sent).
            AgentUnreachable: the link has not read the agent's hello in this run yet.
        """
        warning = self.version_warning(agent)
        if warning is not None:
            raise AgentRejected(warning, status=0, code="version_mismatch")
        if self.mirrors[agent].state is LinkState.STARTING:
            # This run has not read the agent's hello yet: its stored wire version may be stale
            # (V1). Nothing is sent; a tap stays pending and goes once the link is ready.
            raise AgentUnreachable("the agent's hello has not been read yet")
        return self.links[agent].client

    # --- commands ---------------------------------------------------------------------------

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

    # --- answers ----------------------------------------------------------------------------

    def find_ask(self, agent: str, ask_id: str) -> Ask | None:
        """The open ask ``ask_id`` of ``agent``, as mirrored."""
        for conv in self.mirrors[agent].conversations.values():
            for ask in conv.asks:
                if ask.id == ask_id:
                    return ask
        return None

    async def answer(
        self,
        agent: str,
        ask_id: str,
        request_id: str,
        version: int,
        answer: Answer,
        catalogue: Catalogue | None = None,
    ) -> Result:
        """Take one tap: record, claim, send once, settle (spec T1).

        Raises:
            AnswerMisfit: the answer does not fit the mirrored ask (wire §8); nothing was
                recorded or sent.
        """
        tap = Tap(request_id, agent, ask_id, version, _encoder.encode(answer))
        cat = catalogue or self.settings.catalogue
        ask = self.find_ask(agent, ask_id)
        refusal = self.version_warning(agent, cat) or self._refusal(
            agent, ask, version, answer, cat
        )
        if refusal is None:
            self._check(ask, version, answer, cat)
        if refusal is not None:
            result = await self.answering.refuse(tap, refusal)  # nothing is sent
        else:
            result = await self.answering.tap(tap, self._send_reply)
        if result.conflict:
            return Result(Outcome.REFUSED, cat["refused_conflict"], request_id, True, result.record)
        return self._remember(tap, result)

    def _refusal(
        self, agent: str, ask: Ask | None, version: int, answer: Answer, cat: Catalogue
    ) -> str | None:
        """Collie's reason to refuse a tap without sending it, else None: an ask the phone
        cannot answer (A7: an unknown kind or over a card's limits; wire §8: the gateway sends
        no reply for it), or an "Always allow" without its second tap or where the card does
        not offer it (A5, A6)."""
        if ask is None or ask.version != version:
            # Not mirrored, or not the version the person saw (the agent answers "changed"):
            # nothing Collie can judge; the agent validates it.
            return None
        card = build_card(
            ask,
            agent_name=agent,
            now=self.settings.clock(),
            catalogue=cat,
            redact=self.redact,
        )
        if card.body is None:
            return cat["cannot_answer"]
        if ask.kind != "permission":
            return None
        chosen = [answer.option] if answer.option is not None else list(answer.options or [])
        always = {o.id for o in ask.options if o.role == "always"}
        if not always.intersection(chosen):
            return None
        if not answer.confirmed:
            return cat["refused_always"]
        if cat["text_shortened"] in card.notices or ask.tool is None:
            return cat["refused_always_hidden"]
        return None

    def _check(self, ask: Ask | None, version: int, answer: Answer, cat: Catalogue) -> None:
        """Wire §8's table against the mirrored ask, as the agent would apply it: only for an
        ask Collie holds, at the version the person saw, before its deadline (past it, or on
        another version, the agent answers ``expired`` or ``changed`` itself).

        Raises:
            AnswerMisfit: the answer does not fit; the reason comes from the catalogue.
        """
        if ask is None or ask.version != version:
            return
        if ask.deadline is not None and self.settings.clock() >= ask.deadline:
            return
        found = misfit(ask, answer)
        if found is not None:
            raise AnswerMisfit(cat.fmt("answer_" + found.code, **found.values))

    def _remember(self, tap: Tap, result: Result) -> Result:
        """Keep the card's state after a tap, for the chat's next drawing (T1)."""
        record = result.record
        if record is not None and record.tap == tap:
            state = card_state(record)
            ask = self.find_ask(tap.agent, tap.ask_id)
            if state is not None and ask is not None:
                key = (tap.agent, ask.conversation)
                self.card_states.setdefault(key, {})[tap.ask_id] = state
        return result

    async def _send_reply(self, tap: Tap) -> tuple[str, str | None]:
        answer = decode(tap.answer, Answer)
        body = Reply(request_id=tap.request_id, version=tap.version, answer=answer)
        path = f"/asks/{quote(tap.ask_id, safe='')}/reply"
        sending = asyncio.ensure_future(self.client(tap.agent).post(path, body))
        self._replies.add(sending)
        sending.add_done_callback(self._replies.discard)
        try:
            fetched = await sending
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if sending.cancelled() and task is not None and not task.cancelling():
                # Cut short by a stop (``settle_replies``): it may have arrived (T1).
                raise AgentUnreachable("the gateway stopped before the agent answered") from None
            raise
        if fetched.status >= 500:
            raise AgentUnreachable(f"the agent answered {fetched.status}")
        result = expect(fetched, ReplyResult)
        return result.outcome, result.reason

    async def settle_replies(self, grace: float = ANSWER_GRACE) -> None:
        """At a stop: answers on their way to agents get ``grace`` seconds to settle; the rest
        are cut short and stay recorded as uncertain (the phone is told so; the next run sends
        them again with their request ids)."""
        if not self._replies:
            return
        _, late = await asyncio.wait(list(self._replies), timeout=grace)
        for sending in late:
            sending.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    async def _resend_loop(self) -> None:
        """Every ``resend_interval`` s, send unsettled taps of ready agents again (T1)."""
        while True:
            await asyncio.sleep(self.settings.resend_interval)
            for name, mirror in self.mirrors.items():
                if mirror.state is LinkState.READY:
                    await self.resend_pending(name)

    async def _settle(self, agent: str, event: AskResolved) -> None:
        """An ask closed: the agent's word settles a tap it names as answered (T1, wire §9);
        other unsettled taps on it are sent again, so they settle too."""
        if event.how == "answered" and event.request_id is not None:
            result = await self.answering.settle_accepted(agent, event.ask_id, event.request_id)
            if result is not None and result.record is not None:
                self._remember(result.record.tap, result)
                self.bus.publish(
                    "answer.settled",
                    {"agent": agent, "request_id": result.request_id, "outcome": result.outcome},
                )
        await self.resend_pending(agent, event.ask_id)

    async def resend_pending(self, agent: str, ask_id: str | None = None) -> None:
        """Send the agent's unsettled taps again, with their request ids: after a restart,
        when the link is back, and when an ask with an unsettled tap closes."""
        try:
            pending = await self.answering.resend_pending(agent, self._send_reply, ask_id)
            for result in pending:
                if result.record is not None:
                    self._remember(result.record.tap, result)
                self.bus.publish(
                    "answer.settled",
                    {"agent": agent, "request_id": result.request_id, "outcome": result.outcome},
                )
        except (AgentRejected, AgentUnreachable) as exc:
            log.info("agent %s: pending answers wait: %s", agent, exc)

    # --- receipts (R3, R4) -----------------------------------------------------------------

    async def _receipt(self, agent: str, event: AskResolved, ask: Ask, now: datetime) -> None:
        key = RECEIPTS.get(event.how)
        if key is None or await self.answering.tapped(agent, ask.id):
            return
        title = clean(ask.title or ask.text, TITLE_LIMIT, redact=self.redact).text
        note = Note(
            kind="receipt",
            text=title,
            at=now,
            after_item=self.chats.last_item.get((agent, event.conversation_id)),
            words=key,
        )
        self.chats.add_note(agent, event.conversation_id, f"ask:{ask.id}", note)

    def save_note(self, agent: str, conv_id: str, key: str, note: Note) -> None:
        """Store a chat note in the background."""
        self.spawn(self._save_note(agent, conv_id, key, note), "note")

    async def _save_note(self, agent: str, conv_id: str, key: str, note: Note) -> None:
        # A note with words keeps their catalogue key as its kind (read back as that kind's
        # note), so it reads in each phone's language; a stored text is the agent's title.
        kind = note.words or note.kind
        row = (agent, conv_id, key, kind, note.text, note.at.isoformat(), note.after_item)
        await self.store.run(
            lambda conn: conn.execute(
                "INSERT OR IGNORE INTO notes(agent, conversation, key, kind, text, at, after_item)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        )
        self.chats.note_saved(agent, conv_id, note)

    async def load_notes(self, agent: str, conv_id: str) -> list[Note]:
        """The stored notes of one conversation, oldest first."""
        async with self.store.db.execute(
            "SELECT kind, text, at, after_item FROM notes WHERE agent = ? AND conversation = ?"
            " ORDER BY at",
            (agent, conv_id),
        ) as cur:
            rows = await cur.fetchall()
        return [
            Note(
                kind=NOTE_WORDS.get(str(k), str(k)),
                text=str(t),
                at=datetime.fromisoformat(str(a)),
                after_item=i,
                words=str(k) if str(k) in NOTE_WORDS else None,
            )
            for k, t, a, i in rows
        ]
