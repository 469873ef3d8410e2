"""Golden traces of the gateway's three flows, for a scripted agent (issue 20: the move into
rooms must change nothing a phone, an agent or the SQLite file sees):

(a) an agent's ``item.appended`` / ``item.delta`` / ``item.updated`` reaching a phone that
    follows the chat on its live stream;
(b) a phone's answers reaching the agent and the ledger: a tap, a retried tap with the same
    request id (the agent gets it once), a tap on a version the ask changed from;
(c) an ask raised until its push leaves for the fake APNs (and FCM) on 127.0.0.1: P3's once
    key, the push owed to a device whose send is held, then delivered.

Each step of a flow records, in order, the events the phone's ``GET /api/v1/events`` delivered
(type and data), the rows that changed in the gateway's SQLite file (read-only, per table:
by rowid, or by the row for a table without one; ``-`` the row as it was, ``+`` as it
is), and what left the gateway (the agent's requests, the pushes). A step ends once its
checks hold (its last event, its last row) and nothing new came for ``QUIET`` seconds. What
varies between runs (times, random ids, ports, paths) is replaced by a stable placeholder.

Only public surfaces: the phone API over real HTTP, SDK agents on real sockets, the fakes of
the push services, the SQLite file. The golden files are ``fixtures/golden/*.txt``; write
them anew with ``COLLIE_GOLDEN_WRITE=1 python -m pytest tests/collie_gateway/test_golden_flows.py``
(and read the diff before committing it).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import difflib
import functools
import json
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient
from aiohttp.typedefs import Handler, Middleware

from collie_gateway.sources import Source
from tests.collie_gateway.conftest import PATIENT, Rig, eventually, get_json
from tests.collie_gateway.push_fixtures import Services, services
from wire.agent import Option, ToolRef
from wire.sse import SSEParser

Client = TestClient[Any, Any]

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "golden"
WRITE = os.environ.get("COLLIE_GOLDEN_WRITE") == "1"
QUIET = 0.4  # seconds with no new event and no changed row that end a step
STEP_LIMIT = 10.0  # seconds a step may take to fall quiet
CHAT = "/api/v1/agents/desk/conversations/c1"
MACHINE = "desk-mac"
APNS_TOKEN = "a1" * 32
FCM_TOKEN = "fcm-token-" + "x" * 140
TOOL = ToolRef(call_id="t1", name="shell")
PERMISSION = [
    Option(id="allow", label="Yes, run it", role="allow"),
    Option(id="always", label="Always for ls", role="always"),
    Option(id="deny", label="No", role="deny"),
]

Tables = dict[str, list[str]]


# --- the phone and the agent, seen from outside ---------------------------------------------


@dataclass(frozen=True)
class Event:
    type: str
    data: Any


class Phone:
    """A phone on ``GET /api/v1/events``: every event it is sent, in order (the stream's
    hello aside), read in the background."""

    def __init__(self, resp: ClientResponse) -> None:
        self.resp = resp
        self.events: list[Event] = []
        self.hello = asyncio.Event()
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, client: Client) -> Phone:
        resp = await client.get("/api/v1/events")
        assert resp.status == 200, await resp.text()
        phone = cls(resp)
        async with asyncio.timeout(5):
            await phone.hello.wait()
        return phone

    async def _read(self) -> None:
        parser = SSEParser()
        async for chunk in self.resp.content.iter_any():
            for sse in parser.feed(chunk):
                if sse.id is None:
                    self.hello.set()  # the stream's hello: its id, no event id
                else:
                    self.events.append(Event(sse.event, json.loads(sse.data)))

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.resp.close()


@dataclass
class AgentRequests:
    """An agent middleware: each POST the agent is sent (path, JSON body), in order."""

    posts: list[tuple[str, Any]] = field(default_factory=list)

    def middleware(self) -> Middleware:
        @web.middleware
        async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.method == "POST":
                body = await request.read()
                self.posts.append((request.path, json.loads(body) if body else None))
            return await handler(request)

        return record


def resolutions(rig: Rig, agent: str) -> list[Any]:
    """Every ``ask.resolved`` the agent keeps in its state file, oldest first: how it acted."""
    uri = (rig.tmp / f"{agent}.agent.db").resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        rows = conn.execute(
            "SELECT data FROM events WHERE type = 'ask.resolved' ORDER BY rowid"
        ).fetchall()
    return [json.loads(bytes(r[0])) for r in rows]


# --- what varies between runs ---------------------------------------------------------------


class Placeholders:
    """Stable names for what varies between runs: random ids numbered in order of first
    appearance, times relative to the test clock's start, the temporary directory, ports."""

    PATTERNS = (
        ("device", re.compile(r"\bd-[0-9a-f]{16}\b")),
        ("stream", re.compile(r"\bs-[0-9a-f]{16}\b")),
        ("uuid", re.compile(r"\b[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\b")),
        ("event-id", re.compile(r"\b[0-9a-f]{8}-\d+\b")),
    )
    ISO = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
    PORT = re.compile(r"127\.0\.0\.1:\d+")

    def __init__(self, start: datetime, tmp: Path) -> None:
        self.start = start
        self.tmp = str(tmp)
        self.names: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def _name(self, kind: str, value: str) -> str:
        if kind == "event-id":
            return "<event-id>"  # the boot is random; the count is not the trace's business
        if value not in self.names:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.names[value] = f"<{kind}-{self.counts[kind]}>"
        return self.names[value]

    def _named(self, kind: str, match: re.Match[str]) -> str:
        return self._name(kind, match.group())

    def _time(self, at: datetime) -> str:
        seconds = (at - self.start).total_seconds()
        return f"<T{seconds:+g}s>"

    def text(self, value: str) -> str:
        """``value`` with every varying part replaced."""
        value = value.replace(self.tmp, "<tmp>")
        value = self.PORT.sub("127.0.0.1:<port>", value)
        for kind, pattern in self.PATTERNS:
            value = pattern.sub(functools.partial(self._named, kind), value)
        return self.ISO.sub(lambda m: self._time(_parse_iso(m.group())), value)

    def value(self, value: Any) -> Any:
        """A JSON value with every varying part replaced (a float near the clock's start is
        a timestamp)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, float) and abs(value - self.start.timestamp()) < 1e7:
            return self._time(datetime.fromtimestamp(value, UTC))
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k): self.value(v) for k, v in value.items()}
        return value

    def json(self, value: Any) -> str:
        """One line of JSON, normalised, keys in the order they came."""
        return json.dumps(self.value(value), ensure_ascii=False, separators=(",", ":"))


def _parse_iso(text: str) -> datetime:
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


# --- the SQLite file, read-only ------------------------------------------------------------


def _cell(value: Any) -> Any:
    """A column's value as JSON: a blob of JSON as its value, a PEM key as its kind (the
    VAPID key is made anew by each gateway), another blob as base64."""
    if isinstance(value, bytes) and value.startswith(b"-----BEGIN "):
        return {"pem": value.split(b"\n", 1)[0].decode()}
    if isinstance(value, bytes):
        try:
            return {"json": json.loads(value)}
        except ValueError:
            return {"base64": base64.b64encode(value).decode()}
    return value


class Database:
    """The gateway's SQLite file opened read-only: each table's rows, in order."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)

    def close(self) -> None:
        self.conn.close()

    def _has_rowid(self, table: str) -> bool:
        sql = self.conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        return "WITHOUT ROWID" not in str(sql[0]).upper()

    def dump(self, norm: Placeholders) -> Tables:
        """Every table (but SQLite's own) as normalised JSON rows: by rowid, or, in a table
        without one, by the row as normalised (its primary key comes first: a random id
        would order it by chance)."""
        names = [
            str(r[0])
            for r in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        tables: Tables = {}
        for table in names:
            rowid = self._has_rowid(table)
            cur = self.conn.execute(f"SELECT * FROM {table}" + (" ORDER BY rowid" if rowid else ""))
            columns = [d[0] for d in cur.description]
            rows = [
                norm.json({c: _cell(v) for c, v in zip(columns, row, strict=True)})
                for row in cur.fetchall()
            ]
            tables[table] = rows if rowid else sorted(rows)
        return tables


def changed_rows(before: Tables, after: Tables) -> Iterator[str]:
    """Per table: each row gone or changed as it was (``-``), then each new or changed row as
    it is now (``+``), in the table's order."""
    for table in sorted(set(before) | set(after)):
        old, new = before.get(table, []), after.get(table, [])
        kept = set(old) & set(new)
        for row in old:
            if row not in kept:
                yield f"row {table} - {row}"
        for row in new:
            if row not in kept:
                yield f"row {table} + {row}"


# --- the trace -------------------------------------------------------------------------------


class Trace:
    """A flow's trace: steps, each with the phone's events and the rows that changed since
    the step before, and what else the test notes."""

    def __init__(self, rig: Rig, phone: Phone) -> None:
        self.norm = Placeholders(rig.clock(), rig.tmp)
        self.phone = phone
        self.db = Database(rig.tmp / "gateway.db")
        self.lines: list[str] = []
        self._events = len(phone.events)
        self._tables: Tables = {}  # the first step shows every row
        self.sources: list[Callable[[], list[str]]] = []  # more of what left, per step

    def note(self, label: str, value: Any) -> None:
        """Record ``value`` (JSON) under ``label`` in the current step."""
        self.lines.append(f"{label} {self.norm.json(value)}")

    async def _quiet(self) -> Tables:
        """Wait until no event came and no row changed for ``QUIET`` s; the tables then."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STEP_LIMIT
        seen = (len(self.phone.events), self.db.dump(self.norm), self._more())
        quiet_since = loop.time()
        while loop.time() - quiet_since < QUIET:
            assert loop.time() < deadline, f"no quiet within {STEP_LIMIT} s"
            await asyncio.sleep(0.02)
            now = (len(self.phone.events), self.db.dump(self.norm), self._more())
            if now != seen:
                seen, quiet_since = now, loop.time()
        return seen[1]

    def _more(self) -> int:
        return sum(len(source()) for source in self.sources)

    @contextlib.asynccontextmanager
    async def step(self, title: str, *until: Callable[[], bool]) -> AsyncIterator[None]:
        """A step named ``title``: what its body notes, then, once every check of ``until``
        holds and all fell quiet, the events and rows since the step before."""
        self.lines.append(f"## {title}")
        yield
        for check in until:
            await eventually(check, STEP_LIMIT)
        tables = await self._quiet()
        for event in self.phone.events[self._events :]:
            self.lines.append(f"event {event.type} {self.norm.json(event.data)}")
        self._events = len(self.phone.events)
        self.lines.extend(changed_rows(self._tables, tables))
        self._tables = tables

    def event(self, type_: str, *texts: str) -> Callable[[], bool]:
        """A check: the step brought an event ``type_`` whose JSON holds each of ``texts``."""

        def check() -> bool:
            new = self.phone.events[self._events :]
            found = (json.dumps(e.data) for e in new if e.type == type_)
            return any(all(t in data for t in texts) for data in found)

        check.__qualname__ = f"an event {type_} holding {texts}"
        return check

    def row(self, table: str, *texts: str, absent: bool = False) -> Callable[[], bool]:
        """A check: a row of ``table`` (as normalised) holds each of ``texts`` (``absent``:
        no row does)."""

        def check() -> bool:
            rows = self.db.dump(self.norm).get(table, [])
            return any(all(t in r for t in texts) for r in rows) != absent

        check.__qualname__ = f"{'no' if absent else 'a'} row of {table} holding {texts}"
        return check

    def check(self, name: str) -> None:
        """Compare with ``fixtures/golden/<name>.txt`` (or write it, in the writing mode)."""
        self.db.close()
        text = "\n".join(self.lines) + "\n"
        path = GOLDEN / f"{name}.txt"
        if WRITE:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.is_file(), f"{path} is missing: write it with COLLIE_GOLDEN_WRITE=1"
        want = path.read_text(encoding="utf-8")
        if text != want:
            diff = difflib.unified_diff(
                want.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"golden {path.name}",
                "this run",
            )
            pytest.fail(
                f"the trace differs from {path} (a change you mean: write it anew with"
                f" COLLIE_GOLDEN_WRITE=1 and review the diff):\n{''.join(diff)}",
                pytrace=False,
            )


async def agents_ready(client: Client) -> None:
    """Wait until the dashboard shows every agent ready (its link read the agent)."""

    async def ready() -> bool:
        board = await get_json(client, "/api/v1/dashboard")
        rows = [r for s in board["sections"] if s["kind"] == "durable_agents" for r in s["rows"]]
        return bool(rows) and all(r["state"] == "ready" for r in rows)

    await eventually(ready)


@contextlib.asynccontextmanager
async def following(rig: Rig, client: Client) -> AsyncIterator[Trace]:
    """A phone that reads chat ``c1`` (so it is kept live), then follows the live stream.
    The first step holds every row of the start and what the read showed."""
    await agents_ready(client)
    phone = await Phone.connect(client)
    trace = Trace(rig, phone)
    try:
        async with trace.step(
            "the gateway started; a phone reads the chat, follows the stream",
            trace.row("agents", '"state":"ready"'),
            trace.row("conversations", '"id":"c1"'),
        ):
            trace.note("read", await get_json(client, CHAT))
        yield trace
    finally:
        await phone.close()


# --- (a) an agent's items reaching a phone ---------------------------------------------------


async def test_golden_a_X1_agent_items_reach_a_phone_following_the_chat(rig: Rig) -> None:
    agent = rig.agent("desk", runtime="desk", features=["history", "stop"])
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Notes")
    client, _ = await rig.gateway([Source(name="desk", socket=sock)], timing=PATIENT)
    async with following(rig, client) as trace:
        item, delta = trace.event("chat.item"), trace.event("chat.delta")
        async with trace.step("item.appended: a reply begins", item):
            reply = await conv.append(kind="reply", final=False)
        async with trace.step("item.delta: a whole word", delta):
            await reply.delta("Hello ")
        async with trace.step("item.delta: half a word (X1: held until it ends)"):
            await reply.delta("wor")
        async with trace.step("item.delta: the word ends", delta):
            await reply.delta("ld. ")
        async with trace.step("item.updated: the reply is final", item):
            await reply.finish()
        async with trace.step("item.appended: a final reply", item):
            await conv.append(kind="reply", text="Done: 3 notes sorted.")
        async with trace.step("item.appended: a tool call", item):
            tool = await conv.append(kind="tool", final=False, call_id="t1", name="shell")
        async with trace.step("item.updated: the tool call ends", item):
            await tool.update(status="done", output="ok", final=True)
        async with trace.step(
            "the conversation changes",
            trace.event("chat.changed"),
            trace.row("conversations", "Notes, sorted"),
        ):
            await conv.update(title="Notes, sorted")
        async with trace.step("the phone reads the chat again"):
            trace.note("read", await get_json(client, CHAT))
        trace.check("a_agent_items_reach_a_phone")


# --- (b) a phone's answers reaching the agent and the ledger ---------------------------------


class Taps:
    """The phone's taps, and what the agent got of them and did."""

    def __init__(self, rig: Rig, client: Client, trace: Trace, agent: AgentRequests) -> None:
        self.rig = rig
        self.client = client
        self.trace = trace
        self.agent = agent
        self.seen = (len(agent.posts), 0)  # posts and resolutions noted so far
        trace.sources.append(lambda: [str(p) for p in agent.posts])

    async def tap(self, ask: str, request_id: str, version: int, answer: dict[str, Any]) -> None:
        """``POST …/asks/{ask}/answer`` as the phone sends it; note both ways."""
        body = {"request_id": request_id, "version": version, "answer": answer}
        self.trace.note(f"phone POST answer to {ask}", body)
        resp = await self.client.post(f"/api/v1/agents/desk/asks/{ask}/answer", json=body)
        self.trace.note(f"phone got {resp.status}", await resp.json())

    def agent_got(self) -> None:
        """Note what the agent was sent since the last call, and each ask it resolved."""
        posts, resolved = self.seen
        for path, body in self.agent.posts[posts:]:
            self.trace.note(f"agent got POST {path}", body)
        if len(self.agent.posts) == posts:
            self.trace.lines.append("agent got nothing")
        done = resolutions(self.rig, "desk")
        for event in done[resolved:]:
            self.trace.note("agent resolved", event)
        self.seen = (len(self.agent.posts), len(done))


async def test_golden_b_T1_S5_phone_answers_reach_the_agent_and_the_ledger(rig: Rig) -> None:
    requests = AgentRequests()
    agent = rig.agent(
        "desk", runtime="desk", features=["history", "stop"], middlewares=[requests.middleware()]
    )
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Tidy up")
    client, _ = await rig.gateway([Source(name="desk", socket=sock)], timing=PATIENT)
    async with following(rig, client) as trace:
        taps = Taps(rig, client, trace, requests)
        shown, no_ask = trace.event("chat.changed"), trace.row("conversations", "asks", absent=True)
        async with trace.step(
            "the agent raises ask p",
            shown,
            trace.row("push_once", r"\"tool\",\"t1\""),
            trace.row("conversations", '"id":"p"'),
        ):
            await conv.ask(
                kind="permission", id="p", title="Run ls?", tool=TOOL, options=PERMISSION
            )
        async with trace.step("the phone taps Yes (r1): accepted", shown, no_ask):
            await taps.tap("p", "r1", 1, {"option": "allow"})
        taps.agent_got()
        async with trace.step("the same tap again (r1): from the ledger, not sent again"):
            await taps.tap("p", "r1", 1, {"option": "allow"})
        taps.agent_got()

        async with trace.step(
            "the agent raises ask q",
            shown,
            trace.row("push_once", r"\"ask\",\"q\""),
            trace.row("conversations", '"id":"q"'),
        ):
            q = await conv.ask(kind="text", id="q", title="Name?")
        async with trace.step(
            "the agent changes ask q (version 2)", shown, trace.row("conversations", '"version":2')
        ):
            await q.change(text="Name of the new note?")
        async with trace.step("a tap on version 1 (r2): changed"):
            await taps.tap("q", "r2", 1, {"text": "notes"})
        taps.agent_got()
        async with trace.step("a tap on version 2 (r3): accepted", shown, no_ask):
            await taps.tap("q", "r3", 2, {"text": "notes"})
        taps.agent_got()
        async with trace.step("the phone reads each answer's status"):
            for request_id in ("r1", "r2", "r3"):
                trace.note(request_id, await get_json(client, f"/api/v1/answers/{request_id}"))
        trace.check("b_phone_answers_reach_the_agent")


# --- (c) an ask raised until its push leaves -------------------------------------------------


@pytest.fixture
async def svc(rig: Rig) -> AsyncIterator[Services]:
    async with services(rig.tmp, lambda: rig.clock().timestamp()) as s:
        yield s


def sent_to_apns(svc: Services) -> list[dict[str, Any]]:
    """What the fake APNs received: path, the ``apns-*`` headers, the payload."""
    return [
        {
            "path": r.headers.get(":path"),
            "headers": {k: v for k, v in sorted(r.headers.items()) if k.startswith("apns-")},
            "payload": r.json,
        }
        for r in svc.apns.requests
    ]


async def test_golden_c_P3_an_ask_raised_until_its_push_leaves(rig: Rig, svc: Services) -> None:
    agent = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Deploy notes")
    client, _ = await rig.gateway(
        [Source(name="desk", socket=sock)],
        push_targets=svc.targets,
        machine=MACHINE,
        timing=PATIENT,
    )
    options = [o for o in PERMISSION if o.role != "always"]
    async with following(rig, client) as trace:
        trace.sources.append(lambda: [str(r) for r in svc.apns.requests])
        trace.sources.append(lambda: [str(r) for r in svc.fcm.requests])
        async with trace.step("two phones register (APNs, FCM)"):
            for provider, token in (("apns", APNS_TOKEN), ("fcm", FCM_TOKEN)):
                body = {"provider": provider, "token": token}
                resp = await client.post("/api/v1/devices", json=body)
                trace.note(f"phone got {resp.status}", await resp.json())

        svc.fcm.hold = asyncio.Event()  # FCM holds the send: its push stays owed
        async with trace.step(
            "the agent raises a1: APNs takes its push, FCM holds it (owed)",
            lambda: svc.fcm.held == 1,
            trace.event("push.logged", '"outcome": "sent"'),
            trace.row("push_delivered", '"outcome":"sent"'),
            trace.row("conversations", '"id":"a1"'),
        ):
            await conv.ask(
                kind="permission",
                id="a1",
                title="Deploy to staging?",
                tool=TOOL,
                options=options,
                push_line="make deploy ENV=staging",
            )
        trace.note("APNs got", sent_to_apns(svc))

        async with trace.step(
            "FCM takes it: the push is delivered everywhere",
            trace.event("push.logged", '"outcome": "sent"'),
            trace.row("push_once", '"state":"done"'),
        ):
            svc.fcm.hold.set()
        trace.note("FCM got", [r.message for r in svc.fcm.requests])

        async with trace.step(
            "the same tool call asks again (a2): P3, not pushed again",
            trace.event("push.logged", '"a2"'),
            trace.row("conversations", '"id":"a2"'),
        ):
            await conv.ask(
                kind="permission", id="a2", title="Deploy again?", tool=TOOL, options=options
            )
        trace.note("pushes sent", {"apns": len(svc.apns.requests), "fcm": len(svc.fcm.requests)})
        trace.check("c_an_ask_raised_until_its_push_leaves")
