"""The ACP bridge: a wire-v1 agent (``wire.agent``) on one side, an ACP client of one agent
process on the other.

What it keeps in its state file (the SDK's tables, plus its own ``acp_*``): conversations,
items, asks and the event log (so the phone's list and history survive the agent's restarts),
which ACP session each conversation is, the process epoch, and what became of each ask's
answer. Exactly-once, as far as ACP allows: an ask id carries the epoch of the process that
asked; an answer is written only to that process; an answer accepted but not delivered (the
process died in between) is never re-sent, and the chat says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, NamedTuple

import msgspec

from bridges.acp import mapping
from bridges.acp.jsonrpc import (
    INVALID_PARAMS,
    MAX_LINE,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    Invalid,
    Notification,
    Oversized,
    Request,
    RequestId,
)
from bridges.acp.process import AcpProcess, ProcessGone, RpcFailed
from bridges.acp.schema import (
    PROTOCOL_VERSION,
    CancelRequestParams,
    ContentBlock,
    ElicitationParams,
    ElicitationSchema,
    InitializeResult,
    NewSessionResult,
    PromptResult,
    RequestPermissionParams,
    SessionNotification,
    SessionUpdate,
    ToolCallFields,
    client_capabilities,
)
from bridges.kit import AgentBridge, AskDraft, State, Table, asks, notice, utc
from bridges.kit.fit import label, safe_id, tool_text
from bridges.kit.state import SDK_ASKS
from wire.agent import Agent, AskHandle, ConversationHandle, ItemHandle, SendMessage
from wire.errors import LocalWireError
from wire.messages import Answer, Ask, Hello, Starter, ToolRef
from wire.tasks import cancelled

log = logging.getLogger(__name__)

BRIDGE_NAME: Final = "collie-acp-bridge"
SPLIT_AT: Final = 900_000  # characters: a streamed item is continued in a new one past this
CANCELLED: Final = {"outcome": {"outcome": "cancelled"}}

# What the chat shows for what ACP cannot promise (docs/bridges.md, "ACP agents").
UNDELIVERED: Final = (
    "The agent restarted before confirming it used your answer to “{title}”. The answer was "
    "not sent again; ask the agent again if it still matters."
)
RESTARTED: Final = "The agent stopped unexpectedly (exit code {code}); it is being restarted."
ASK_LOST: Final = (
    "The agent stopped while asking “{title}”: the question ended with it, unanswered. "
    "Ask the agent again if it still matters."
)
NEW_SESSION: Final = (
    "The agent restarted: this conversation continues in a new session, without the agent's "
    "memory of what came before."
)
OVERSIZED: Final = (
    "The agent sent a message over the bridge's limit of {limit} bytes; it was dropped."
)
URL_MODE: Final = "The agent asked to open a web page for input; that is not offered on the phone."
NOT_READY: Final = "The agent is not running; it is being restarted."


class Meta(NamedTuple):
    """A value the bridge keeps (``epoch``: the last process's)."""

    key: str
    value: str


class SessionRow(NamedTuple):
    """Which ACP session a conversation is, in which process, in which folder."""

    conversation: str
    session_id: str
    epoch: int
    cwd: str


class AskState(NamedTuple):
    """What became of an ask's answer: delivered, undelivered, withdrawn, or how it ended."""

    ask_id: str
    state: str


META: Final = Table("acp_meta", Meta)
SESSIONS: Final = Table("acp_sessions", SessionRow)
ASKS: Final = Table("acp_asks", AskState)


@dataclass(eq=False)
class Session:
    """A conversation's ACP session in the current process."""

    conv_id: str
    session_id: str
    epoch: int
    replaying: bool = False
    reply: ItemHandle | None = None
    reply_message: str | None = None
    thinking: ItemHandle | None = None
    tools: dict[str, ItemHandle] = field(default_factory=dict)
    prompt: asyncio.Future[msgspec.Raw] | None = None


@dataclass(eq=False)
class Pending:
    """An ask raised for one request of one process."""

    handle: AskHandle
    proc: AcpProcess
    request_id: RequestId
    withdrawn: bool = False


def starters_for(cwds: Sequence[str]) -> list[Starter]:
    """One starter per working folder, in order (spec N1)."""
    return [
        Starter(id=f"folder-{n}", label=label(Path(cwd).name or cwd), description=cwd)
        for n, cwd in enumerate(cwds, start=1)
    ]


class AcpBridge(AgentBridge):
    """Serve one ACP agent (``command``) as a wire-v1 agent kept in ``state_path``.

    Usage::

        bridge = AcpBridge(command=["claude-code-acp"], state_path=Path("claude.db"),
                           cwds=["/home/me/src/shop"])
        await bridge.start()
        runner = await bridge.serve_unix(Path("claude.sock"))
        ...
        await bridge.close()
    """

    protocol = "acp"
    refused = (OSError, RuntimeError)

    def __init__(
        self,
        *,
        command: Sequence[str],
        state_path: Path,
        cwds: Sequence[str] = (),
        now: Callable[[], datetime] | None = None,
        max_line: int = MAX_LINE,
        init_timeout: float = 30.0,
        restart_first: float = 0.5,
        restart_cap: float = 30.0,
        ping_interval: float = 15.0,
        env: dict[str, str] | None = None,
    ) -> None:
        if not command:
            raise ValueError("the agent's command is empty")
        self.command = list(command)
        self.state_path = state_path
        self.cwds = [str(Path(c).expanduser()) for c in cwds] or [str(Path.cwd())]
        self.max_line = max_line
        self.init_timeout = init_timeout
        self.restart_first = restart_first
        self.restart_cap = restart_cap
        self.env = env
        super().__init__(
            Agent(
                state_path=state_path,
                runtime="acp",
                features=["history", "close", "stop", "progress", "starters"],
                starters=starters_for(self.cwds),
                now=now or utc,
                ping_interval=ping_interval,
                answer_check=self._check_answer,
            )
        )
        self.agent.on_message(self._on_message)
        self.agent.on_start(self._on_start)
        self.agent.on_close(self._on_close)
        self.epoch = 0
        self.process: AcpProcess | None = None
        self.init: InitializeResult | None = None
        self.sessions: dict[str, Session] = {}  # by ACP session id, current process only
        self.pending: dict[tuple[int, RequestId], Pending] = {}
        self.forms: dict[str, tuple[ElicitationSchema, mapping.FormAsk]] = {}
        self._state: State | None = None
        self._ready = asyncio.Event()
        self._closing = False
        self._loop_task: asyncio.Task[None] | None = None
        self._convo_locks: dict[str, asyncio.Lock] = {}

    # --- life --------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the state file, start the agent's process and read its ``initialize``.

        Raises:
            OSError: the command cannot be run.
            RuntimeError: the agent did not initialize (or speaks another ACP version).
        """
        await super().start()
        # Beside the SDK's tables, in its file: reached off the loop, or between its commits
        # (see State).
        self._state = await asyncio.to_thread(
            State, self.state_path, META, SESSIONS, ASKS, SDK_ASKS, shared=True
        )
        await self._recover()
        proc = await self._spawn()
        init = await self._initialize(proc)
        self._set_hello(init)
        self._loop_task = asyncio.create_task(self._supervise(proc), name="acp-supervise")

    async def close(self) -> None:
        """Stop the process and the agent; close the state file."""
        self._closing = True
        await cancelled(self._loop_task)
        if self.process is not None:
            await self.process.stop()
        await super().close()
        if self._state is not None:
            await asyncio.to_thread(self._state.close)

    def _set_hello(self, init: InitializeResult) -> None:
        features = ["history", "close", "stop", "progress", "starters"]
        if init.can_resume or init.agent_capabilities.load_session:
            features.append("reopen")
        name = init.agent_info.name if init.agent_info is not None else "acp"
        self.agent.hello = Hello(
            wire=self.agent.hello.wire, runtime=label(name) or "acp", features=features
        )

    async def _spawn(self) -> AcpProcess:
        self.epoch = await self._next_epoch()
        proc = AcpProcess(
            self.command,
            epoch=self.epoch,
            handler=self,
            cwd=self.cwds[0],
            max_line=self.max_line,
            env=self.env,
        )
        await proc.start()
        return proc

    async def _initialize(self, proc: AcpProcess) -> InitializeResult:
        try:
            raw = await proc.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": client_capabilities(),
                    "clientInfo": {"name": BRIDGE_NAME, "version": "1"},
                },
                timeout=self.init_timeout,
            )
            init = msgspec.convert(raw, InitializeResult)
        except (ProcessGone, RpcFailed, TimeoutError, msgspec.ValidationError) as exc:
            await proc.stop()
            raise RuntimeError(f"the agent did not initialize: {exc}") from None
        if init.protocol_version != PROTOCOL_VERSION:
            await proc.stop()
            raise RuntimeError(
                f"the agent speaks ACP version {init.protocol_version}, not {PROTOCOL_VERSION}"
            )
        self.init = init
        self.process = proc
        self._ready.set()
        return init

    async def _supervise(self, proc: AcpProcess) -> None:
        """Wait for the process to end; restart it with backoff (a new epoch each time)."""
        delay = self.restart_first
        loop = asyncio.get_running_loop()
        while not self._closing:
            started = loop.time()
            code = await asyncio.shield(proc.exited)
            self._ready.clear()
            self.process = None
            await self._process_gone(proc, code)
            if loop.time() - started > 10.0:
                delay = self.restart_first
            while not self._closing:
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.restart_cap)
                try:
                    proc = await self._spawn()
                    await self._initialize(proc)
                    break
                except (OSError, RuntimeError) as exc:
                    log.warning("the agent did not start again: %s", exc)

    async def _process_gone(self, proc: AcpProcess, code: int) -> None:
        """The process ended: its asks can no longer be answered (``not_open`` from now on),
        its sessions are gone, its turns end with a notice."""
        for key, pending in list(self.pending.items()):
            if pending.proc is proc:
                pending.withdrawn = True
                await pending.handle.withdraw()
                self.pending.pop(key, None)
                # ACP's request dies with the process (docs/bridges.md, "ACP agents"): say so where
                # the card was, or the card would just vanish.
                title = pending.handle.ask.title
                await notice(pending.handle.conversation, ASK_LOST.format(title=title))
        for session in list(self.sessions.values()):
            if session.epoch != proc.epoch:
                continue
            del self.sessions[session.session_id]
            conv = await self.agent.conversation(session.conv_id)
            if conv is None or conv.closed:
                continue
            await self._finish_text(session)

    # --- the bridge's own store ----------------------------------------------------------

    @property
    def state(self) -> State:
        """The bridge's own tables (after :meth:`start`)."""
        assert self._state is not None, "start() first"
        return self._state

    async def _next_epoch(self) -> int:
        row = await self.state.off_loop(self.state.get, META, "epoch")
        epoch = int(row.value) + 1 if row is not None else 1
        await self.state.off_loop(self.state.put, META, Meta("epoch", str(epoch)))
        return epoch

    async def _set_ask_state(self, ask_id: str, state: str) -> None:
        # Not waiting for the disk: a crash of the bridge keeps it; a power cut that loses it
        # (and the agent's process with it) costs the "not confirmed" notice, nothing more.
        # Written on the loop between the SDK's commits: no thread hop for a log append.
        row = AskState(ask_id, state)
        async with self.agent.between_commits():
            self.state.put(ASKS, row, durable=False)

    async def _recover(self) -> None:
        """After the bridge itself restarted: an answer the ledger accepted for a process that
        is gone was never delivered; say so in its chat, once."""
        # Every ask the bridge raised is in the SDK's ``asks`` table; one whose fate the
        # bridge never recorded belonged to a process that is gone.
        for ask in await self.state.off_loop(self.state.without, SDK_ASKS, ASKS):
            how = "gone"
            if ask.resolution is not None:
                how = str(msgspec.json.decode(bytes(ask.resolution)).get("how", "gone"))
            if how == "answered":
                title = str(msgspec.json.decode(bytes(ask.data)).get("title", ""))
                conv = await self.agent.conversation(ask.conversation)
                if conv is not None and not conv.closed:
                    await notice(conv, UNDELIVERED.format(title=title))
                how = "undelivered"
            await self._set_ask_state(ask.id, how)

    async def _session_row(self, conv_id: str) -> SessionRow | None:
        return await self.state.off_loop(self.state.get, SESSIONS, conv_id)

    async def _save_session(self, conv_id: str, session_id: str, epoch: int, cwd: str) -> None:
        row = SessionRow(conv_id, session_id, epoch, cwd)
        await self.state.off_loop(self.state.put, SESSIONS, row)

    # --- wire side: starting conversations, messages, stop --------------------------------

    async def _ready_process(self) -> AcpProcess:
        try:
            await asyncio.wait_for(self._ready.wait(), self.init_timeout)
        except TimeoutError:
            raise RuntimeError(NOT_READY) from None
        assert self.process is not None
        return self.process

    async def _on_start(self, starter_id: str) -> ConversationHandle:
        cwd = next(s.description for s in self.agent.starters if s.id == starter_id)
        assert cwd is not None
        proc = await self._ready_process()
        raw = await proc.request("session/new", {"cwd": cwd, "mcpServers": []})
        session_id = msgspec.convert(raw, NewSessionResult).session_id
        conv = await self.agent.open_conversation(workspace=label(cwd))
        await self._save_session(conv.id, session_id, proc.epoch, cwd)
        self.sessions[session_id] = Session(conv.id, session_id, proc.epoch)
        return conv

    async def _on_close(self, conv: ConversationHandle) -> None:
        """Closed from the phone: ``session/close`` when the agent offers it (its session in
        this process only; the mapping stays for a reopen)."""
        proc, init = self.process, self.init
        if proc is None or init is None or not init.can_close:
            return
        session = next((s for s in self.sessions.values() if s.conv_id == conv.id), None)
        if session is None or session.epoch != proc.epoch:
            return
        try:
            await proc.request("session/close", {"sessionId": session.session_id}, timeout=10.0)
        except (ProcessGone, RpcFailed, TimeoutError) as exc:
            log.warning("session/close of %s failed: %s", session.session_id, exc)
        self.sessions.pop(session.session_id, None)

    def _lock(self, conv_id: str) -> asyncio.Lock:
        return self._convo_locks.setdefault(conv_id, asyncio.Lock())

    async def _session_for(self, conv: ConversationHandle) -> tuple[AcpProcess, Session]:
        """The conversation's session in the running process: resumed, loaded (its replay not
        shown) or new, as the agent allows."""
        proc = await self._ready_process()
        row = await self._session_row(conv.id)
        cwd = row.cwd if row is not None else self.cwds[0]
        if row is not None and row.epoch == proc.epoch and row.session_id in self.sessions:
            return proc, self.sessions[row.session_id]
        init = self.init
        assert init is not None
        if row is not None and (init.can_resume or init.agent_capabilities.load_session):
            sid = row.session_id
            session = Session(conv.id, sid, proc.epoch, replaying=True)
            self.sessions[sid] = session
            method = "session/resume" if init.can_resume else "session/load"
            try:
                await proc.request(method, {"sessionId": sid, "cwd": cwd, "mcpServers": []})
            except RpcFailed as exc:
                log.warning("%s of %s failed: %s", method, sid, exc)
                self.sessions.pop(sid, None)
            else:
                session.replaying = False
                await self._save_session(conv.id, sid, proc.epoch, cwd)
                return proc, session
        raw = await proc.request("session/new", {"cwd": cwd, "mcpServers": []})
        session_id = msgspec.convert(raw, NewSessionResult).session_id
        session = Session(conv.id, session_id, proc.epoch)
        self.sessions[session_id] = session
        await self._save_session(conv.id, session_id, proc.epoch, cwd)
        if row is not None:
            await notice(conv, NEW_SESSION)
        return proc, session

    async def _on_message(self, conv: ConversationHandle, msg: SendMessage) -> None:
        """A turn: ``session/prompt``; Stop cancels it with ``session/cancel``."""
        async with self._lock(conv.id):
            try:
                proc, session = await self._session_for(conv)
            except (ProcessGone, RpcFailed, RuntimeError) as exc:
                await notice(conv, f"The message did not reach the agent: {exc}")
                return
            previous = session.prompt
            if previous is not None and not previous.done():
                # A stopped turn's prompt is still ending in the agent: ACP runs one at a time.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(previous), self.init_timeout)
            fut = proc.send_request(
                "session/prompt",
                {"sessionId": session.session_id, "prompt": [{"type": "text", "text": msg.text}]},
            )
            session.prompt = fut
            try:
                raw = await asyncio.shield(fut)
            except asyncio.CancelledError:
                await asyncio.shield(self._cancel(proc, session))
                raise
            except ProcessGone:
                await self._finish_text(session)
                code = await asyncio.shield(proc.exited)
                await notice(conv, RESTARTED.format(code=code))
                return
            except RpcFailed as exc:
                await self._finish_text(session)
                await notice(conv, label(f"The agent failed: {exc}"))
                return
            await self._finish_text(session)
            try:
                reason = msgspec.convert(msgspec.json.decode(raw), PromptResult).stop_reason
            except (msgspec.ValidationError, msgspec.DecodeError):
                return
            said = mapping.STOP_NOTICES.get(reason)
            if said is not None:
                await notice(conv, said)

    async def _cancel(self, proc: AcpProcess, session: Session) -> None:
        """Stop: ``session/cancel``; the SDK resolved the turn's asks ``stopped``, and their
        waiters answer the agent ``cancelled``."""
        await proc.notify("session/cancel", {"sessionId": session.session_id})
        session.reply = session.thinking = None
        session.reply_message = None

    # --- ACP side: what the process sends --------------------------------------------------

    async def on_notifications(self, proc: AcpProcess, notes: list[Notification]) -> None:
        updates: list[SessionNotification] = []
        for note in notes:
            if note.method == "session/update" and note.params is not None:
                try:
                    updates.append(msgspec.json.decode(note.params, type=SessionNotification))
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    log.warning("a session/update the bridge cannot read: %s", exc)
                continue
            for update in merge_chunks(updates):
                await self._apply_update(proc, update)
            updates.clear()
            if note.method == "$/cancel_request" and note.params is not None:
                try:
                    cancel = msgspec.json.decode(note.params, type=CancelRequestParams)
                except (msgspec.ValidationError, msgspec.DecodeError):
                    continue
                await self._withdraw(proc, cancel.request_id)
        for update in merge_chunks(updates):
            await self._apply_update(proc, update)

    async def on_bad_line(self, proc: AcpProcess, problem: Invalid | Oversized) -> None:
        if not isinstance(problem, Oversized):
            return
        for session in list(self.sessions.values()):
            if session.epoch == proc.epoch and session.prompt and not session.prompt.done():
                conv = await self.agent.conversation(session.conv_id)
                if conv is not None and not conv.closed:
                    await notice(conv, OVERSIZED.format(limit=self.max_line))

    async def on_request(self, proc: AcpProcess, request: Request) -> None:
        try:
            if request.method == "session/request_permission":
                await self._permission(proc, request)
            elif request.method == "elicitation/create":
                await self._elicitation(proc, request)
            else:
                await proc.respond_error(
                    request.id, METHOD_NOT_FOUND, f"{request.method} is not offered"
                )
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            await proc.respond_error(request.id, INVALID_PARAMS, str(exc))

    async def _withdraw(self, proc: AcpProcess, request_id: RequestId) -> None:
        """``$/cancel_request``: the agent no longer wants the answer. The ask resolves
        ``decided`` and the request is answered with ACP's "request cancelled" error."""
        pending = self.pending.pop((proc.epoch, request_id), None)
        if pending is None or not pending.handle.open:
            return
        pending.withdrawn = True
        await pending.handle.decide()
        await self._set_ask_state(pending.handle.id, "withdrawn")
        await proc.respond_error(request_id, REQUEST_CANCELLED, "Request cancelled")

    async def _live_conv(
        self, proc: AcpProcess, session_id: str | None
    ) -> tuple[Session, ConversationHandle] | None:
        session = self.sessions.get(session_id or "")
        if session is None or session.epoch != proc.epoch or session.replaying:
            return None
        conv = await self.agent.conversation(session.conv_id)
        if conv is None or conv.closed:
            return None
        return session, conv

    async def _raise(
        self, proc: AcpProcess, request: Request, conv: ConversationHandle, draft: AskDraft
    ) -> Pending | None:
        ask_id = safe_id(f"e{proc.epoch}", request.id)
        try:
            handle = await draft.raise_in(conv, id=ask_id)
        except LocalWireError as exc:
            log.warning("an ask the wire cannot carry: %s", exc)
            return None
        pending = Pending(handle, proc, request.id)
        self.pending[(proc.epoch, request.id)] = pending
        return pending

    async def _deliver(self, pending: Pending, conv: ConversationHandle, result: object) -> None:
        """Write the answer to the process that asked, and to no other; an answer that cannot
        be written is never re-sent: the chat says so."""
        self.pending.pop((pending.proc.epoch, pending.request_id), None)
        delivered = pending.proc.alive and await pending.proc.respond(pending.request_id, result)
        if delivered:
            await self._set_ask_state(pending.handle.id, "delivered")
            return
        await self._set_ask_state(pending.handle.id, "undelivered")
        if not conv.closed:
            await notice(conv, UNDELIVERED.format(title=pending.handle.ask.title))

    async def _permission(self, proc: AcpProcess, request: Request) -> None:
        params = msgspec.json.decode(request.params or b"null", type=RequestPermissionParams)
        found = await self._live_conv(proc, params.session_id)
        if found is None:  # no such session, or a replay: never an ask from a replay
            await proc.respond(request.id, CANCELLED)
            return
        session, conv = found
        await self._finish_text(session)
        tool_item = await self._tool_item(session, conv, params.tool_call)
        options, back = mapping.permission_options(params.options)
        title = label(params.tool_call.title or tool_item.item.name or "Allow this?")
        draft = asks.permission(
            title,
            options,
            text=tool_text(params.tool_call.raw_input),
            tool=ToolRef(call_id=tool_item.item.call_id or tool_item.id, name=title),
        )
        pending = await self._raise(proc, request, conv, draft)
        if pending is None:
            await proc.respond(request.id, CANCELLED)
            return
        resolution = await pending.handle.wait()
        if pending.withdrawn:
            return  # answered by _withdraw or _process_gone
        if resolution.how == "answered" and resolution.answer is not None:
            option = back.get(resolution.answer.option or "")
            if option is not None:
                result = {"outcome": {"outcome": "selected", "optionId": option}}
                await self._deliver(pending, conv, result)
                return
        self.pending.pop((proc.epoch, request.id), None)
        await self._set_ask_state(pending.handle.id, resolution.how)
        await proc.respond(request.id, CANCELLED)

    async def _elicitation(self, proc: AcpProcess, request: Request) -> None:
        params = msgspec.json.decode(request.params or b"null", type=ElicitationParams)
        session_id = params.session_id
        if session_id is None:  # request scope: the session whose turn is running
            running = [
                s
                for s in self.sessions.values()
                if s.epoch == proc.epoch and s.prompt is not None and not s.prompt.done()
            ]
            session_id = running[0].session_id if len(running) == 1 else None
        found = await self._live_conv(proc, session_id)
        if found is None:
            await proc.respond(request.id, {"action": "cancel"})
            return
        session, conv = found
        if params.mode != "form" or params.requested_schema is None:
            await notice(conv, URL_MODE)
            await proc.respond(request.id, {"action": "decline"})
            return
        await self._finish_text(session)
        schema = params.requested_schema
        form = mapping.form_ask(schema)
        tool = None
        if params.tool_call_id is not None and params.tool_call_id in session.tools:
            item = session.tools[params.tool_call_id].item
            tool = ToolRef(call_id=item.call_id or item.id, name=item.name or "tool")
        draft = AskDraft(
            kind=form.kind,
            title=label(params.message or schema.title or "The agent asks"),
            text=schema.description or "",
            tool=tool,
            options=form.options,
            multiple=form.multiple,
            max_length=form.max_length,
            fields=form.fields,
        )
        pending = await self._raise(proc, request, conv, draft)
        if pending is None:
            await proc.respond(request.id, {"action": "cancel"})
            return
        self.forms[pending.handle.id] = (schema, form)
        try:
            resolution = await pending.handle.wait()
        finally:
            self.forms.pop(pending.handle.id, None)
        if pending.withdrawn:
            return
        if resolution.how == "answered" and resolution.answer is not None:
            content, _ = mapping.form_content(schema, form, pending.handle.ask, resolution.answer)
            await self._deliver(pending, conv, {"action": "accept", "content": content})
            return
        self.pending.pop((proc.epoch, request.id), None)
        await self._set_ask_state(pending.handle.id, resolution.how)
        await proc.respond(request.id, {"action": "cancel"})

    def _check_answer(self, ask: Ask, answer: Answer) -> str | None:
        """The SDK's extra check: an elicitation's answer must fit its schema before it is
        accepted (and forwarded)."""
        found = self.forms.get(ask.id)
        if found is None:
            return None
        schema, form = found
        return mapping.form_content(schema, form, ask, answer)[1]

    # --- session/update → items ----------------------------------------------------------

    async def _apply_update(self, proc: AcpProcess, note: SessionNotification) -> None:
        found = await self._live_conv(proc, note.session_id)
        if found is None:
            return  # an unknown session, or a replay (its items are kept already)
        session, conv = found
        update = note.update
        kind = update.session_update
        try:
            if kind in ("agent_message_chunk", "agent_thought_chunk"):
                await self._chunk(session, conv, update)
            elif kind in ("tool_call", "tool_call_update"):
                await self._finish_text(session)
                fields = msgspec.convert(_tool_fields(update), ToolCallFields)
                await self._tool_item(session, conv, fields)
            elif kind == "plan":
                await conv.update(progress=mapping.plan_progress(update.entries or []))
            elif kind == "session_info_update" and update.title is not None:
                await conv.update(title=label(update.title) or None)
        except LocalWireError as exc:
            log.warning("an update the wire cannot carry (%s): %s", kind, exc)
        except msgspec.ValidationError as exc:
            log.warning("a %s the bridge cannot read: %s", kind, exc)

    async def _chunk(
        self, session: Session, conv: ConversationHandle, update: SessionUpdate
    ) -> None:
        block = msgspec.convert(update.content, ContentBlock)
        if block.type != "text":
            await self._finish_text(session)
            await notice(conv, mapping.block_notice(block))
            return
        text = block.text or ""
        if not text:
            return
        thought = update.session_update == "agent_thought_chunk"
        if thought and session.reply is not None:
            await self._finish(session.reply)
            session.reply = None
        if not thought and session.thinking is not None:
            await self._finish(session.thinking)
            session.thinking = None
        item = session.thinking if thought else session.reply
        if (
            not thought
            and item is not None
            and update.message_id is not None
            and session.reply_message not in (None, update.message_id)
        ):
            await self._finish(item)
            item = None
        if item is not None and len(item.item.text) + len(text) > SPLIT_AT:
            await self._finish(item)
            item = None
        if item is not None:
            try:
                await item.delta(text)
                return
            except LocalWireError:  # made final meanwhile (Stop): continue in a new item
                pass
        item = await conv.append(kind="thinking" if thought else "reply", text=text, final=False)
        if thought:
            session.thinking = item
        else:
            session.reply = item
            session.reply_message = update.message_id

    async def _tool_item(
        self, session: Session, conv: ConversationHandle, call: ToolCallFields
    ) -> ItemHandle:
        """The tool call's item: appended the first time, updated after."""
        output = mapping.tool_output(call.content, call.raw_output)
        status = mapping.tool_status(call.status)
        item = session.tools.get(call.tool_call_id)
        if item is not None:
            changes: dict[str, Any] = {}
            if status is not None:
                changes["status"] = status
            if output is not None:
                changes["output"] = output
            if call.raw_input is not None:
                changes["text"] = tool_text(call.raw_input)
            if changes:
                await item.update(**changes, defer=True)
            return item
        call_id = safe_id(f"e{session.epoch}", call.tool_call_id)
        item = await conv.append(
            kind="tool",
            text=tool_text(call.raw_input),
            call_id=call_id,
            name=label(call.title or call.kind or "tool") or "tool",
            status=status or "running",
            output=output,
            defer=True,  # committed with the ask about it, or with the next write
        )
        session.tools[call.tool_call_id] = item
        return item

    async def _finish(self, item: ItemHandle) -> None:
        if not item.item.final:
            with contextlib.suppress(LocalWireError):
                await item.finish()

    async def _finish_text(self, session: Session) -> None:
        for item in (session.reply, session.thinking):
            if item is not None:
                await self._finish(item)
        session.reply = session.thinking = None
        session.reply_message = None


_TEXT_CHUNKS: Final = ("agent_message_chunk", "agent_thought_chunk")


def _text_of(update: SessionUpdate) -> str | None:
    content = update.content
    if update.session_update in _TEXT_CHUNKS and isinstance(content, dict):
        text = content.get("text")
        if content.get("type") == "text" and isinstance(text, str):
            return text
    return None


def merge_chunks(updates: list[SessionNotification]) -> list[SessionNotification]:
    """Consecutive text chunks of one message, read together, as one chunk: one write of the
    state file (and one ``item.delta``) for all of them, so a fast agent is not held to the
    speed of the bridge's commits."""
    merged: list[SessionNotification] = []
    for note in updates:
        text = _text_of(note.update)
        if merged and text is not None:
            last = merged[-1]
            before = _text_of(last.update)
            if (
                before is not None
                and last.session_id == note.session_id
                and last.update.session_update == note.update.session_update
                and last.update.message_id == note.update.message_id
            ):
                content = {**last.update.content, "text": before + text}
                merged[-1] = msgspec.structs.replace(
                    last, update=msgspec.structs.replace(last.update, content=content)
                )
                continue
        merged.append(note)
    return merged


def _tool_fields(update: SessionUpdate) -> dict[str, Any]:
    fields: dict[str, Any] = {"toolCallId": update.tool_call_id or ""}
    for key, value in (
        ("title", update.title),
        ("kind", update.kind),
        ("status", update.status),
        ("content", update.content),
        ("rawInput", update.raw_input),
        ("rawOutput", update.raw_output),
    ):
        if value is not None:
            fields[key] = value
    return fields
