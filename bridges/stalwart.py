"""A bridge that makes a stalwart-style agent (people-in-the-loop S7) a wire-v1 durable agent.

It is a wire-v1 agent built on the SDK, with its own state file, and a client of S7's routes:
``GET /config.json`` (the name), ``POST /threads/{id}/messages``, ``GET /threads/{id}/
interrupts``, ``POST /threads/{id}/resume``, ``GET /threads/{id}/stream`` (``Last-Event-ID``),
``GET /healthz``. A thread is a conversation (same id); each pause is an ask under the pause's
own stable id (S3), in S8's words:

==================  ===========================================================================
pause (S2)          ask
==================  ===========================================================================
confirm             permission "Confirm {tool}?": approve (allow), skip (deny), cancel_all
                    (cancel) — never "always": stalwart has no such reply; with the call's
                    arguments and their origins, its reasons, and irreversible (S1)
outcome_unknown     choice "Did {tool} take effect?": happened, did_not_happen
saga_stuck          choice "Undoing {tool} failed. What should happen?": retry, done_by_hand,
                    abandon
ask                 text, titled with the run's question
delegate            permission "I couldn't work that out. Shall I pass it to the assistant?":
                    approve (allow), decline (deny)
==================  ===========================================================================

Tokens (S2, S5): the token shown is kept per pause; the same pause seen with a new token is
``ask.changed`` (its version grows). A resume answered ``409 interrupt_stale`` is read again
from ``/interrupts``: still open under another token, the reply is ``changed``; gone, it is
``answered``. The phone's request id is recorded before ``/messages`` or ``/resume`` is called;
a ``/messages`` whose fate is unknown is never sent again by the bridge (the chat says so).

What the server does is learnt from the thread's stream (answers, refusals with their rule,
rollback reports become chat items) and, at once, from its signed ``on_interrupt`` webhooks
(S6: ``Stalwart-Signature: t=…,v1=…``, five minutes, each delivery accepted once).

Where S7 is silent (the JSON of an interrupt, of a step, the typed answer's field, the bytes
signed) this bridge follows ``fixtures/stalwart/README.md``: an adapter to another server
changes only :func:`ask_of`, :func:`decision_of`, :func:`sign` and :meth:`Bridge._apply_step`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import string
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple
from urllib.parse import quote

import aiohttp
from aiohttp import web

from bridges import kit
from bridges.kit import AskDraft, State, Table, asks, notice
from wire.agent import (
    Agent,
    Argument,
    AskHandle,
    ConversationHandle,
    Option,
    SendMessage,
    Starter,
    ToolRef,
)
from wire.body import read_limited
from wire.errors import BodyTooLarge, LocalWireError
from wire.messages import MAX_ID, Reply, ReplyResult
from wire.sse import SSEParser
from wire.tasks import all_cancelled

log = logging.getLogger(__name__)

SIGNATURE: Final = "Stalwart-Signature"
TOLERANCE: Final = 300  # S6: a delivery is accepted within five minutes of our clock
TIMEOUT: Final = 30.0
MAX_ANSWER: Final = 16 * 1024 * 1024  # ours: a server's answer over this is refused unread
RECONNECT: Final = 1.0  # seconds before a dropped stream is opened again
OWN_ANSWER_WAIT: Final = 2.0  # how long the stream waits for our own answer to be recorded

# S8's keys and default words, and ours (marked) for what S8 has no words for.
WORDS: Final[Mapping[str, str]] = {
    "confirmTitle": "Confirm {tool}?",
    "approve": "Approve",
    "skip": "Skip this step",
    "cancelAll": "Cancel everything",
    "unknownTitle": "Did {tool} take effect?",
    "happened": "Yes, it happened",
    "didNotHappen": "No, it did not",
    "stuck": "Undoing {tool} failed. What should happen?",
    "retry": "Try again",
    "doneByHand": "I undid it myself",
    "abandon": "Leave it",
    "delegateTitle": "I couldn't work that out. Shall I pass it to the assistant?",
    "delegateApprove": "Yes, pass it on",
    "decline": "No",
    "refused": "Not done",
    "rule": "Rule",
    "rollbackTitle": "Undoing what this run did",
    "undone": "Undone",
    "notUndoable": "Could not be undone",
    "error": "Something went wrong: {message}",
    # ours
    "newConversation": "New conversation",
    "notSure": "This message may not have reached {agent}, and it was not sent again. "
    "Send it again if it is not answered.",
}


class Words:
    """S8's words with overrides (``setStrings`` in S8; ``--strings FILE`` here)."""

    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        merged = dict(WORDS)
        for key, text in (overrides or {}).items():
            if key not in WORDS:
                raise KeyError(f"unknown word key {key!r}")
            allowed = {f for _, f, _, _ in string.Formatter().parse(WORDS[key]) if f}
            if {f for _, f, _, _ in string.Formatter().parse(text) if f} - allowed:
                raise ValueError(f"{key!r} may use only {sorted(allowed)}")
            merged[key] = text
        self._words = merged

    def __getitem__(self, key: str) -> str:
        return self._words[key]

    def fmt(self, key: str, **values: object) -> str:
        """The words of ``key`` with ``{name}`` filled where shown (S8)."""
        return self._words[key].format(**values)


# --- where S7 is silent: the shapes this bridge reads and writes ----------------------------


def ask_of(interrupt: Mapping[str, Any], words: Words) -> AskDraft:
    """The wire ask (no id yet) for a pause (S2 table above)."""
    kind = str(interrupt.get("kind"))
    tool_name = str(interrupt.get("tool") or "")
    tool = ToolRef(call_id=str(interrupt["id"]), name=tool_name) if tool_name else None
    text = str(interrupt.get("text") or "")
    question = str(interrupt.get("question") or "")
    about: asks.About = {
        "tool": tool,
        "arguments": [
            Argument(
                name=str(a.get("name", "")),
                value=a.get("value"),
                origin=a["origin"] if isinstance(a.get("origin"), str) else None,
            )
            for a in _list(interrupt.get("arguments"))
            if isinstance(a, dict)
        ],
        "reasons": [str(r) for r in _list(interrupt.get("reasons"))],
        "irreversible": interrupt.get("irreversible") is True,
    }
    match kind:
        case "confirm":
            # S1: the tool's own question is the text; the title is S8's.
            options = [
                Option(id="approve", label=words["approve"], role="allow"),
                Option(id="skip", label=words["skip"], role="deny"),
                Option(id="cancel_all", label=words["cancelAll"], role="cancel"),
            ]
            title = words.fmt("confirmTitle", tool=tool_name)
            return asks.permission(title, options, text=question or text, **about)
        case "outcome_unknown":
            options = [
                Option(id="happened", label=words["happened"]),
                Option(id="did_not_happen", label=words["didNotHappen"]),
            ]
            title = words.fmt("unknownTitle", tool=tool_name)
            return asks.choice(title, options, text=text, **about)
        case "saga_stuck":
            left = [str(x) for x in _list(interrupt.get("left_to_undo"))]
            more = f"\n{', '.join(left)}" if left else ""
            options = [
                Option(id="retry", label=words["retry"]),
                Option(id="done_by_hand", label=words["doneByHand"]),
                Option(id="abandon", label=words["abandon"]),
            ]
            title = words.fmt("stuck", tool=tool_name)
            return asks.choice(title, options, text=text + more, **about)
        case "ask":
            return asks.text(question, text=text, **about)
        case "delegate":
            options = [
                Option(id="approve", label=words["delegateApprove"], role="allow"),
                Option(id="decline", label=words["decline"], role="deny"),
            ]
            return asks.permission(words["delegateTitle"], options, text=text, **about)
        case _:
            # A pause this bridge does not know: shown, never answerable from the phone (A7).
            return AskDraft(kind=f"stalwart:{kind}", title=question, text=text, tool=tool)


def _list(value: object) -> list[Any]:
    """``value`` if it is a JSON array, else nothing (a server's bad field loses only itself)."""
    return value if isinstance(value, list) else []


def decision_of(kind: str, reply: Reply) -> dict[str, str]:
    """The resume's ``decision`` (and, for ``ask``, the typed ``answer``) for a reply."""
    if kind == "ask":
        return {"decision": "answer", "answer": reply.answer.text or ""}
    return {"decision": reply.answer.option or ""}


def sign(secret: bytes, t: int, body: bytes) -> str:
    """``Stalwart-Signature``: ``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>``."""
    mac = hmac.new(secret, f"{t}.".encode("ascii") + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


class BadDelivery(Exception):
    """A webhook delivery refused: malformed, out of the five minutes, tampered, replayed."""


# --- the bridge's own ledger ------------------------------------------------------------------


class Pause(NamedTuple):
    """A pause shown: its thread, kind and the token shown with it."""

    id: str
    thread: str
    kind: str
    token: str


class Send(NamedTuple):
    """A message sent to a thread, recorded before ``POST /messages``; ``seq`` orders echoes."""

    request_id: str
    thread: str
    state: str
    text: str = ""
    echoed: int = 0
    seq: int | None = None


class Resume(NamedTuple):
    """A resume, recorded before ``POST /resume``."""

    request_id: str
    interrupt_id: str
    token: str
    decision: str
    state: str


class Position(NamedTuple):
    """The last stream event applied for a thread."""

    thread: str
    last: int


class Seen(NamedTuple):
    """A webhook delivery's signature, and its time (S6's seen-set)."""

    signature: str
    t: int


PAUSES: Final = Table("pauses", Pause)
SENDS: Final = Table("sends", Send)
RESUMES: Final = Table("resumes", Resume)
POSITIONS: Final = Table("positions", Position)
SEEN: Final = Table("seen", Seen)
_CALLS: Final[Mapping[str, Table[Any]]] = {"sends": SENDS, "resumes": RESUMES}


class Ledger:
    """What the bridge must remember across its restarts: the token shown for each pause,
    each request id before its call and how the call ended, the stream positions, and the
    webhook deliveries seen (S6's seen-set)."""

    def __init__(self, path: Path) -> None:
        self._state = State(path, PAUSES, SENDS, RESUMES, POSITIONS, SEEN)

    def close(self) -> None:
        """Close the file."""
        self._state.close()

    def pause(self, interrupt_id: str) -> tuple[str, str, str] | None:
        """(thread, kind, token) of a pause shown."""
        row = self._state.get(PAUSES, interrupt_id)
        return None if row is None else (row.thread, row.kind, row.token)

    def show(self, interrupt_id: str, thread: str, kind: str, token: str) -> None:
        """Record the token shown for a pause."""
        self._state.put(PAUSES, Pause(interrupt_id, thread, kind, token))

    def begin(self, table: str, request_id: str, *values: str) -> None:
        """Record a request id before its call (state ``calling``)."""
        calls = _CALLS[table]
        self._state.put(calls, calls.row(request_id, *values, "calling"))

    def end(self, table: str, request_id: str, state: str) -> None:
        """How the call (``sends`` or ``resumes``) ended: ``done``, ``failed`` or ``unknown``."""
        self._state.set(_CALLS[table], request_id, state=state)

    def sent(self, request_id: str, thread: str, text: str) -> None:
        """Record a message before ``POST /messages`` (state ``calling``), with its text, so
        that its echo on the stream is told from a message typed in another channel."""
        seq = self._state.next(SENDS, "seq")
        self._state.put(SENDS, Send(request_id, thread, "calling", text, seq=seq))

    def echoed(self, thread: str, text: str) -> bool:
        """Whether a message step is the echo of one of ours (then marked, oldest first)."""
        found = self._state.find(SENDS, order="seq", limit=1, thread=thread, text=text, echoed=0)
        if not found:
            return False
        self._state.set(SENDS, found[0].request_id, echoed=1)
        return True

    def uncertain_sends(self) -> list[tuple[str, str]]:
        """(request id, thread) of messages whose call never ended: the bridge stopped."""
        return [(r.request_id, r.thread) for r in self._state.find(SENDS, state="calling")]

    def position(self, thread: str) -> int:
        """The last stream event applied for ``thread``."""
        row = self._state.get(POSITIONS, thread)
        return 0 if row is None else row.last

    def move(self, thread: str, last: int) -> None:
        """Record the last stream event applied."""
        self._state.put(POSITIONS, Position(thread, last))

    def first_seen(self, signature: str, t: int, now: float) -> bool:
        """Record a delivery's signature; False when it was seen before. Signatures older
        than the window are forgotten: their age refuses them anyway."""
        self._state.drop_below(SEEN, "t", int(now) - 2 * TOLERANCE)
        return self._state.add(SEEN, Seen(signature, t))


# --- the bridge -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StalwartConfig:
    """Where the server is and what it needs: ``token`` (sent as ``Authorization: Bearer``
    on every route), ``secret`` (the server's: resumes are signed with it, S6),
    ``webhook_secret`` (what its ``on_interrupt`` deliveries are signed with)."""

    url: str
    token: str | None = None
    secret: bytes | None = None
    webhook_secret: bytes | None = None


class Bridge(kit.AgentBridge):
    """The bridge: ``await bridge.start()``, then serve ``bridge.agent`` (and
    ``bridge.webhook_app()`` when the server posts ``on_interrupt``); ``await bridge.close()``.

    ``clock`` is unix seconds (signatures); ``agent_options`` go to the SDK ``Agent``;
    ``start_timeout`` is how long :meth:`start` waits for ``GET /healthz``; ``webhook_port``
    is where :meth:`serve` takes ``on_interrupt`` webhooks (127.0.0.1).
    """

    protocol = "stalwart"
    refused = ()  # a server that does not answer fails the start, with its traceback

    def __init__(
        self,
        config: StalwartConfig,
        *,
        state_path: Path,
        words: Words | None = None,
        clock: Callable[[], float] = time.time,
        agent_options: Mapping[str, Any] | None = None,
        start_timeout: float = 30.0,
        webhook_port: int | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.start_timeout = start_timeout
        self.state_path = state_path
        self.words = words or Words()
        self.clock = clock
        self.name = "stalwart"
        self._agent_options = dict(agent_options or {})
        self.webhook_port = webhook_port
        self._hook: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self._streams: aiohttp.ClientSession | None = None
        self._ledger: Ledger | None = None
        self._followers: dict[str, asyncio.Task[None]] = {}
        self._resuming: dict[str, asyncio.Event] = {}
        self._sync_locks: dict[str, asyncio.Lock] = {}

    @property
    def ledger(self) -> Ledger:
        """The bridge's ledger (after :meth:`start`)."""
        assert self._ledger is not None, "start the bridge first"
        return self._ledger

    @property
    def http(self) -> aiohttp.ClientSession:
        """The session to the server (after :meth:`start`)."""
        assert self._http is not None, "start the bridge first"
        return self._http

    async def start(self) -> None:
        """Read the server's name, start the agent, say what an earlier run left unsure,
        raise again every pause still open (same ids, P3), and follow each thread."""
        headers = {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}
        base = self.config.url.rstrip("/") + "/"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=TIMEOUT, sock_read=None)
        self._http = aiohttp.ClientSession(base_url=base, headers=headers, timeout=timeout)
        # Streams stay open, one per followed thread: their own pool, without a limit, so they
        # never hold the connections that answers and turns need.
        self._streams = aiohttp.ClientSession(
            base_url=base,
            headers=headers,
            timeout=timeout,
            connector=aiohttp.TCPConnector(limit=0),
        )
        try:
            await self._healthy()
            status, config = await self._call("GET", "config.json")
        except BaseException:
            await self._http.close()
            await self._streams.close()
            self._http = self._streams = None
            raise
        if status == 200 and isinstance(config.get("name"), str) and config["name"].strip():
            self.name = config["name"]
        options: dict[str, Any] = {
            "runtime": self.name,
            "features": ["starters"],
            "starters": [Starter(id="new", label=self.words["newConversation"])],
            **self._agent_options,
        }
        self._agent = Agent(state_path=self.state_path, **options)
        self._ledger = Ledger(self.state_path.with_name(self.state_path.name + ".stalwart"))
        self.agent.on_message(self._on_message)
        self.agent.on_reply(self._on_reply)
        await super().start()
        for request_id, thread in self.ledger.uncertain_sends():
            conv = await self.agent.conversation(thread)
            if conv is not None and not conv.closed:
                await notice(conv, self.words.fmt("notSure", agent=self.name))
            self.ledger.end("sends", request_id, "unknown")
        for conv in self.agent.conversations:
            await self.sync(conv.id)
            self._follow(conv.id)

    async def _healthy(self) -> None:
        """Wait until ``GET /healthz`` answers 200, backing off up to ``start_timeout``.

        Raises:
            OSError: the server did not answer in time.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.start_timeout
        pause = 0.05
        while True:
            try:
                status, _ = await self._call("GET", "healthz")
                if status == 200:
                    return
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.info("%s: not answering yet: %s", self.config.url, exc)
            if loop.time() + pause > deadline:
                raise OSError(f"{self.config.url} did not answer /healthz in time")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)

    async def serve(self, socket: Path) -> None:
        """Serve the wire side on ``socket``, and take webhooks on ``webhook_port`` if set."""
        await self.serve_unix(socket)
        if self.webhook_port is not None:
            self._hook = web.AppRunner(self.webhook_app())
            await self._hook.setup()
            await web.TCPSite(self._hook, "127.0.0.1", self.webhook_port).start()

    def ready_line(self, socket: Path) -> str:
        """``ready SOCKET``: what a supervisor waits for."""
        return f"ready {socket}"

    async def close(self) -> None:
        """Stop taking webhooks and following, close the agent, the session and the ledger."""
        if self._hook is not None:
            await self._hook.cleanup()
        await all_cancelled(self._followers.values())
        self._followers.clear()
        await super().close()
        for session in (self._http, self._streams):
            if session is not None:
                await session.close()
        if self._ledger is not None:
            self._ledger.close()

    async def thread(self, thread: str, title: str | None = None) -> ConversationHandle:
        """The conversation of ``thread``, opened (and followed) if new."""
        conv = await self.agent.open_conversation(thread, title=title)
        self._follow(thread)
        return conv

    # --- HTTP to the server ---------------------------------------------------------------

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, signed: bool = False
    ) -> tuple[int, dict[str, Any]]:
        """One request; the status and the JSON object answered ({} when not one).

        Raises:
            aiohttp.ClientError, OSError, asyncio.TimeoutError: no answer (or one over
                ``MAX_ANSWER`` bytes, which is not read on).
        """
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if signed and self.config.secret is not None and data is not None:
            headers[SIGNATURE] = sign(self.config.secret, int(self.clock()), data)
        timeout = aiohttp.ClientTimeout(total=TIMEOUT)
        async with self.http.request(
            method, path, data=data, headers=headers, timeout=timeout
        ) as answer:
            try:
                raw = await read_limited(answer, MAX_ANSWER)
            except BodyTooLarge as exc:  # not read on: an answer is held in memory whole
                raise aiohttp.ClientPayloadError(f"{method} {path}: {exc}") from None
        try:
            parsed = json.loads(raw) if raw else {}
        except (ValueError, UnicodeDecodeError):
            parsed = {}
        return answer.status, parsed if isinstance(parsed, dict) else {}

    @staticmethod
    def _thread_path(thread: str, route: str) -> str:
        return f"threads/{quote(thread, safe='')}/{route}"

    # --- pauses as asks ----------------------------------------------------------------------

    async def sync(self, thread: str, *, gone: str | None = None) -> list[dict[str, Any]]:
        """Read what waits in ``thread`` and make the asks match: raise new pauses, change
        those shown with another token; with ``gone`` (``answered`` or ``decided``) resolve
        asks whose pause is no longer listed (unless an answer to it is on its way).

        Pauses are shown only from here, one read at a time per thread, so what is shown only
        moves forward. The pauses in a ``/messages`` or ``/resume`` answer are not shown from
        that answer: it can arrive after a newer read (the server posts its webhook, which
        syncs, before it answers), and showing it would change a changed pause back to its
        old question and token (S2, S5)."""
        lock = self._sync_locks.setdefault(thread, asyncio.Lock())
        async with lock:
            status, data = await self._call("GET", self._thread_path(thread, "interrupts"))
            if status != 200:
                log.warning("GET interrupts of %s: %s", thread, status)
                return []
            interrupts = [i for i in _list(data.get("interrupts")) if _valid(i)]
            conv = await self.agent.open_conversation(thread)
            if conv.closed:
                return interrupts
            for interrupt in interrupts:
                await self._show_safely(conv, interrupt)
            if gone is not None:
                listed = {str(i["id"]) for i in interrupts}
                for handle in conv.asks:
                    if handle.id not in listed and handle.id not in self._resuming:
                        if gone == "answered":
                            await handle.answered_elsewhere()
                        else:
                            await handle.decide()
            return interrupts

    async def _show_safely(self, conv: ConversationHandle, interrupt: Mapping[str, Any]) -> None:
        """:meth:`_show`, where a pause that breaks the wire's limits is logged and left out
        rather than failing the thread."""
        try:
            await self._show(conv, interrupt)
        except LocalWireError as exc:
            log.warning("pause %s of %s cannot be shown: %s", interrupt.get("id"), conv.id, exc)

    async def _show(self, conv: ConversationHandle, interrupt: Mapping[str, Any]) -> AskHandle:
        """Raise the ask of ``interrupt`` (again, under its id), or change it: a new token on
        a pause shown is ``ask.changed`` even when nothing else differs (S2).

        A new pause's token is recorded before its ask is raised (an answer may follow at
        once); a changed token only after the ask changed, so an answer to what was shown
        before still carries the old token and is refused (S5)."""
        interrupt_id, token = str(interrupt["id"]), str(interrupt["token"])
        kind = str(interrupt.get("kind"))
        draft = ask_of(interrupt, self.words)
        known = self.ledger.pause(interrupt_id)
        if known is None or known[2] == token:
            self.ledger.show(interrupt_id, conv.id, kind, token)
            return await draft.raise_in(conv, id=interrupt_id)
        handle = next((h for h in conv.asks if h.id == interrupt_id), None)
        if handle is None:
            handle = await draft.raise_in(conv, id=interrupt_id)
        if handle.open:
            await draft.change(handle)
        self.ledger.show(interrupt_id, conv.id, kind, token)
        return handle

    # --- the phone's message and answer ------------------------------------------------------

    async def _on_message(self, conv: ConversationHandle, msg: SendMessage) -> None:
        """A turn: recorded first, sent once; never sent again by the bridge."""
        self._follow(conv.id)
        self.ledger.sent(msg.request_id, conv.id, msg.text)
        try:
            status, data = await self._call(
                "POST", self._thread_path(conv.id, "messages"), {"text": msg.text}
            )
        except (aiohttp.ClientError, OSError, TimeoutError):
            self.ledger.end("sends", msg.request_id, "unknown")
            await notice(conv, self.words.fmt("notSure", agent=self.name))
            return
        self.ledger.end("sends", msg.request_id, "done" if status == 200 else "failed")
        if status != 200:
            await notice(conv, self._error(data, status))
            return
        if any(_valid(i) for i in _list(data.get("interrupts"))):
            await self.sync(conv.id)  # read again, never shown from this answer: see sync

    async def _on_reply(self, handle: AskHandle, reply: Reply) -> ReplyResult:
        """Resume the run with the person's decision; the server's answer is the outcome."""
        known = self.ledger.pause(handle.id)
        if known is None:
            return ReplyResult(outcome="not_open")
        thread, kind, token = known
        body = {"interrupt_id": handle.id, "token": token, **decision_of(kind, reply)}
        done = self._resuming.setdefault(handle.id, asyncio.Event())
        self.ledger.begin("resumes", reply.request_id, handle.id, token, body["decision"])
        try:
            try:
                status, data = await self._call(
                    "POST", self._thread_path(thread, "resume"), body, signed=True
                )
            except (aiohttp.ClientError, OSError, TimeoutError):
                self.ledger.end("resumes", reply.request_id, "unknown")
                raise  # the SDK answers 502: the phone may retry with the same request id
            if status >= 500:
                self.ledger.end("resumes", reply.request_id, "unknown")
                raise OSError(f"resume answered {status}")
            self.ledger.end("resumes", reply.request_id, "done" if status == 200 else "failed")
            if status == 200:
                if any(_valid(i) and i["id"] != handle.id for i in _list(data.get("interrupts"))):
                    await self.sync(thread)  # read again, never shown from this answer: see sync
                return ReplyResult(outcome="accepted")
            if status == 409:
                return await self._stale(handle)
            return ReplyResult(outcome="not_open", reason=self._error(data, status))
        finally:
            self._resuming.pop(handle.id, None)
            done.set()

    async def _stale(self, handle: AskHandle) -> ReplyResult:
        """``409 interrupt_stale``: read what waits again (S5)."""
        interrupts = await self.sync(handle.conversation.id)
        if any(str(i["id"]) == handle.id for i in interrupts):
            return ReplyResult(outcome="changed")  # still open, under another token
        return ReplyResult(outcome="answered")

    def _error(self, data: Mapping[str, Any], status: int) -> str:
        message = data.get("message") if isinstance(data.get("message"), str) else None
        return self.words.fmt("error", message=message or f"HTTP {status}")

    # --- the stream -------------------------------------------------------------------------

    def _follow(self, thread: str) -> None:
        task = self._followers.get(thread)
        if task is None or task.done():
            self._followers[thread] = asyncio.ensure_future(self._stream(thread))

    async def _stream(self, thread: str) -> None:
        """Follow the thread's steps from the last one applied, reconnecting as needed."""
        while True:
            try:
                last = self.ledger.position(thread)
                assert self._streams is not None
                async with self._streams.get(
                    self._thread_path(thread, "stream"),
                    headers={"Last-Event-ID": str(last), "Accept": "text/event-stream"},
                ) as answer:
                    if answer.status != 200:
                        raise OSError(f"stream answered {answer.status}")
                    parser = SSEParser()
                    async for chunk in answer.content.iter_any():
                        for event in parser.feed(chunk):
                            await self._event(thread, event.id, event.data)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("stream of %s: %s; reconnecting", thread, exc)
            await asyncio.sleep(RECONNECT)

    async def _event(self, thread: str, event_id: str | None, data: str) -> None:
        try:
            step = json.loads(data)
        except ValueError:
            step = None
        if isinstance(step, dict):
            await self._apply_step(thread, step, event_id)
        if event_id is not None and event_id.isascii() and event_id.isdigit():
            self.ledger.move(thread, int(event_id))

    async def _apply_step(
        self, thread: str, step: Mapping[str, Any], step_id: str | None = None
    ) -> None:
        """One step of the run as the chat shows it. Its item's id comes from the step's, so
        a step applied again (the bridge stopped before it recorded its position) shows once."""
        conv = await self.agent.conversation(thread)
        if conv is None or conv.closed:
            return
        item_id = f"s-{step_id}" if step_id else None
        if item_id is not None and any(item.id == item_id for item in conv.items):
            return
        match step.get("type"):
            case "answer" if isinstance(step.get("text"), str) and step["text"]:
                await conv.append(kind="reply", text=step["text"], id=item_id)
            case "message" if isinstance(step.get("text"), str) and step["text"]:
                # Typed in another channel (ours are echoed by the SDK's own user item).
                if not self.ledger.echoed(thread, step["text"]):
                    await conv.append(kind="user", text=step["text"], id=item_id)
            case "interrupt" | "changed":
                await self.sync(thread)
            case "resumed":
                interrupt_id = str(step.get("interrupt_id"))
                waiting = self._resuming.get(interrupt_id)
                if waiting is not None:  # an answer of ours is on its way: its outcome first
                    await waiting.wait()
                    handle = next((h for h in conv.asks if h.id == interrupt_id), None)
                    if handle is not None:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(handle.wait(), OWN_ANSWER_WAIT)
                await self.sync(thread, gone="answered")
            case "refusal":
                sentence, rule = str(step.get("sentence") or ""), str(step.get("rule") or "")
                text = f"{self.words['refused']}: {sentence}"
                if rule:
                    text += f"\n{self.words['rule']}: {rule}"
                await notice(conv, text, id=item_id)
            case "rollback":
                lines = [self.words["rollbackTitle"]]
                for key, label in (("undone", "undone"), ("not_undone", "notUndoable")):
                    tools = [str(t) for t in _list(step.get(key))]
                    if tools:
                        lines.append(f"{self.words[label]}: {', '.join(tools)}")
                await notice(conv, "\n".join(lines), id=item_id)
                await self.sync(thread, gone="decided")
            case _:
                pass  # a step this bridge does not show

    # --- S6: on_interrupt webhooks ------------------------------------------------------------

    def verify(self, header: str | None, body: bytes) -> None:
        """Accept a delivery signed with the webhook secret within five minutes, once.

        Raises:
            BadDelivery: why it is refused.
        """
        secret = self.config.webhook_secret
        if secret is None:
            raise BadDelivery("no webhook secret is configured")
        parts = dict(p.split("=", 1) for p in (header or "").split(",") if "=" in p)
        t, v1 = parts.get("t", ""), parts.get("v1", "")
        if not (t.isascii() and t.isdigit() and len(t) <= 12 and v1):
            raise BadDelivery("malformed signature header")
        now = self.clock()
        if abs(now - int(t)) > TOLERANCE:
            raise BadDelivery("outside the five minutes")
        if not hmac.compare_digest(sign(secret, int(t), body), f"t={t},v1={v1}"):
            raise BadDelivery("signature does not match")
        if not self.ledger.first_seen(v1, int(t), now):
            raise BadDelivery("delivery replayed")

    def webhook_app(self) -> web.Application:
        """``POST /webhook``: the server's ``on_interrupt`` deliveries."""
        app = web.Application()
        app.router.add_post("/webhook", self._webhook)
        return app

    async def _webhook(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            self.verify(request.headers.get(SIGNATURE), body)
        except BadDelivery as exc:
            return web.json_response({"error": "bad_signature", "message": str(exc)}, status=401)
        try:
            delivery = json.loads(body)
            thread = str(delivery["thread"])
            interrupt = delivery["interrupt"]
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": "bad_request"}, status=400)
        if not (0 < len(thread) <= MAX_ID) or not _valid(interrupt):
            return web.json_response({"error": "bad_request"}, status=400)
        await self.thread(thread)
        await self.sync(thread)
        return web.json_response({"ok": True})


def _valid(interrupt: object) -> bool:
    """An interrupt the bridge can show: an object with a wire id and a token."""
    if not isinstance(interrupt, dict):
        return False
    interrupt_id, token = interrupt.get("id"), interrupt.get("token")
    return (
        isinstance(interrupt_id, str)
        and 0 < len(interrupt_id) <= MAX_ID
        and isinstance(token, str)
        and bool(token)
        and isinstance(interrupt.get("kind"), str)
    )


# --- the command line -------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The bridge's options (``python -m bridges.stalwart``, ``collie-gateway bridge stalwart``)."""
    p.add_argument(
        "--url", required=True, help="the stalwart-style server, e.g. http://127.0.0.1:8700"
    )
    kit.add_common(p, verbose="log the threads' life")
    p.add_argument("--token-env", help="variable holding the server's bearer token")
    p.add_argument("--secret-env", help="variable holding the server's resume secret (S6)")
    p.add_argument("--webhook-secret-env", help="variable holding the on_interrupt secret")
    p.add_argument("--webhook-port", type=int, help="take on_interrupt webhooks on 127.0.0.1:PORT")
    p.add_argument("--strings", type=Path, help="a JSON object of word overrides (S8 keys)")


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM; 0, or 2 for a bad setting (said on stderr)."""
    kit.start_logging(args.verbose)
    values: dict[str, bytes | None] = {}
    for option in ("token_env", "secret_env", "webhook_secret_env"):
        name = getattr(args, option)
        value = os.environ.get(name) if name else None
        if name and not value:
            print(f"bridges.stalwart: the variable {name} is not set or empty", file=sys.stderr)
            return 2
        values[option] = value.encode() if value else None
    try:
        words = Words(
            json.loads(args.strings.read_text(encoding="utf-8")) if args.strings else None
        )
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        print(f"bridges.stalwart: --strings: {exc}", file=sys.stderr)
        return 2
    token = values["token_env"]
    config = StalwartConfig(
        url=args.url,
        token=token.decode() if token else None,
        secret=values["secret_env"],
        webhook_secret=values["webhook_secret_env"],
    )
    for path in (args.socket, args.state):
        path.parent.mkdir(parents=True, exist_ok=True)
    return kit.serve(
        lambda: Bridge(config, state_path=args.state, words=words, webhook_port=args.webhook_port),
        args.socket,
    )


def main(argv: list[str] | None = None) -> None:
    """``python -m bridges.stalwart --url URL --socket PATH --state PATH``."""
    p = argparse.ArgumentParser(
        prog="python -m bridges.stalwart", description=__doc__.split("\n")[0]
    )
    add_arguments(p)
    sys.exit(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
