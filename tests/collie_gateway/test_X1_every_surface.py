"""X1 on every surface, for a field added tomorrow: an agent of the test's own, speaking wire
v1 on a real Unix socket, sends an ask, items and a conversation whose every text holds a
distinct secret, planted by reflection over the wire types (``msgspec.inspect``), so a field
added to ``wire/messages.py`` is planted too; a type the planter cannot fill fails it.

A real gateway process (``-v``) follows the agent and pushes to the fake APNs, FCM and Web
Push services, through the relay, and to a webhook; a crew lead process follows the gateway.
None of the secrets, nor 12 characters of one, reaches what leaves the processes: the phone's
screens and event stream, every push body (decrypted), the webhook, the lead's screens and
stream, and the logs. Where the phone shows a text, it shows its masked form.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import random
import re
import string
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import msgspec
import msgspec.inspect as mi
import pytest
import pytest_asyncio
from aiohttp import web

from collie_gateway.core.redact import Redactor
from collie_gateway.core.texts import texts
from fixtures.agents.harness import short_dir
from tests.collie_gateway.conftest import eventually, raw_agent
from tests.collie_gateway.crew_scene import write_json
from tests.collie_gateway.processes import GatewayProcess
from tests.collie_gateway.push_fixtures import Receiver, Services, receiver, serve, services
from tests.collie_gateway.test_crew import follow
from tests.collie_gateway.test_shutdown import push_env
from tests.push.test_relay import Relay, relay_process
from tests.push.webpush_fakes import Browser, FakePushService, b64url
from wire.messages import (
    FEATURES,
    VERBATIM,
    Ask,
    AskRaised,
    AskResolved,
    CommandResult,
    Conversation,
    ConversationOpened,
    ConversationPage,
    ConversationUpdated,
    ErrorBody,
    Event,
    Hello,
    Item,
    ItemAppended,
    ItemDelta,
    ItemUpdated,
    Reply,
    ReplyResult,
    StarterList,
    decode,
    encode,
)

T = TypeVar("T")
ALNUM = string.ascii_letters + string.digits
WINDOW = 12  # no 12 characters of a secret may show anywhere
NOW = datetime.now(UTC).replace(microsecond=0)
ITEM_KINDS = ("user", "reply", "thinking", "notice", "markdown", "code", "link", "tool")


def vocabulary() -> dict[str, Iterator[Any]]:
    """The words of VERBATIM open sets and the scalars, by ``Struct.field``, taken in turn."""
    return {
        "Option.role": itertools.cycle(["allow", "deny"]),
        "FormField.kind": itertools.cycle(["text", "select"]),
        "Step.state": itertools.cycle(["done", "running"]),
        "Argument.origin": itertools.cycle(["typed", "model", "result:lookup"]),
        "Conversation.state": itertools.repeat("waiting"),
        "Item.status": itertools.repeat("done"),
        "Item.language": itertools.repeat("python"),
        "Button.icon": itertools.repeat("play"),
        "Item.final": itertools.repeat(True),
        "Ask.irreversible": itertools.repeat(True),
        "Ask.deadline": itertools.repeat(NOW + timedelta(hours=1)),
        "ReplyResult.outcome": itertools.cycle(["accepted", "not_open"]),
        "CommandResult.outcome": itertools.repeat("refused"),
        "ErrorBody.error": itertools.repeat("conflict"),
    }


APNS_TOKEN, RELAY_TOKEN, LEAD_TOKEN = "b2" * 32, "a1" * 32, "c3" * 32
FCM_TOKEN = "fcm-token-" + "y" * 140
AGENT = "/api/v1/agents/desk"
CHAT = AGENT + "/conversations/c1"
ON_LEAD = "/api/v1/machines/workshop/agents/desk"


# --- planting: every text of a wire value, by reflection ---------------------------------


class CannotFill(TypeError):
    """A wire field of a type the planter does not know: teach it, do not skip it."""


@dataclass
class Planter:
    """Builds wire values field by field from ``msgspec.inspect``: every text a distinct
    secret the redactor masks (``planted``: secret → its path), every VERBATIM string an
    ordinary id, word or URL."""

    rng: random.Random = field(default_factory=lambda: random.Random(1))
    planted: dict[str, str] = field(default_factory=dict)
    owners: set[str] = field(default_factory=set)  # the ``Struct.field`` of each text
    numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    words: dict[str, Iterator[Any]] = field(default_factory=vocabulary)

    def secret(self, path: str, owner: str) -> str:
        self.owners.add(owner)
        while True:
            s = "ghp_" + "".join(self.rng.choice(ALNUM) for _ in range(36))
            if s not in self.planted and Redactor().mask(s) != s:
                self.planted[s] = path
                return s

    def build(self, cls: type[T], path: str, **given: Any) -> T:
        """A ``cls`` with every field filled; ``given`` fields as given."""
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        values = {
            f.name: given[f.name]
            if f.name in given
            else self.fill(f.type, f"{path}.{f.name}", f"{cls.__name__}.{f.name}")
            for f in info.fields
        }
        return cls(**values)

    def fill(self, t: mi.Type, path: str, owner: str) -> Any:
        if owner in self.words:
            return next(self.words[owner])
        if isinstance(t, mi.Metadata):
            if t.extra and t.extra.get(next(iter(VERBATIM))):
                return self.verbatim(t.type, path)
            return self.fill(t.type, path, owner)
        if isinstance(t, mi.StrType):
            return self.secret(path, owner)
        if isinstance(t, mi.AnyType):  # any JSON: secret keys, secret values, nested
            return {
                self.secret(path + "{key}", owner): self.secret(path + "{value}", owner),
                self.secret(path + "{key}", owner): [self.secret(path + "[]", owner), 7, None],
            }
        if isinstance(t, mi.StructType):
            return self.build(t.cls, path)
        if isinstance(t, mi.ListType):
            return [self.fill(t.item_type, f"{path}[{n}]", owner) for n in range(2)]
        if isinstance(t, mi.DictType):
            key = self.fill(t.key_type, path + "{key}", owner)
            return {key: self.fill(t.value_type, path + "{value}", owner)}
        if isinstance(t, mi.UnionType):
            members = [m for m in t.types if not isinstance(m, mi.NoneType)]
            if len(members) == 1:
                return self.fill(members[0], path, owner)
        if isinstance(t, mi.BoolType):
            return False
        if isinstance(t, mi.IntType):
            return 1
        if isinstance(t, mi.FloatType):
            return 50.0
        if isinstance(t, mi.DateTimeType):
            return NOW
        raise CannotFill(f"{owner} at {path}: {t!r}")

    def verbatim(self, t: mi.Type, path: str) -> str:
        if not isinstance(t, mi.StrType):
            raise CannotFill(f"VERBATIM {path}: {t!r}")
        n = next(self.numbers)
        if path.endswith(".url"):
            return f"https://example.org/docs/{n}"
        return f"{path.rsplit('.', 1)[-1].replace('_', '-')}-{n}"

    def paths(self) -> set[str]:
        """The planted paths, without list indices."""
        return {re.sub(r"\[\d+\]", "[]", p) for p in self.planted.values()}


def text_fields(cls: type, seen: set[type] | None = None) -> set[str]:
    """Every ``Struct.field`` reachable from ``cls`` that holds a text (not VERBATIM)."""
    seen = set() if seen is None else seen
    seen.add(cls)
    out: set[str] = set()
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    for f in info.fields:
        for t in _leaves(f.type):
            if isinstance(t, mi.StructType):
                if t.cls not in seen:
                    out |= text_fields(t.cls, seen)
            else:
                out.add(f"{cls.__name__}.{f.name}")
    return out


def _leaves(t: mi.Type) -> Iterator[mi.Type]:
    """The text-bearing types inside ``t``: non-VERBATIM strings, any JSON, structs."""
    if isinstance(t, mi.Metadata):
        if not (t.extra and t.extra.get(next(iter(VERBATIM)))):
            yield from _leaves(t.type)
    elif isinstance(t, mi.StrType | mi.AnyType | mi.StructType):
        yield t
    elif isinstance(t, mi.ListType):
        yield from _leaves(t.item_type)
    elif isinstance(t, mi.DictType):
        yield from _leaves(t.key_type)
        yield from _leaves(t.value_type)
    elif isinstance(t, mi.UnionType):
        for m in t.types:
            yield from _leaves(m)


@dataclass(frozen=True)
class Planted:
    """What the agent sends: its hello and starters, the conversation, its items and two
    asks, an item written by deltas, and what it answers to each reply (``a1`` accepted, ``a2``
    no longer open), to a message or a button, and to a stop (409)."""

    planter: Planter
    hello: Hello
    starters: StarterList
    conversation: Conversation  # with items and asks, as ``GET /conversations/c1`` gives it
    permission: Ask
    form: Ask
    live: Item  # not final: its text grows by ``delta``
    delta: ItemDelta
    closed: ConversationPage  # the first page of closed conversations, with a next cursor
    replied: dict[str, ReplyResult]
    refused: CommandResult
    rejected: ErrorBody

    def values(self) -> list[msgspec.Struct]:
        """Every value planted (the asks and items are inside the conversation)."""
        return [
            self.hello,
            self.starters,
            self.conversation,
            self.live,
            self.delta,
            self.closed,
            *self.replied.values(),
            self.refused,
            self.rejected,
        ]


def plant() -> Planted:
    p = Planter()
    features = [f for f in FEATURES if f != "reopen"]
    hello = p.build(Hello, "hello", wire=1, features=features)
    starters = p.build(StarterList, "starters")
    permission = p.build(Ask, "ask", id="a1", conversation="c1", kind="permission", version=1)
    form = p.build(Ask, "form", id="a2", conversation="c1", kind="form", version=1)
    items = [p.build(Item, f"item:{k}", id=f"i-{k}", kind=k) for k in ITEM_KINDS]
    conversation = p.build(
        Conversation, "conversation", id="c1", asks=[permission, form], items=items
    )
    live = p.build(Item, "live", id="i-live", kind="reply", final=False, at=None)
    delta = p.build(ItemDelta, "delta", conversation_id="c1", item_id="i-live")
    gone = p.build(Conversation, "closed", id="c9", state="closed", asks=[], items=None)
    closed = p.build(ConversationPage, "page", conversations=[gone], keeps_list=True)
    replied = {"a1": p.build(ReplyResult, "reply"), "a2": p.build(ReplyResult, "not_open")}
    refused = p.build(CommandResult, "command", conversation_id=None)
    rejected = p.build(ErrorBody, "error")
    return Planted(
        p,
        hello,
        starters,
        conversation,
        permission,
        form,
        live,
        delta,
        closed,
        replied,
        refused,
        rejected,
    )


# --- the agent: wire v1 by hand on a Unix socket ------------------------------------------


@dataclass
class WireAgent:
    """A wire v1 agent written from wire/SPEC.md: its open conversations and a page of closed
    ones, an event log replayed from ``Last-Event-ID``, each reply answered and its ask
    resolved, every other command refused."""

    planted: Planted
    conversations: dict[str, Conversation] = field(default_factory=dict)
    log: list[bytes] = field(default_factory=list)
    replies: list[tuple[str, Reply]] = field(default_factory=list)
    tick: asyncio.Event = field(default_factory=asyncio.Event)

    def emit(self, event: Event) -> None:
        """Apply ``event`` to the snapshots, log it and wake the streams."""
        match event:
            case ConversationOpened(conversation=c) | ConversationUpdated(conversation=c):
                old = self.conversations.get(c.id)
                items = old.items if old is not None and old.items is not None else []
                self.conversations[c.id] = msgspec.structs.replace(c, items=items)
            case ItemAppended(conversation_id=cid, item=item):
                conv = self.conversations[cid]
                items = [*(conv.items or []), item]
                self.conversations[cid] = msgspec.structs.replace(conv, items=items)
            case ItemUpdated(conversation_id=cid, item=item):
                conv = self.conversations[cid]
                items = [item if i.id == item.id else i for i in conv.items or []]
                self.conversations[cid] = msgspec.structs.replace(conv, items=items)
            case ItemDelta(conversation_id=cid, item_id=iid, text=text):
                conv = self.conversations[cid]
                items = [
                    msgspec.structs.replace(i, text=i.text + text) if i.id == iid else i
                    for i in conv.items or []
                ]
                self.conversations[cid] = msgspec.structs.replace(conv, items=items)
            case AskRaised(ask=ask):
                conv = self.conversations[ask.conversation]
                asks = [*conv.asks, ask]
                self.conversations[ask.conversation] = msgspec.structs.replace(conv, asks=asks)
            case AskResolved(ask_id=ask_id, conversation_id=cid):
                conv = self.conversations[cid]
                asks = [a for a in conv.asks if a.id != ask_id]
                self.conversations[cid] = msgspec.structs.replace(conv, asks=asks)
        self.log.append(encode(event))
        self.tick.set()
        self.tick = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path, method = request.path, request.method
        if method == "GET" and path == "/hello":
            return self._json(self.planted.hello)
        if method == "GET" and path == "/starters":
            return self._json(self.planted.starters)
        if method == "GET" and path == "/conversations":
            if request.query.get("state") == "closed":
                return self._closed(request.query.get("cursor"))
            listed = [msgspec.structs.replace(c, items=None) for c in self.conversations.values()]
            return self._json(ConversationPage(conversations=listed), snapshot=True)
        if method == "GET" and path.startswith("/conversations/"):
            conv = self.conversations.get(path.removeprefix("/conversations/"))
            if conv is None:
                return self._json(ErrorBody(error="not_found"), status=404)
            return self._json(conv, snapshot=True)
        if method == "GET" and path == "/events":
            return await self._events(request)
        if method == "POST" and path.startswith("/asks/") and path.endswith("/reply"):
            return await self._reply(request, path.split("/")[2])
        if method == "POST" and path.endswith("/stop"):
            return self._json(self.planted.rejected, status=409)
        if method == "POST" and path.startswith("/conversations/"):
            return self._json(self.planted.refused)
        return self._json(ErrorBody(error="not_found"), status=404)

    def _closed(self, cursor: str | None) -> web.Response:
        """The closed conversations: the planted page, then an empty last one."""
        first = self.planted.closed
        if cursor is None:
            return self._json(first, snapshot=True)
        if cursor == first.next_cursor:
            return self._json(ConversationPage(), snapshot=True)
        return self._json(ErrorBody(error="bad_request"), status=400)

    async def _reply(self, request: web.Request, ask_id: str) -> web.Response:
        reply = decode(await request.read(), Reply)
        self.replies.append((ask_id, reply))
        conv = next((c for c in self.conversations.values() if ask_id in _ask_ids(c)), None)
        if conv is None:
            return self._json(ReplyResult(outcome="not_open"))
        answered = self.planted.replied[ask_id]
        self.emit(
            AskResolved(
                ask_id=ask_id,
                conversation_id=conv.id,
                how="answered",
                request_id=reply.request_id,
                at=datetime.now(UTC),
            )
        )
        return self._json(answered)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        given = request.headers.get("Last-Event-ID")
        sent = int(given) if given is not None and given.isdigit() else len(self.log)
        if sent > len(self.log):
            await resp.write(b'event: reset\ndata: {"type": "reset"}\n\n')
            sent = len(self.log)
        while True:
            while sent < len(self.log):
                sent += 1
                await resp.write(b"id: %d\ndata: %s\n\n" % (sent, self.log[sent - 1]))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):
                    await self.tick.wait()
            await resp.write(b": ping\n\n")

    def _json(self, body: object, status: int = 200, snapshot: bool = False) -> web.Response:
        headers = {"Wire-Event-Id": str(len(self.log))} if snapshot else {}
        return web.Response(
            body=encode(body), status=status, content_type="application/json", headers=headers
        )


def _ask_ids(conv: Conversation) -> set[str]:
    return {a.id for a in conv.asks}


# --- the scene ------------------------------------------------------------------------------


@dataclass
class Scene:
    """The planted data, and the text of every surface that left a process, by name."""

    planted: Planted
    surfaces: dict[str, str]
    shown: dict[str, Any]  # the phone's screens as JSON, for the masked forms
    streams: dict[str, list[tuple[str, Any]]]  # each phone's events, parsed


@dataclass
class Stream:
    """A phone's ``GET /api/v1/events``, read as it comes: each event and its data."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def has(self, kind: str) -> bool:
        return any(k == kind for k, _ in self.events)

    def text(self) -> str:
        return "\n".join(f"{k} {json.dumps(d, ensure_ascii=False)}" for k, d in self.events)


@dataclass
class Devices:
    """The phones' push subscriptions: the Web Push browser and the app behind the relay."""

    browser: Browser
    app: Browser


async def register(gateway: GatewayProcess, web_push: FakePushService, relay: Relay) -> Devices:
    """An APNs, an FCM, a Web Push and a relayed device on ``gateway``."""
    await gateway.post("/api/v1/devices", {"provider": "apns", "token": APNS_TOKEN})
    await gateway.post("/api/v1/devices", {"provider": "fcm", "token": FCM_TOKEN})
    endpoint, browser = web_push.subscribe()
    keys = {"p256dh": browser.p256dh, "auth": b64url(browser.auth)}
    await gateway.post(
        "/api/v1/devices", {"provider": "webpush", "endpoint": endpoint, "keys": keys}
    )
    gateway_key = (await gateway.get("/api/v1/push/vapid"))["public_key"]
    app = Browser()
    sub = await relay.register("apns", RELAY_TOKEN, app, vapid=gateway_key)
    keys = {"p256dh": app.p256dh, "auth": b64url(app.auth)}
    await gateway.post(
        "/api/v1/devices", {"provider": "webpush", "endpoint": sub["endpoint"], "keys": keys}
    )
    return Devices(browser, app)


def apns_to(svc: Services, token: str) -> list[dict[str, Any]]:
    return [
        json.loads(s.body)
        for s in svc.apns.requests
        if s.headers.get(":path", "").endswith("/" + token)
    ]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def scene() -> AsyncIterator[Scene]:
    planted = plant()
    with short_dir() as tmp:
        async with (
            services(tmp, lambda: datetime.now(UTC).timestamp()) as svc,
            receiver([b"whsec_every_surface"]) as hook,
            relay_process(tmp, svc) as relay,
        ):
            web_push = FakePushService()
            async with serve(web_push.app()) as origin:
                web_push.origin = origin
                yield await run(tmp, planted, svc, hook, relay, web_push)


async def run(
    tmp: Path,
    planted: Planted,
    svc: Services,
    hook: Receiver,
    relay: Relay,
    web_push: FakePushService,
) -> Scene:
    agent = WireAgent(planted)
    env = {
        **push_env(tmp, svc),
        "COLLIE_WEBHOOK_URL": hook.url,
        "COLLIE_WEBHOOK_SECRETS": "whsec_every_surface",
    }
    member = GatewayProcess(
        write_json(
            tmp / "member.json",
            {"durable_agents": [{"name": "desk", "socket": str(tmp / "desk.sock")}]},
        ),
        tmp / "member.db",
        tmp / "member.log",
        env=env,
        args=["--machine", "workshop", "-v"],
    )
    lead = GatewayProcess(
        write_json(
            tmp / "lead.json",
            {"durable_agents": [], "crew": [{"name": "workshop", "url": member.base}]},
        ),
        tmp / "lead.db",
        tmp / "lead.log",
        env=push_env(tmp, svc),
        args=["--machine", "lead", "-v"],
    )
    phone, lead_phone = Stream(), Stream()
    followers: list[asyncio.Task[None]] = []
    shown: dict[str, Any] = {}
    async with raw_agent(agent.handle, tmp / "desk.sock"):
        try:
            await member.start(ready=1)
            await lead.start(ready=0, crew_ready=1)
            devices = await register(member, web_push, relay)
            await lead.post("/api/v1/devices", {"provider": "apns", "token": LEAD_TOKEN})
            followers = [
                asyncio.create_task(follow(member.base, phone.events)),
                asyncio.create_task(follow(lead.base, lead_phone.events)),
            ]
            await eventually(lambda: phone.has("stream") and lead_phone.has("stream"), within=10)
            await speak(agent, planted)
            await delivered(svc, hook, web_push, phone, lead_phone)
            shown.update(await screens(member, lead))
            shown.update(await commands(member, lead))
            shown.update(await answer(member, lead, planted, agent))
            shown.update(await screens(member, lead, after="after"))
            await eventually(lambda: len(apns_to(svc, APNS_TOKEN)) >= 4, within=15)
        finally:
            for task in followers:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                    await task
            await lead.stop()
            await member.stop()
    surfaces = {
        "phone: event stream": phone.text(),
        "lead: event stream": lead_phone.text(),
        "APNs (direct)": json.dumps(apns_to(svc, APNS_TOKEN)),
        "APNs (lead's device)": json.dumps(apns_to(svc, LEAD_TOKEN)),
        "FCM": json.dumps([s.message for s in svc.fcm.requests]),
        "Web Push (decrypted)": json.dumps([s.message for s in web_push.requests]),
        "relay (decrypted)": json.dumps(relayed(svc, devices.app)),
        "relay: APNs as sent": json.dumps(apns_to(svc, RELAY_TOKEN)),
        "webhook": "\n".join(body.decode() for _, body in hook.raw),
        "log: gateway -v": member.log.read_text(errors="replace"),
        "log: lead -v": lead.log.read_text(errors="replace"),
        "log: relay": relay.log.read_text(errors="replace"),
    }
    for name, screen in shown.items():
        surfaces[name] = json.dumps(screen, ensure_ascii=False)
    streams = {"phone": phone.events, "lead": lead_phone.events}
    return Scene(planted, surfaces, shown, streams)


def relayed(svc: Services, app: Browser) -> list[dict[str, Any]]:
    """What the app behind the relay decrypts from each APNs request the relay sent."""
    out = []
    for body in apns_to(svc, RELAY_TOKEN):
        out.append(dict(app.json(base64.b64decode(body["collie"]["w"]))))
    return out


async def speak(agent: WireAgent, planted: Planted) -> None:
    """The agent's events: the conversation opens, its items come, both asks are raised."""
    conv = planted.conversation
    agent.emit(ConversationOpened(conversation=msgspec.structs.replace(conv, asks=[], items=None)))
    for item in conv.items or []:
        agent.emit(ItemAppended(conversation_id=conv.id, item=item))
    # An item written as the phone watches: its delta's secret comes in two pieces.
    live, delta = planted.live, planted.delta
    agent.emit(ItemAppended(conversation_id=conv.id, item=live))
    for piece in (" " + delta.text[:20], delta.text[20:]):
        agent.emit(msgspec.structs.replace(delta, text=piece))
    done = msgspec.structs.replace(live, text=f"{live.text} {delta.text}", final=True, at=NOW)
    agent.emit(ItemUpdated(conversation_id=conv.id, item=done))
    agent.emit(AskRaised(ask=planted.permission))
    agent.emit(AskRaised(ask=planted.form))
    agent.emit(ConversationUpdated(conversation=msgspec.structs.replace(conv, items=None)))
    # The header's line 2 shows one of progress, subtitle and workspace (H2): a pane for each.
    assert conv.progress is not None
    by_percent = msgspec.structs.replace(conv.progress, steps=None)
    for cid, changes in (
        ("c2", {"progress": by_percent}),
        ("c3", {"progress": None, "subtitle": None}),
        ("c4", {"progress": None, "subtitle": None, "workspace": None}),
    ):
        other = msgspec.structs.replace(conv, id=cid, asks=[], items=None, **changes)
        agent.emit(ConversationOpened(conversation=other))


async def delivered(
    svc: Services, hook: Receiver, web_push: FakePushService, phone: Stream, lead: Stream
) -> None:
    """Until both asks reached every provider, the webhook and both phones' streams."""

    def done() -> bool:
        return (
            len(apns_to(svc, APNS_TOKEN)) >= 2
            and len(apns_to(svc, RELAY_TOKEN)) >= 2
            and len(apns_to(svc, LEAD_TOKEN)) >= 2
            and len(svc.fcm.requests) >= 2
            and len(web_push.requests) >= 2
            and len(hook.accepted) >= 2
            and phone.has("ask.raised")
            and lead.has("ask.raised")
        )

    await eventually(done, within=20)


async def screens(member: GatewayProcess, lead: GatewayProcess, after: str = "") -> dict[str, Any]:
    """Every screen the phone reads, on the gateway and on the lead, by surface name."""
    paths = {
        "dashboard": "/api/v1/dashboard",
        "agent": "",
        "list": "/conversations",
        "chat": "/conversations/c1?all_cards=true",
        "chat c2": "/conversations/c2",
        "chat c3": "/conversations/c3",
        "chat c4": "/conversations/c4",
        "new": "/new",
    }
    out: dict[str, Any] = {}
    for name, tail in paths.items():
        on_member = "/api/v1/dashboard" if name == "dashboard" else AGENT + tail
        on_lead = "/api/v1/dashboard" if name == "dashboard" else ON_LEAD + tail
        out[f"phone: {name} {after}".strip()] = await member.get(on_member)
        out[f"lead: {name} {after}".strip()] = await lead.get(on_lead)
    for where, gateway in (("phone", member), ("lead", lead)):  # L6: "Load more"
        footer = out[f"{where}: list {after}".strip()]["footer"]
        out[f"{where}: closed {after}".strip()] = await gateway.get(footer["href"])
    out[f"phone: push log {after}".strip()] = await member.get("/api/v1/pushes")
    return out


async def commands(member: GatewayProcess, lead: GatewayProcess) -> dict[str, Any]:
    """A message, a button and a stop from the phone, and a message through the lead: the
    agent refuses each with its reason, the stop with an error body's sentence."""
    button = next(b for b in (await member.get(CHAT))["bar"]["controls"] if b["button_id"])
    turn = {"request_id": "stop-1", "turn": 1}
    return {
        "phone: command answers": [
            await member.post(CHAT + "/messages", {"request_id": "m-1", "text": "hello"}),
            await member.post(
                CHAT + f"/buttons/{button['button_id']}", {**turn, "request_id": "b-1"}
            ),
            await member.post(CHAT + "/stop", turn),
            await member.get(CHAT),  # the message refused, with the agent's reason
        ],
        "lead: command answers": [
            await lead.post(
                ON_LEAD + "/conversations/c1/messages", {"request_id": "m-2", "text": "hi"}
            ),
            await lead.post(ON_LEAD + "/conversations/c1/stop", {**turn, "request_id": "s-2"}),
        ],
    }


async def answer(
    member: GatewayProcess, lead: GatewayProcess, planted: Planted, agent: WireAgent
) -> dict[str, Any]:
    """The permission answered on the gateway, the form from the lead; both resolved."""
    allow = planted.permission.options[0].id
    tap = {"request_id": "tap-1", "version": 1, "answer": {"option": allow}}
    tapped = await member.post(AGENT + "/asks/a1/answer", tap)
    chat = await lead.get(ON_LEAD + "/conversations/c1?all_cards=true")
    card = next(c for c in chat["cards"]["cards"] if c["ask_id"] == "a2")
    form = {"request_id": "tap-2", "version": 1, "answer": {"fields": {}}}
    on_lead = await lead.post(card["answer_url"], form)
    await eventually(lambda: len(agent.replies) == 2, within=10)

    async def resolved() -> bool:
        cards = (await member.get(CHAT + "?all_cards=true"))["cards"]
        return not cards or not cards["cards"]

    await eventually(resolved, within=10)
    return {
        "phone: answers": [tapped, await member.get("/api/v1/answers/tap-1")],
        "lead: answers": [on_lead, await lead.get("/api/v1/machines/workshop/answers/tap-2")],
    }


# --- the tests ---------------------------------------------------------------------------


def test_X1_the_planter_fills_every_text_of_the_wire_types() -> None:
    planted = plant()
    p = planted.planter
    everything = [text for value in planted.values() for text in texts(value)]
    # texts() walks the same types: what it calls a text is exactly what was planted.
    assert sorted(everything) == sorted(p.planted)
    assert len(set(everything)) == len(everything)  # each secret distinct
    owners = set().union(*(text_fields(type(value)) for value in planted.values()))
    assert {"Argument.value", "Ask.reasons", "Item.output", "Step.label"} <= owners
    assert p.owners == owners
    for path in (
        "ask.arguments[].value{key}",
        "ask.arguments[].value[]",
        "ask.reasons[]",
        "ask.tool.name",
        "form.fields[].options[].label",
        "item:tool.output",
        "item:link.label",
        "item:user.words.args{value}",
        "item:user.push.line",
        "conversation.progress.steps[].label",
        "conversation.buttons[].label",
        "conversation.workspace",
        "hello.subtitle",
        "starters.starters[].description",
        "reply.reason",
        "command.reason",
        "error.message",
    ):
        assert path in p.paths(), path
    assert len(p.planted) > 80


def test_X1_a_type_the_planter_cannot_fill_fails_it() -> None:
    class Odd(msgspec.Struct):
        when: timedelta

    with pytest.raises(CannotFill, match=r"Odd\.when"):
        Planter().build(Odd, "odd")


SURFACES = (
    "phone: dashboard",
    "phone: agent",
    "phone: list",
    "phone: chat",
    "phone: chat c2",
    "phone: chat c3",
    "phone: chat c4",
    "phone: new",
    "phone: closed",
    "phone: command answers",
    "phone: answers",
    "phone: push log",
    "phone: dashboard after",
    "phone: list after",
    "phone: chat after",
    "phone: event stream",
    "APNs (direct)",
    "FCM",
    "Web Push (decrypted)",
    "relay (decrypted)",
    "relay: APNs as sent",
    "webhook",
    "lead: dashboard",
    "lead: agent",
    "lead: list",
    "lead: chat",
    "lead: chat c2",
    "lead: chat c3",
    "lead: chat c4",
    "lead: new",
    "lead: closed",
    "lead: command answers",
    "lead: answers",
    "lead: chat after",
    "lead: event stream",
    "APNs (lead's device)",
    "log: gateway -v",
    "log: lead -v",
    "log: relay",
)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("surface", SURFACES)
async def test_X1_no_secret_leaves_on(scene: Scene, surface: str) -> None:
    text = scene.surfaces[surface]
    assert text, f"{surface}: nothing was read"
    leaks = _leaks(scene, text)
    assert not leaks, f"{surface} leaks {len(leaks)} fields:\n" + "\n".join(
        f"  {path}: …{around}…" for path, around in sorted(leaks.items())
    )


@pytest.mark.asyncio(loop_scope="module")
async def test_X1_the_agents_runtime_shows_masked_on_its_dashboard_row(scene: Scene) -> None:
    mask = Redactor().mask(next(iter(scene.planted.planter.planted)))
    for where in ("phone", "lead"):
        [row] = [
            r for s in scene.shown[f"{where}: dashboard"]["sections"] for r in s.get("rows") or []
        ]
        assert row["line2"].startswith(mask + ", "), row


def _leaks(scene: Scene, text: str) -> dict[str, str]:
    """The planted fields 12 characters of whose secret show in ``text``, with their
    surroundings."""
    planted = scene.planted.planter.planted
    windows = {s[i : i + WINDOW]: s for s in planted for i in range(len(s) - WINDOW + 1)}
    leaks: dict[str, str] = {}
    for i in range(len(text) - WINDOW + 1):
        secret = windows.get(text[i : i + WINDOW])
        if secret is not None:
            leaks.setdefault(planted[secret], text[max(0, i - 60) : i + 60])
    return leaks


def _cards(chat: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["ask_id"]: c for c in chat["cards"]["cards"]}


def _chat_masked(chat: dict[str, Any], mask: str) -> None:
    """Every text the chat of ``c1`` shows is the mask: header, lines, cards, bar."""
    assert chat["header"]["title"] == mask
    assert chat["header"]["line2"].endswith(": " + mask)  # "Step 2 of 2: …" (H2)
    for line in chat["lines"]:
        shown = [line.get(k) for k in ("text", "label", "tool", "output") if line.get(k)]
        assert shown or mask in line["html"], line
        assert all(set(text.split(" ")) == {mask} for text in shown), line
    permission, form = _cards(chat)["a1"], _cards(chat)["a2"]
    for card in (permission, form):
        assert (card["title"], card["text"]) == (mask, mask)
        call = card["call"]
        assert [a["name"] for a in call["arguments"]] == [mask, mask]
        for argument in call["arguments"]:  # any JSON: every key and every string
            value = json.loads(argument["value"])
            assert (set(value), *value.values()) == ({mask}, [mask, 7, None]), value
        assert call["reasons"] == [mask, mask]
    assert [b["secondary"] for b in permission["body"]["buttons"]] == [mask, mask]
    fields = form["body"]["fields"]
    assert [f["label"] for f in fields] == [mask, mask]
    assert [o["label"] for o in fields[1]["options"]] == [mask, mask]
    buttons = [c["label"] for c in chat["bar"]["controls"] if c["kind"] == "button"]
    assert buttons == [mask, mask]


@pytest.mark.asyncio(loop_scope="module")
async def test_X1_each_surface_shows_the_texts_masked(scene: Scene) -> None:
    shown, mask = scene.shown, Redactor().mask(next(iter(scene.planted.planter.planted)))
    assert mask == "ghp_••••"
    for where in ("phone", "lead"):
        _chat_masked(shown[f"{where}: chat"], mask)
        assert shown[f"{where}: chat c2"]["header"]["line2"] == f"50%: {mask}"  # H2
        assert shown[f"{where}: chat c3"]["header"]["line2"] == mask  # the workspace
        assert shown[f"{where}: chat c4"]["header"]["line2"] == mask  # the hello's subtitle
        deltas = [d["text"] for k, d in scene.streams[where] if k == "chat.delta"]
        assert mask in "".join(deltas), deltas
        assert {r["title"] for r in shown[f"{where}: list"]["rows"]} == {mask}
        assert [r["title"] for r in shown[f"{where}: list"]["closed"]] == [mask]
        starters = shown[f"{where}: new"]["starters"]
        assert [(s["label"], s["description"]) for s in starters] == [(mask, mask)] * 2
        assert shown[f"{where}: agent"]["runtime"] == mask
        told = [a["message"] for a in shown[f"{where}: command answers"][:3] if "message" in a]
        assert told == [mask] * len(told), told
        assert len(told) >= 2
        raised = [d for k, d in scene.streams[where] if k == "ask.raised"]
        assert [d["ask"]["reasons"] for d in raised] == [[mask, mask]] * 2
        assert {d["ask"]["arguments"][0]["name"] for d in raised} == {mask}
    # The log at -v names the agent's sentence for the refused stop, masked.
    assert f"AgentRejected: {mask}" in scene.surfaces["log: gateway -v"]
    # The agent's reason for a reply that found the ask closed (the form, tapped on the lead).
    assert [v["card"]["line"] for v in shown["lead: answers"]] == [mask, mask]
    alerts = [
        json.loads(scene.surfaces[name]) for name in ("APNs (direct)", "APNs (lead's device)")
    ]
    for alert in [a["aps"]["alert"] for sent in alerts for a in sent if "alert" in a["aps"]]:
        assert (alert["title"][-len(mask) :], alert["body"]) == (mask, mask), alert
    fcm = [m for m in json.loads(scene.surfaces["FCM"]) if "notification" in m]
    webpush = json.loads(scene.surfaces["Web Push (decrypted)"])
    relayed = json.loads(scene.surfaces["relay (decrypted)"])
    # A notice the agent asked to push (Item.push): its title and line, masked.
    notices = [m["notification"] for m in fcm if m["data"].get("type") == "notice"]
    notices += [m for m in (*webpush, *relayed) if m["type"] == "notice"]
    assert notices
    for push in notices:
        assert (push["title"], push["body"]) == (mask, mask), push
    for push in (
        *[m["notification"] for m in fcm if m["data"].get("type") == "ask"],
        *[m for m in webpush if m["type"] == "ask"],
        *[m for m in relayed if m["type"] == "ask"],
    ):
        assert (push["title"][-len(mask) :], push["body"]) == (mask, f"{mask}\n{mask}"), push
    hooks = [json.loads(line) for line in scene.surfaces["webhook"].splitlines()]
    asks = [h["ask"] for h in hooks if "ask" in h]
    assert [(a["title"], a["reasons"]) for a in asks] == [(mask, [mask, mask])] * 2
