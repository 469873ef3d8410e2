"""The hooks bridge: Claude Code's ``http`` hooks and Codex's command hooks (through
``collie-gateway hook codex``) POST to ``/hooks/<client>`` on a loopback port; the bridge is a
wire-v1 durable agent (``wire.agent``).

Each hook ``session_id`` is one conversation, opened on its first hook and closed on
``SessionEnd``; its items come from the session's transcript. A ``PermissionRequest`` raises a
card and is held until the person answers; the same question asked again while it waits is
the same card. When the desk answers first (the tool's ``PostToolUse`` or its result in the
transcript, the next prompt, ``Stop``, ``SessionEnd``, or the held request dropped) the card
ends ``decided`` and the held request is answered with no decision. "Waiting" (``Notification``)
and "finished" (``Stop``) are notices the gateway pushes (``Item.push``); a message typed on
the phone waits in the state file for the session's next ``Stop``. What the bridge says is
worded by the gateway in the phone's language (``Item.words``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final, NamedTuple

import msgspec
from aiohttp import web

from bridges.hooks import keys, mapping
from bridges.hooks.mapping import Hook
from bridges.kit import AgentBridge, State, Table, notice, utc
from bridges.kit.fit import label, safe_id, tool_text
from bridges.kit.state import SDK_ASKS
from wire.agent import (
    Agent,
    AskHandle,
    ConversationHandle,
    ItemHandle,
    SendMessage,
    ToolRef,
)
from wire.errors import LocalWireError
from wire.messages import Ask, NoticePush
from wire.tasks import cancelled

log = logging.getLogger(__name__)

MAX_BODY: Final = 1024 * 1024  # a hook's JSON; a larger body is refused 413
QUIET: Final = 600.0  # seconds without a hook after which a transcript is read on hooks only
HOLD: Final = 3600  # seconds a PermissionRequest is held (the hook's timeout, installed so)


class Queued(NamedTuple):
    """The phone's messages waiting for a session's next ``Stop`` (a JSON list of texts)."""

    conversation: str
    messages: str


QUEUE: Final = Table("hooks_queued", Queued)


@dataclass(eq=False)
class Pending:
    """A question the client waits on: its hook, its cards, its answer once settled."""

    hook: Hook
    key: str
    handles: list[AskHandle]
    reply: asyncio.Future[dict[str, Any]]
    waiting: int = 0


@dataclass(eq=False)
class Session:
    """A hook session: its conversation, its transcript's reading, its open questions."""

    id: str
    client: str
    conv: ConversationHandle
    prompted: bool = False
    transcript: str = ""
    lines: mapping.Lines = field(default_factory=mapping.Lines)
    inode: int = 0
    items: dict[str, ItemHandle] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)  # tool_use id -> call key
    pending: dict[str, Pending] = field(default_factory=dict)
    reading: asyncio.Lock = field(default_factory=asyncio.Lock)
    heard: float = 0.0  # the loop's time of its last hook


_ASK_FIELDS: Final = (
    "kind",
    "title",
    "text",
    "tool",
    "options",
    "multiple",
    "max_length",
    "fields",
    "deadline",
    "arguments",
    "reasons",
    "irreversible",
)


class HooksBridge(AgentBridge):
    """Serve hooks on ``127.0.0.1:port`` as a wire-v1 agent kept in ``state_path``.

    Usage::

        bridge = HooksBridge(state_path=Path("hooks.db"), port=8791)
        await bridge.start()                      # hooks at bridge.url("claude-code")
        await bridge.serve_unix(Path("hooks.sock"))
    """

    protocol = "hooks"

    def __init__(
        self,
        *,
        state_path: Path,
        keys_path: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 8791,
        now: Callable[[], datetime] | None = None,
        poll: float = 0.3,
        hold: float = HOLD,
        ping_interval: float = 15.0,
        expiry_interval: float = 1.0,
    ) -> None:
        self.host = host
        self.state_path = state_path
        self.port = port
        self.keys_path = keys_path or keys.default_path()
        self.poll = poll
        self.hold = hold
        super().__init__(
            Agent(
                state_path=state_path,
                runtime="hooks",
                features=["history", "close", "deadlines"],
                now=now or utc,
                ping_interval=ping_interval,
                expiry_interval=expiry_interval,
            )
        )
        self.agent.on_message(self._on_message)
        self.sessions: dict[str, Session] = {}
        self._state: State | None = None  # the bridge's own table (QUEUE) in the SDK's file
        self._queue = asyncio.Lock()
        self._opening = asyncio.Lock()
        self._runner: web.AppRunner | None = None
        self._tail: asyncio.Task[None] | None = None
        self._closing = False  # held requests dropped by the stop: the next start ends them

    def url(self, client: str) -> str:
        """Where ``client``'s hooks POST."""
        return f"http://{self.host}:{self.port}/hooks/{client}"

    def serving(self) -> str:
        return f"http://{self.host}:{self.port}/hooks/"

    async def start(self) -> None:
        """Open the state file, end the cards a previous run left open, serve the hooks.

        Raises:
            OSError: the port cannot be bound.
        """
        await super().start()
        self._state = await asyncio.to_thread(State, self.state_path, QUEUE)
        await self._recover()
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/hooks/{client}", self._handle)
        self._runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        self._tail = asyncio.create_task(self._tail_all(), name="hooks-transcripts")

    async def close(self) -> None:
        """Stop serving the hooks and the agent; close the state file."""
        self._closing = True
        for session in self.sessions.values():  # held requests get no decision: the desk asks
            for pending in session.pending.values():
                if not pending.reply.done():
                    pending.reply.set_result({})
        await cancelled(self._tail)
        if self._runner is not None:
            await self._runner.cleanup()
        await super().close()
        if self._state is not None:
            self._state.close()

    async def _recover(self) -> None:
        """Held requests do not outlive the process: the cards a previous run left open
        (in the SDK's ``asks`` table, read only) end ``decided``, with a notice."""
        state = self._state
        assert state is not None
        rows = await state.off_loop(state.find, SDK_ASKS)
        for row in rows:
            if row.resolution is not None:
                continue
            conv = await self.agent.conversation(row.conversation)
            if conv is None or conv.closed:
                continue
            ask = msgspec.json.decode(bytes(row.data), type=Ask)
            fields = {f: getattr(ask, f) for f in _ASK_FIELDS}
            handle = await conv.ask(id=ask.id, **fields)
            if handle.open:
                await handle.decide()
                await _say(conv, mapping.RESTARTED, client=_client_of(conv))

    async def _on_message(self, conv: ConversationHandle, msg: SendMessage) -> None:
        """A message typed on the phone waits, kept in the state file, for the session's next
        ``Stop`` (also one the bridge has not heard from since it started)."""
        await self._requeue(conv.id, lambda kept: [*kept, msg.text])
        await _say(conv, mapping.QUEUED, client=_client_of(conv))

    async def _requeue(self, conv_id: str, change: Callable[[list[str]], list[str]]) -> list[str]:
        """Change the conversation's queued messages, on disk before it returns; what was
        queued before."""
        state = self._state
        assert state is not None, "start the bridge first"
        async with self._queue:
            row = await state.off_loop(state.get, QUEUE, conv_id)
            kept: list[str] = json.loads(row.messages) if row is not None else []
            new = change(kept)
            if new != kept:
                data = json.dumps(new, ensure_ascii=False)
                await state.off_loop(state.put, QUEUE, Queued(conv_id, data))
            return kept

    # --- HTTP ---------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        client = request.match_info["client"]
        if client not in mapping.CLIENTS:
            return _refuse(404, f"no hooks for {client!r}")
        auth = request.headers.get("Authorization", "")
        secret = auth.removeprefix("Bearer ").strip()
        if not secret or not keys.check(self.keys_path, client, secret):
            return _refuse(401, f"{client}: a hook without its credential")
        try:
            hook = mapping.parse(client, await request.read())
        except web.HTTPRequestEntityTooLarge:
            return _refuse(413, f"{client}: a hook body over {MAX_BODY} bytes")
        except mapping.BadHook as exc:
            return _refuse(400, f"{client}: {exc}")
        try:
            reply = await self._dispatch(hook)
        except LocalWireError as exc:
            log.warning("%s %s: the phone cannot show it: %s", client, hook.event, exc)
            reply = {}
        return web.json_response(reply)

    async def _dispatch(self, hook: Hook) -> dict[str, Any]:
        session = await self._session(hook)
        await self._read(session)
        event = hook.event
        if event == "PermissionRequest":
            return await self._permission(session, hook)
        if event == "PostToolUse":
            await self._desk_first(session, mapping.call_key(hook.tool, hook.tool_input))
        elif event == "UserPromptSubmit":
            await self._prompted(session, hook)
        elif event == "Stop":
            return await self._stopped(session, hook)
        elif event == "SessionEnd":
            await self._ended(session, hook)
        elif event == "Notification":
            await self._notified(session, hook)
        return {}

    # --- sessions -----------------------------------------------------------------------

    async def _session(self, hook: Hook) -> Session:
        found = self.sessions.get(hook.session)
        if found is not None and found.client == hook.client:
            if found.conv.closed and hook.event != "SessionEnd":
                await found.conv.reopen()
            return found
        async with self._opening:
            prefix = "cc" if hook.client == "claude-code" else "codex"
            conv_id = safe_id(prefix, hook.session)
            known = await self.agent.conversation(conv_id)
            prompt = mapping.string(hook.body.get("prompt"))
            conv = await self.agent.open_conversation(
                conv_id,
                title=mapping.title(hook.who, hook.cwd, prompt),
                workspace=label(hook.cwd) or None,
            )
            if conv.closed and hook.event != "SessionEnd":
                await conv.reopen()
            session = Session(hook.session, hook.client, conv, prompted=bool(prompt))
            session.prompted = session.prompted or (known is not None and bool(known.items))
            session.items = _tool_items(conv)
            self.sessions[hook.session] = session
        session.transcript = hook.transcript or session.transcript
        session.heard = asyncio.get_running_loop().time()
        return session

    async def _prompted(self, session: Session, hook: Hook) -> None:
        await self._desk_first(session, None)
        if not session.prompted:
            session.prompted = True
            prompt = mapping.string(hook.body.get("prompt"))
            with contextlib.suppress(LocalWireError):
                await session.conv.update(title=mapping.title(hook.who, hook.cwd, prompt))

    async def _stopped(self, session: Session, hook: Hook) -> dict[str, Any]:
        """The next instruction if the phone queued one (taken from the state file before
        it is answered: once at most), else "finished", pushed (P1)."""
        await self._desk_first(session, None)
        queued = await self._requeue(session.conv.id, lambda kept: [])
        if not queued:
            last = mapping.string(hook.body.get("last_assistant_message"))
            push = mapping.push_line(last or _last_reply(session.conv))
            folder = mapping.folder(hook.cwd)
            await _say(session.conv, mapping.FINISHED, push, client=hook.who, folder=folder)
            return {}
        await _say(session.conv, mapping.SENT, client=hook.who)
        return mapping.stop_reply("\n\n".join(queued))

    async def _ended(self, session: Session, hook: Hook) -> None:
        await self._desk_first(session, None)
        reason = mapping.string(hook.body.get("reason")) or "exit"
        await _say(session.conv, mapping.ENDED, client=hook.who, reason=reason)
        self.sessions.pop(session.id, None)
        with contextlib.suppress(LocalWireError):
            await session.conv.close()

    async def _notified(self, session: Session, hook: Hook) -> None:
        kind = mapping.string(hook.body.get("notification_type"))
        if kind == "permission_prompt" and session.pending:
            return  # the card says it already
        message = mapping.string(hook.body.get("message"))
        push = mapping.push_line(_last_reply(session.conv) or message)
        folder = mapping.folder(hook.cwd)
        await _say(session.conv, mapping.WAITING, push, client=hook.who, folder=folder)

    # --- questions ----------------------------------------------------------------------

    async def _permission(self, session: Session, hook: Hook) -> dict[str, Any]:
        key = mapping.call_key(hook.tool, hook.tool_input)
        pending = session.pending.get(key)
        if pending is None:
            pending = await self._raise(session, hook, key)
        pending.waiting += 1
        try:
            return await asyncio.shield(pending.reply)
        finally:  # answered, or the client dropped the request (cancelled)
            pending.waiting -= 1
            if pending.waiting == 0 and not pending.reply.done() and not self._closing:
                self.agent.spawn(self._end(session, pending, mapping.GONE))

    async def _raise(self, session: Session, hook: Hook, key: str) -> Pending:
        if hook.tool == mapping.QUESTION_TOOL and mapping.questions(hook):
            drafts = mapping.question_drafts(hook)
        else:
            call = next((c for c, k in reversed(session.calls.items()) if k == key), key)
            ref = ToolRef(call_id=safe_id("c", call), name=label(hook.tool) or "tool")
            drafts = [dataclasses.replace(mapping.permission_draft(hook), tool=ref)]
        deadline = self.agent.now() + timedelta(seconds=self.hold)
        handles = [await d.raise_in(session.conv, deadline=deadline) for d in drafts]
        reply = asyncio.get_running_loop().create_future()
        pending = Pending(hook, key, handles, reply)
        session.pending[key] = pending
        self.agent.spawn(self._settle(session, pending))
        return pending

    async def _settle(self, session: Session, pending: Pending) -> None:
        """When every card of the question ends: the hook's answer (none if any card ended
        unanswered)."""
        value: dict[str, Any] = {}
        try:
            resolutions = [await h.wait() for h in pending.handles]
            answers = [r.answer if r.how == "answered" else None for r in resolutions]
            hook = pending.hook
            if hook.tool == mapping.QUESTION_TOOL and mapping.questions(hook):
                picked = [
                    None if a is None else (a.options or ([a.option] if a.option else []))
                    for a in answers
                ]
                value = mapping.question_reply(hook, picked)
            else:
                option = answers[0].option if answers[0] is not None else None
                value = mapping.permission_reply(hook, option)
        finally:
            if session.pending.get(pending.key) is pending:
                del session.pending[pending.key]
            if not pending.reply.done():
                pending.reply.set_result(value)

    async def _end(self, session: Session, pending: Pending, said: str) -> None:
        """End a question's open cards ``decided``, saying why, once."""
        ended = False
        for handle in pending.handles:
            if handle.open:
                await handle.decide()
                ended = True
        if ended:
            await _say(session.conv, said, client=mapping.CLIENTS[session.client])

    async def _desk_first(self, session: Session, key: str | None) -> None:
        """The desk went on: the question for ``key`` (every question: ``None``) ends."""
        for found in list(session.pending.values()):
            if key is None or found.key == key:
                await self._end(session, found, mapping.DESK_FIRST)

    # --- transcripts --------------------------------------------------------------------

    async def _tail_all(self) -> None:
        """Read every session's transcript as it grows; a session silent for ``QUIET``
        seconds with no question open is read again at its next hook only."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.poll)
            for session in list(self.sessions.values()):
                if loop.time() - session.heard > QUIET and not session.pending:
                    continue
                try:
                    await self._read(session)
                except Exception:
                    log.exception("reading %s", session.transcript)

    async def _read(self, session: Session) -> None:
        """Append what the transcript gained since the last read."""
        if not session.transcript:
            return
        try:  # one stat on the loop: a transcript that has not grown costs no thread
            stat = os.stat(session.transcript)
        except OSError:
            return
        if stat.st_ino == session.inode and stat.st_size == session.lines.offset:
            return
        async with session.reading:
            grown = await asyncio.to_thread(
                _grown, Path(session.transcript), session.lines.offset, session.inode
            )
            if grown is None:
                return
            inode, rewritten, data = grown
            session.inode = inode
            if rewritten:
                session.lines.restart()
            for line in session.lines.feed(data):
                for entry in mapping.entries(line):
                    await self._entry(session, entry)

    async def _entry(self, session: Session, entry: mapping.Entry) -> None:
        conv = session.conv
        if conv.closed:
            return
        try:
            if isinstance(entry, mapping.Said):
                item_id = safe_id("t", entry.id)
                if item_id not in {i.id for i in conv.items}:
                    await conv.append(kind=entry.kind, text=entry.text, id=item_id)
            elif isinstance(entry, mapping.ToolUse):
                key = mapping.call_key(entry.name, entry.input or {})
                session.calls[entry.id] = key
                call_id = safe_id("c", entry.id)
                if call_id not in session.items:
                    session.items[call_id] = await conv.append(
                        kind="tool",
                        text=tool_text(entry.input),
                        id=call_id,
                        call_id=call_id,
                        name=label(entry.name) or "tool",
                        status="running",
                    )
            else:
                await self._result(session, entry)
        except LocalWireError as exc:
            log.info("%s: an item not kept: %s", conv.id, exc)

    async def _result(self, session: Session, entry: mapping.ToolResult) -> None:
        item = session.items.get(safe_id("c", entry.id))
        if item is not None and item.item.status == "running":
            await item.update(status="failed" if entry.error else "done", output=entry.output)
        key = session.calls.get(entry.id)
        if key is not None:
            await self._desk_first(session, key)


def _grown(path: Path, offset: int, inode: int) -> tuple[int, bool, bytes] | None:
    """What ``path`` holds past ``offset``: its inode, whether it was rewritten (another
    inode, or shorter: read from the start), the new bytes; ``None`` when it is missing."""
    try:
        with path.open("rb") as f:
            stat = os.fstat(f.fileno())
            rewritten = stat.st_ino != inode or stat.st_size < offset
            f.seek(0 if rewritten else offset)
            return stat.st_ino, rewritten, f.read()
    except OSError:
        return None


def _tool_items(conv: ConversationHandle) -> dict[str, ItemHandle]:
    return {i.id: ItemHandle(conv, n) for n, i in enumerate(conv.items) if i.kind == "tool"}


async def _say(
    conv: ConversationHandle, template: str, push: NoticePush | None = None, **args: str
) -> None:
    """A notice in the phone's language (``mapping.SAY_KEYS``), pushed with ``push``."""
    text, words = mapping.say(template, **args)
    await notice(conv, text, words=words, push=push)


def _last_reply(conv: ConversationHandle) -> str:
    """The text of the conversation's last reply ("" before any)."""
    return next((i.text for i in reversed(conv.items) if i.kind == "reply"), "")


def _client_of(conv: ConversationHandle) -> str:
    return "Codex" if conv.id.startswith("codex-") else "Claude Code"


def _refuse(status: int, line: str) -> web.Response:
    log.warning("hook refused (%d): %s", status, line)
    return web.json_response({"error": line}, status=status)
