"""The crew (W1–W4, V2): a lead's gateway reads each member gateway through the member's own
phone API and follows its live stream.

Who talks to whom::

    phone ──► lead gateway ──► its own agents (wire v1)
                   │
                   └──► member gateway (phone API, the member's token) ──► the member's agents

The lead keeps, per member, the member's last dashboard rows (its own section only) and the
id of the member's last stream event, so a lost stream resumes with ``Last-Event-ID``. Every
member event is published again on the lead's stream, naming the machine, with the member's
URLs rewritten to the lead's (``/api/v1/machines/<member>/…``). Answers go to the member with
the phone's request id unchanged: the member's own ledger keeps them exactly-once (T1). A
member that does not say, at ``GET /api/v1/crew``, that it speaks this crew version and takes
answers from a lead is sent none (V2).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Protocol
from urllib.parse import quote

import aiohttp
import msgspec

from collie_gateway.core.reconnect import LinkTiming, Reconnect
from collie_gateway.core.texts import masked
from collie_gateway.errors import AgentUnreachable
from collie_gateway.services.phonebus import Localize, Publish
from collie_gateway.services.tasks import Spawn, cancelled
from collie_gateway.sources import Member
from collie_gateway.strings import Catalogue
from collie_gateway.views.dashboard import AgentRow, Dashboard, RightEdge, Section
from wire.body import read_limited
from wire.errors import BodyTooLarge, WireError
from wire.messages import Ask
from wire.sse import SSEParser

log = logging.getLogger(__name__)

CREW_VERSION: Final = 1  # the crew protocol this gateway speaks, at GET /api/v1/crew
#: Sent by a lead on every request to a member: a member that takes no answers from a lead
#: refuses an answer carrying it, even from a lead that did not read its crew route (V2).
LEAD_HEADER: Final = "Collie-Crew-Lead"
MAX_BODY: Final = 16 * 1024 * 1024  # ours: a member's answer larger than this is refused
MAX_EVENT: Final = 4 * 1024 * 1024
PING_GRACE: Final = 45.0  # a member pings its stream every 15 s: three missed pings
# Keys of a member's JSON whose values are URLs of the member's phone API (rewritten).
URL_KEYS: Final = frozenset({"href", "answer_url", "conversations", "new", "reopen"})
_API: Final = "/api/v1/"
# A member's events about itself only: its push log is about its own devices, and a member
# that leads a crew of its own does not pass its members on.
_NOT_PASSED_ON: Final = frozenset({"push.logged", "crew.section"})


class CrewInfo(msgspec.Struct, kw_only=True):
    """What this gateway can do as a member of a crew (``GET /api/v1/crew``).

    Attributes:
        crew: The crew protocol version it speaks.
        machine: The name it goes by.
        answers: Whether it takes answers given on a lead (W4, V2).
    """

    crew: int
    machine: str
    answers: bool


class MemberAsk(msgspec.Struct, kw_only=True):
    """A member's ``ask.raised`` or ``ask.resolved`` event, as the lead reads it to push the
    ask, or to settle its push (P1–P3)."""

    agent: str
    ask: Ask
    pane: str | None = None
    from_snapshot: bool = False


class MemberState(StrEnum):
    """The lead's link to one member, as its section shows it."""

    STARTING = "starting"
    READY = "ready"
    UNREACHABLE = "unreachable"
    UNAUTHORIZED = "unauthorized"


class Unauthorized(Exception):
    """The member refused the token the lead sent it."""


class _Reset(Exception):
    """The member cannot replay what the lead missed: read its dashboard again."""


#: Publishes one event on the lead's stream: (type, payload).
#: A member's agent raised an ask: (machine, agent, ask, pane title, from a snapshot).
OnAsk = Callable[[str, str, Ask, "str | None", bool], None]
#: A member's ask closed: (machine, agent, ask).
OnResolved = Callable[[str, str, Ask], None]
#: Keeps a member's last known rows (JSON) for the lead's next run: (machine, rows).
SaveRows = Callable[[str, bytes], None]
SAVE_DELAY: Final = 1.0  # ours: a member's rows are written at most once a second


def member_path(machine: str) -> str:
    """The lead's path prefix of a member's phone API (ends with ``/``)."""
    return f"/api/v1/machines/{quote(machine, safe='')}/"


def rewrite_urls(value: Any, prefix: str) -> Any:
    """The member's JSON with each URL of its phone API turned into the lead's URL for it.
    Only values under :data:`URL_KEYS` are URLs: a text that looks like a path is left alone."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in URL_KEYS and isinstance(item, str) and item.startswith(_API):
                out[key] = prefix + item[len(_API) :]
            else:
                out[key] = rewrite_urls(item, prefix)
        return out
    if isinstance(value, list):
        return [rewrite_urls(item, prefix) for item in value]
    return value


def lead_cards(payload: Any, refusal: str | None) -> None:
    """W4, V2: the cards of a member's chat (a read, or a ``chat.changed``) as the lead shows
    them, changed in place: each with its answer URL (a Collie from before crews gives none);
    for a member that takes no answers given on a lead, frozen before any tap with
    ``refusal`` (T1's last row), as R2's card, so the phone knows what a tap would do."""
    if not isinstance(payload, dict) or not isinstance(payload.get("agent"), str):
        return
    listing = payload.get("cards")
    cards = listing.get("cards") if isinstance(listing, dict) else None
    agent = quote(payload["agent"], safe="")
    for card in cards if isinstance(cards, list) else []:
        if not isinstance(card, dict) or not isinstance(card.get("ask_id"), str):
            continue
        if not card.get("answer_url"):
            ask = quote(card["ask_id"], safe="")
            card["answer_url"] = f"{_API}agents/{agent}/asks/{ask}/answer"
        outcome = card.get("outcome")
        if refusal is not None and not (isinstance(outcome, dict) and outcome.get("frozen")):
            card["answerable"] = False
            card["outcome"] = {
                "outcome": "refused",
                "request_id": "",
                "line": refusal,
                "closed": False,
                "frozen": True,
                "retry_label": None,
            }


class MemberLink:
    """Follows one member gateway for as long as the lead runs."""

    def __init__(
        self,
        member: Member,
        catalogue: Catalogue,
        timing: LinkTiming,
        publish: Publish,
        on_ask: OnAsk,
        save: SaveRows | None = None,
        on_resolved: OnResolved | None = None,
        mask: Callable[[str], str] | None = None,
    ) -> None:
        self.member = member
        # A member's asks are masked again here (X1): a member with masking off, or an older
        # one, never puts a secret on the lead's phones.
        self._mask = mask
        self._on_resolved = on_resolved
        self._save = save
        self._save_at: asyncio.TimerHandle | None = None
        self.name = member.name
        self.catalogue = catalogue
        self.timing = timing
        self._publish = publish
        self._on_ask = on_ask
        self.prefix = member_path(member.name)
        self.state = MemberState.STARTING
        self.info: CrewInfo | None = None  # None: no crew route (an older Collie)
        self.info_read = False  # whether this run has read GET /api/v1/crew
        # The member's rows as last heard (the lead's wording), and as shown now: marked
        # unreachable while the member is not answering.
        self._known: dict[str, AgentRow] = {}
        self.rows: dict[str, AgentRow] = {}
        self.last_event_id: str | None = None
        self.section = self._build_section()
        self.ready = asyncio.Event()
        self._reconnect = Reconnect(timing, time.monotonic)
        self._task: asyncio.Task[None] | None = None
        # The token goes to this member only: it is in this session's headers and nowhere
        # else (never in a log line, never in repr).
        headers = {"Authorization": f"Bearer {member.token}"} if member.token else {}
        headers[LEAD_HEADER] = "1"
        # A member with a certificate of its own (self-signed): only that one is accepted.
        pin = member.fingerprint
        ssl = aiohttp.Fingerprint(bytes.fromhex(pin)) if pin else True
        self.session = aiohttp.ClientSession(
            headers=headers,
            connector=aiohttp.TCPConnector(ssl=ssl),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=timing.connect, sock_connect=timing.connect
            ),
        )

    # --- what the lead asks -------------------------------------------------------------

    @property
    def takes_answers(self) -> bool:
        """V2: whether this run read that the member takes answers given on a lead."""
        info = self.info
        return info is not None and info.crew >= CREW_VERSION and info.answers

    @property
    def refuses_answers(self) -> bool:
        """V2: whether this run read that the member takes no answers given on a lead (not
        read yet: a tap tells)."""
        return self.info_read and not self.takes_answers

    async def forward(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        seconds: float | None = None,
        lang: str | None = None,
    ) -> tuple[int, bytes]:
        """One request to the member's phone API (``path`` after ``/api/v1/``), asked in the
        phone's language ``lang`` (the member answers in its default language without one).

        Raises:
            AgentUnreachable: no answer in time, or the transfer failed.
            Unauthorized: the member refused the lead's token.
        """
        limit = seconds if seconds is not None else self.timing.request
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if lang is not None:
            headers["Accept-Language"] = lang
        midway = False
        try:
            async with self.session.request(
                method,
                self.member.url + _API + path,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=limit, connect=self.timing.connect),
                allow_redirects=False,  # the token goes to this member's URL, nowhere else
            ) as resp:
                midway = True
                if resp.status == 401:
                    raise Unauthorized
                try:
                    data = await read_limited(resp, MAX_BODY)
                except BodyTooLarge:
                    over = f"{self.name}: an answer over {MAX_BODY} bytes"
                    raise AgentUnreachable(over) from None
                return resp.status, data
        except TimeoutError:
            raise AgentUnreachable(
                f"{self.name}: no answer in time", timed_out=True, midway=midway
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise AgentUnreachable(f"{self.name}: {type(exc).__name__}", midway=midway) from None

    # --- following -----------------------------------------------------------------------

    def start(self) -> None:
        """Start following in the background."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"crew-{self.name}")

    async def close(self) -> None:
        """Stop following and close the session."""
        await cancelled(self._task)
        self._task = None
        if self._save_at is not None:
            self._save_at.cancel()
            self._save_now()
        await self.session.close()

    def restore(self, saved: bytes) -> None:
        """The rows the last run knew, shown (not ready) until the member answers."""
        try:
            rows = msgspec.json.decode(saved, type=list[AgentRow])
        except (msgspec.ValidationError, msgspec.DecodeError):
            log.warning("crew member %s: its saved rows are unreadable; dropped", self.name)
            return
        self._known = {r.agent: r for r in rows}
        self.rows = {name: self._not_ready(row) for name, row in self._known.items()}
        self.section = self._build_section()

    def _save_soon(self) -> None:
        if self._save is not None and self._save_at is None:
            self._save_at = asyncio.get_running_loop().call_later(SAVE_DELAY, self._save_now)

    def _save_now(self) -> None:
        self._save_at = None
        if self._save is not None:
            self._save(self.name, msgspec.json.encode(list(self._known.values())))

    async def _run(self) -> None:
        while True:
            try:
                await self._probe()
                await self._follow()
                # The member ended its stream cleanly: resume (at once after a stable stream).
                delay = self._reconnect.ended()
                if delay:
                    log.info("crew member %s: its stream ended soon", self.name)
                    await asyncio.sleep(delay)
            except Unauthorized:
                self._set(MemberState.UNAUTHORIZED)
                await asyncio.sleep(self._reconnect.failed())
            except (AgentUnreachable, aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.info("crew member %s: not answering: %s", self.name, type(exc).__name__)
                self._set(MemberState.UNREACHABLE)
                await asyncio.sleep(self._reconnect.failed())
            except (
                msgspec.ValidationError,
                msgspec.DecodeError,
                UnicodeDecodeError,
                WireError,  # e.g. a stream line over MAX_EVENT: this stream is dropped
            ) as exc:
                log.warning("crew member %s: not a Collie phone API: %s", self.name, exc)
                self._set(MemberState.UNREACHABLE)
                await asyncio.sleep(self._reconnect.failed())

    async def _probe(self) -> None:
        """Read what the member can do (V2): a 404 is an older Collie with no crew route."""
        status, body = await self.forward("GET", "crew")
        if status == 404:
            self.info = None
        elif status == 200:
            try:
                self.info = msgspec.json.decode(body, type=CrewInfo)
            except (msgspec.ValidationError, msgspec.DecodeError):
                self.info = None  # a route we cannot read: answers are not sent
        else:
            raise AgentUnreachable(f"{self.name}: GET /api/v1/crew answered {status}")
        self.info_read = True

    async def _read_dashboard(self) -> None:
        status, body = await self.forward("GET", "dashboard")
        if status != 200:
            raise AgentUnreachable(f"{self.name}: GET /api/v1/dashboard answered {status}")
        board = msgspec.json.decode(body, type=Dashboard)
        rows: list[AgentRow] = []
        for section in board.sections:
            # The member's own agents only: a member that leads a crew of its own does not
            # pass its members on.
            if section.kind == "durable_agents" and section.machine is None:
                rows.extend(section.rows or [])
        self._known = {r.agent: self._lead_row(r) for r in rows}
        self.rows = dict(self._known)
        self.section = self._build_section()
        self._save_soon()
        for row in self.rows.values():
            self._publish("dashboard.row", row)
            self._publish("list.reset", {"agent": row.agent, "machine": self.name})

    async def _follow(self) -> None:
        headers = {"Accept": "text/event-stream"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self.timing.connect,
            sock_read=max(self.timing.stream_read, PING_GRACE),
        )
        async with self.session.get(
            self.member.url + _API + "events",
            headers=headers,
            timeout=timeout,
            allow_redirects=False,
        ) as resp:
            if resp.status == 401:
                raise Unauthorized
            if resp.status != 200:
                raise AgentUnreachable(f"{self.name}: GET /api/v1/events answered {resp.status}")
            if self.last_event_id is None:
                # Subscribed first, read second: nothing that changes in between is missed.
                await self._read_dashboard()
            self._set(MemberState.READY)
            self._reconnect.following()
            parser = SSEParser(max_line=MAX_EVENT)
            async for chunk in resp.content.iter_any():
                for sse in parser.feed(chunk):
                    if sse.event == "stream":
                        continue
                    if sse.event == "reset":
                        await self._read_dashboard()
                    else:
                        self._on_event(sse.event, sse.data)
                    if sse.id:
                        self.last_event_id = sse.id

    def _on_event(self, kind: str, data: str) -> None:
        try:
            self._apply(kind, data)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            # One bad event is skipped; the stream and every other event go on.
            log.warning("crew member %s: skipped an event %r: %s", self.name, kind[:64], exc)

    def _apply(self, kind: str, data: str) -> None:
        if kind in _NOT_PASSED_ON:
            return
        if kind == "dashboard.row":
            member_row = msgspec.json.decode(data, type=AgentRow)
            if member_row.machine is not None:
                return  # a member's own member: a lead passes on its members' agents only
            row = self._lead_row(member_row)
            self._known[row.agent] = row
            self.rows[row.agent] = row
            self.section = self._build_section()
            self._save_soon()
            self._publish("dashboard.row", row)
            return
        payload = msgspec.json.decode(data)
        if not isinstance(payload, dict) or "machine" in payload:
            return  # not an object, or from a member's own member
        if kind in ("ask.raised", "ask.resolved"):
            member_ask = self._masked(msgspec.json.decode(data, type=MemberAsk))
            payload["ask"] = msgspec.to_builtins(member_ask.ask)
            if "pane" in payload:
                payload["pane"] = member_ask.pane
            if kind == "ask.raised":
                ask, pane = member_ask.ask, member_ask.pane
                self._on_ask(self.name, member_ask.agent, ask, pane, member_ask.from_snapshot)
            elif self._on_resolved is not None:
                self._on_resolved(self.name, member_ask.agent, member_ask.ask)
        if kind == "chat.changed":
            refusal = self.catalogue["t_older_collie"] if self.refuses_answers else None
            lead_cards(payload, refusal)
        payload = rewrite_urls(payload, self.prefix)
        payload["machine"] = self.name
        self._publish(kind, payload)

    def _masked(self, member_ask: MemberAsk) -> MemberAsk:
        if self._mask is None:
            return member_ask
        pane = self._mask(member_ask.pane) if member_ask.pane else member_ask.pane
        ask = masked(member_ask.ask, self._mask)
        return msgspec.structs.replace(member_ask, ask=ask, pane=pane)

    # --- the lead's view of the member ---------------------------------------------------

    def _set(self, state: MemberState) -> None:
        if state is MemberState.READY:
            self.ready.set()
        else:
            self.ready.clear()
        if state is self.state:
            return
        log.info("crew member %s: %s", self.name, state.value)
        self.state = state
        if state is MemberState.READY:
            self.rows = dict(self._known)  # the stream's replay brings what changed since
        else:
            # Its last known rows stay, marked unreachable (no counts, nothing waiting).
            self.rows = {name: self._not_ready(row) for name, row in self._known.items()}
        for row in self.rows.values():
            self._publish("dashboard.row", row)
        self.section = self._build_section()
        self._publish("crew.section", self.section)

    def _lead_row(self, row: AgentRow) -> AgentRow:
        """A member's row as the lead shows it: its name on line 2 (W2), its URL the lead's."""
        cat = self.catalogue
        runtime, reach = row.runtime, row.reach
        if not runtime or not reach:
            # An older member says line 2 whole: its last part is "local" or "remote".
            runtime, _, reach = row.line2.rpartition(", ")
        line2 = cat.fmt("row_line2_member", runtime=runtime, reach=reach, member=self.name)
        return msgspec.structs.replace(
            row,
            line2=line2,
            runtime=runtime,
            reach=reach,
            machine=self.name,
            href=self.prefix + row.href[len(_API) :] if row.href.startswith(_API) else row.href,
        )

    def _not_ready(self, row: AgentRow) -> AgentRow:
        """A last known row while the member does not answer: D6's label, no counts."""
        starting = self.state is MemberState.STARTING
        state = "starting" if starting else "unreachable"
        label = self.catalogue["state_starting" if starting else "state_unreachable"]
        return msgspec.structs.replace(
            row, state=state, right=RightEdge(label=label), waiting=False
        )

    def _build_section(self) -> Section:
        cat = self.catalogue
        notes = {
            MemberState.STARTING: "crew_starting",
            MemberState.UNREACHABLE: "crew_unreachable",
            MemberState.UNAUTHORIZED: "crew_unauthorized",
        }
        key = notes.get(self.state)
        return Section(
            kind="durable_agents",
            title=cat.fmt("section_durable_agents_member", machine=self.name),
            rows=list(self.rows.values()),
            machine=self.name,
            state=self.state.value,
            note=cat.fmt(key, machine=self.name) if key else None,
        )


class MemberPushes(Protocol):
    """The pushes a lead sends for its members' asks under its own limits (``Pushing``)."""

    async def ask_raised(
        self,
        agent: str,
        ask: Ask,
        pane: str | None,
        *,
        from_snapshot: bool = False,
        machine: str | None = None,
    ) -> None: ...

    async def ask_resolved(self, agent: str, ask: Ask, *, machine: str | None = None) -> None: ...


class MemberRows(Protocol):
    """Where a member's last rows are kept for the lead's next run (``CrewStore``)."""

    async def save_rows(self, machine: str, rows: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class Duty:
    """What a lead does with what its members tell: publish it on its stream, push their asks
    (W4), keep their last rows (W1). With several workers every one follows the members but
    only the one holding the crew's lease does these: ``holds`` says whether it is this one."""

    publish: Publish
    pushes: MemberPushes
    rows: MemberRows
    spawn: Spawn
    holds: Callable[[], bool] = lambda: True

    def tell(self, type_: str, payload: object, localize: Localize | None = None, /) -> None:
        """A member's event, on the lead's stream."""
        if self.holds():
            self.publish(type_, payload, localize)

    def ask(self, machine: str, agent: str, ask: Ask, pane: str | None, snapshot: bool) -> None:
        """A member's ask pushes under this gateway's limits, P3's key naming it (W4)."""
        if self.holds():
            push = self.pushes.ask_raised(agent, ask, pane, from_snapshot=snapshot, machine=machine)
            self.spawn(push, "push")

    def resolved(self, machine: str, agent: str, ask: Ask) -> None:
        """A member's ask closed: a push still owed for it is not sent."""
        if self.holds():
            self.spawn(self.pushes.ask_resolved(agent, ask, machine=machine), "push")

    def save(self, machine: str, rows: bytes) -> None:
        """A member's last rows, shown after a restart until it answers (W1)."""
        if self.holds():
            self.spawn(self.rows.save_rows(machine, rows), "crew-rows")


class Crew:
    """The lead's links to its members, in ``crew`` order."""

    def __init__(
        self,
        members: list[Member],
        catalogue: Catalogue,
        timing: LinkTiming,
        duty: Duty,
        mask: Callable[[str], str] | None = None,
    ) -> None:
        self.links: dict[str, MemberLink] = {
            m.name: MemberLink(
                m, catalogue, timing, duty.tell, duty.ask, duty.save, duty.resolved, mask
            )
            for m in members
        }

    def restore(self, saved: dict[str, bytes]) -> None:
        """Each member's rows as the last run knew them (by machine name)."""
        for name, rows in saved.items():
            link = self.links.get(name)
            if link is not None:
                link.restore(rows)

    def start(self) -> None:
        """Start following every member."""
        for link in self.links.values():
            link.start()

    async def close(self) -> None:
        """Stop following every member."""
        for link in self.links.values():
            await link.close()

    def member(self, machine: str) -> MemberLink | None:
        """The link to the member named ``machine``, if it is one."""
        return self.links.get(machine)

    def readiness(self) -> tuple[int, int]:
        """How many members there are, and how many of their sections are Ready."""
        return len(self.links), sum(1 for link in self.links.values() if link.ready.is_set())

    def sections(self) -> list[Section]:
        """Each member's section as the lead shows it now (W1), in crew order."""
        return [link.section for link in self.links.values()]
