"""The LangGraph bridge: each thread a conversation, each pending interrupt an ask
(``bridges.langgraph.mapping``), answers resumed by interrupt id only. Where the threads live
is a ``Backend`` (``bridges.langgraph.backend``): the graph run here, or an Agent Server.

Exactly once, as far as LangGraph allows: one lock per thread; before a tap is taken the
thread is read again (gone: ``not_open``; other content: ``changed``); a resume is recorded
before it is sent, so an interrupt that comes back after it (a crash inside the resumed node)
is a new ask, ``…:attempt{n}``, with a notice, never the old answer sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from bridges import kit
from bridges.kit.fit import label, safe_id
from bridges.langgraph import mapping
from bridges.langgraph.backend import Backend, Snapshot, input_builder
from bridges.langgraph.mapping import AskPlan, Unfit
from bridges.langgraph.stream import Stream
from wire.agent import Agent, AskHandle, ConversationHandle, SendMessage, Starter
from wire.messages import Answer, Ask, Reply, ReplyResult

log = logging.getLogger(__name__)

WAITING = "The graph waits for an answer above; the message was not sent to it."
RUNNING = "The thread is running elsewhere; the message was not sent to it."
ATTEMPT = (
    "The graph stopped while it acted on your answer to “{title}”, and asks again. What your "
    "earlier answer did before it stopped is not known."
)
FAILED = "The graph failed: {error}"
NEW = "New thread"
HISTORY = 50  # a thread's last messages shown when it is read again
SETTLE = 50  # readings, 0.1 s apart, of a thread still busy after the leg it ran
BUSY = "the thread is running elsewhere; answer once it stops"


class Resumes(NamedTuple):
    """How many times the bridge resumed an interrupt (``{thread}:{interrupt}``)."""

    key: str
    sent: int


class Decision(NamedTuple):
    """An answered action of a batched approval, kept until its last one is answered."""

    ask_id: str
    interrupt: str
    slot: int
    value: str  # JSON


RESUMES = kit.Table("langgraph_resumes", Resumes)
DECISIONS = kit.Table("langgraph_decisions", Decision)


class LangGraphBridge(kit.AgentBridge):
    """LangGraph threads as a durable agent, wherever ``backend`` keeps them."""

    protocol = "langgraph"
    refused = (OSError, ImportError)

    def __init__(self, backend: Backend, *, state: Path, input: str = "messages"):
        features = ["history", "starters", "deadlines"] + (["stop"] if backend.stoppable else [])
        super().__init__(
            Agent(
                state_path=state,
                runtime=label(backend.runtime),
                features=features,
                starters=[Starter(id="thread", label=NEW)],
                answer_check=self._check,
            )
        )
        self.backend, self.input_spec = backend, input
        self.state = kit.State(state, RESUMES, DECISIONS)
        self.plans: dict[str, AskPlan] = {}
        self.locks: dict[str, asyncio.Lock] = {}
        self.watched: set[str] = set()
        self.marks: dict[str, str] = {}  # thread → the checkpoint whose messages are shown
        self.closing = False
        self.agent.on_start(self._on_start)
        self.agent.on_message(self._on_message)
        self.agent.on_reply(self._on_reply)

    async def start(self) -> None:
        """Reach the graph, start the agent, list the threads that exist, show every
        thread's pending interrupts as asks."""
        self.make_input = input_builder(self.input_spec)
        await self.backend.open()
        await super().start()
        await self.refresh()
        if self.backend.poll:
            self.agent.spawn(self._poll(self.backend.poll))

    async def close(self) -> None:
        """Stop serving, close the agent, let go of the graph, close the state file. A run
        on a server goes on there."""
        self.closing = True
        await super().close()
        await self.backend.close()
        self.state.close()

    def lock(self, thread: str) -> asyncio.Lock:
        """The thread's lock: one leg of a thread at a time."""
        return self.locks.setdefault(thread, asyncio.Lock())

    async def refresh(self, busy_too: bool = True) -> None:
        """Open a conversation per thread that exists; sync every open one (a thread whose
        lock is held is skipped unless ``busy_too``)."""
        for thread in await self.backend.threads():
            await self.agent.open_conversation(thread.id, title=thread.title)
        for conv in list(self.agent.conversations):
            lock = self.lock(conv.id)
            if lock.locked() and not busy_too:
                continue
            async with lock:
                try:
                    snapshot = await self.backend.snapshot(conv.id)
                    if self.backend.shared and not snapshot.busy:
                        await self.catch_up(conv, snapshot)
                    await self.sync(conv, snapshot)
                except Exception as exc:  # one thread unreadable: the others still are
                    log.warning("reading thread %s failed: %s", conv.id, exc)

    async def catch_up(self, conv: ConversationHandle, snapshot: Snapshot) -> None:
        """Show the thread's last messages the conversation lacks (made while the bridge was
        away, by another client, or before the thread was listed), once per checkpoint."""
        if snapshot.mark is not None and self.marks.get(conv.id) == snapshot.mark:
            return
        values = snapshot.values
        messages = values.get("messages") if isinstance(values, dict) else None
        if isinstance(messages, list):
            await Stream(conv).history(messages[-HISTORY:])
        if snapshot.mark is not None:
            self.marks[conv.id] = snapshot.mark

    async def _poll(self, every: float) -> None:
        """Read every thread again each ``every`` seconds: interrupts raised or resolved by
        other clients, threads made elsewhere."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.refresh(busy_too=False)
            except Exception as exc:  # the server away for a while: try again later
                log.warning("reading the threads failed: %s", exc)

    # --- the thread's pending interrupts as asks ------------------------------------------

    async def sync(self, conv: ConversationHandle, snapshot: Snapshot | None = None) -> bool:
        """Raise (or change) an ask per pending interrupt (of ``snapshot``, if read just now);
        an ask whose interrupt went without our resume is ``decided``. Call with the thread's
        lock held. False (nothing done): a run goes on elsewhere, its interrupts are read once
        it ends."""
        snapshot = snapshot or await self.backend.snapshot(conv.id)
        if snapshot.busy:
            return False
        wanted: dict[str, AskPlan] = {}
        for pending in snapshot.pending:
            key = f"{conv.id}:{pending.id}"
            row = await self.state.off_loop(self.state.get, RESUMES, key)
            attempt = (row.sent if row is not None else 0) + 1
            for p in mapping.plan(conv.id, pending, attempt):
                wanted[p.ask_id] = p
        for handle in conv.asks:
            if handle.open and handle.id not in wanted:
                self.plans.pop(handle.id, None)
                await handle.decide()
        for p in wanted.values():
            self.plans[p.ask_id] = p
            handle = await p.draft.raise_in(conv, id=p.ask_id, deadline=self.deadline(conv, p))
            if p.attempt > 1 and p.slot <= 1:
                text = ATTEMPT.format(title=p.draft.title)
                await kit.notice(conv, text, id=safe_id("attempt", p.ask_id))
            if p.ask_id not in self.watched:
                self.watched.add(p.ask_id)
                self.agent.spawn(self._watch(conv, handle, p))
        return True

    def deadline(self, conv: ConversationHandle, p: AskPlan) -> datetime | None:
        """The ask's deadline: the one it has, else from now if the graph names one."""
        for handle in conv.asks:
            if handle.id == p.ask_id:
                return handle.ask.deadline
        seconds = self.backend.deadline
        return self.agent.now() + timedelta(seconds=seconds) if seconds else None

    async def _watch(self, conv: ConversationHandle, handle: AskHandle, p: AskPlan) -> None:
        """An ask ended without an answer (past its deadline, or by a Stop) resumes its
        interrupt as the mapping says."""
        how = (await handle.wait()).how
        if how not in mapping.UNANSWERED:
            return
        lock = self.lock(conv.id)
        await lock.acquire()
        resume: dict[str, Any] | None = None
        try:
            await self.sync(conv)  # still waiting, with the content that expired?
            now = self.plans.get(p.ask_id)
            if now is not None and now.digest == p.digest:
                resume = await self._complete(conv, now, mapping.unanswered_value(now, how))
        finally:
            if resume is None:
                lock.release()
        if resume is not None:
            await self._leg(conv, resume, lock)

    # --- answers ------------------------------------------------------------------------

    def _check(self, ask: Ask, answer: Answer) -> str | None:
        p = self.plans.get(ask.id)
        if p is None or p.how != "schema":
            return None
        try:
            mapping.value_of(p, answer)
        except Unfit as exc:
            return str(exc)
        return None

    async def _on_reply(self, handle: AskHandle, reply: Reply) -> ReplyResult:
        """Take a tap only if its interrupt still waits with the content shown; resume once
        every ask of the interrupt is answered (the lock then passes to that leg)."""
        conv = handle.conversation
        lock = self.lock(conv.id)
        await lock.acquire()
        resume: dict[str, Any] | None = None
        try:
            result, resume = await self._take(handle, reply)
        finally:
            if resume is None:
                lock.release()
        if resume is not None:
            self.agent.spawn(self._leg(conv, resume, lock))
        return result

    async def _take(
        self, handle: AskHandle, reply: Reply
    ) -> tuple[ReplyResult, dict[str, Any] | None]:
        """The tap's outcome, and the resume map if it completes its interrupt."""
        conv = handle.conversation
        if not await self.sync(conv):  # the thread as it is now, not as it was shown
            return ReplyResult(outcome="not_open", reason=BUSY), None
        p = self.plans.get(handle.id)
        if not handle.open or p is None:
            return ReplyResult(outcome="not_open", reason="no longer waiting"), None
        if handle.version != reply.version:
            return ReplyResult(outcome="changed"), None
        try:
            value = mapping.value_of(p, reply.answer)
        except Unfit as exc:  # checked before; kept for an answer_check skipped
            return ReplyResult(outcome="not_open", reason=str(exc)), None
        return ReplyResult(outcome="accepted"), await self._complete(conv, p, value)

    async def _complete(
        self, conv: ConversationHandle, p: AskPlan, value: Any
    ) -> dict[str, Any] | None:
        """The resume map once every ask of ``p``'s interrupt has its value (recorded as
        sent before it is sent); else ``None``."""
        decisions = await self._decisions(p, value)
        if decisions is None:
            return None
        key = f"{conv.id}:{p.interrupt_id}"
        await self.state.off_loop(self.state.put, RESUMES, Resumes(key, p.attempt))
        return {p.interrupt_id: mapping.resume_value(p, decisions)}

    async def _decisions(self, p: AskPlan, value: Any) -> list[Any] | None:
        """Every decision of ``p``'s interrupt in slot order, once the last is in; else
        ``None`` (this one kept)."""
        if p.how != "batch":
            return [value]
        row = Decision(p.ask_id, f"{p.interrupt_id}:{p.attempt}", p.slot, json.dumps(value))
        await self.state.off_loop(self.state.put, DECISIONS, row)
        rows = await self.state.off_loop(
            self.state.find, DECISIONS, order="slot", interrupt=row.interrupt
        )
        if len(rows) < p.of:
            return None
        return [json.loads(r.value) for r in rows]

    async def _leg(
        self, conv: ConversationHandle, resume: dict[str, Any], lock: asyncio.Lock
    ) -> None:
        """Resume the thread with the id-keyed map; the lock (held) is released after."""
        try:
            await self.run(conv, None, resume)
        finally:
            lock.release()

    # --- turns --------------------------------------------------------------------------

    async def _on_start(self, starter: str) -> ConversationHandle:
        """A new thread from the New page: its conversation (the thread's id, where the
        backend names it)."""
        return await self.agent.open_conversation(await self.backend.new_thread(), title=NEW)

    async def _on_message(self, conv: ConversationHandle, msg: SendMessage) -> None:
        """The thread's next turn; refused while an interrupt waits (never a bare run)."""
        async with self.lock(conv.id):
            snapshot = await self.backend.snapshot(conv.id)
            if snapshot.busy or snapshot.pending:
                await kit.notice(conv, RUNNING if snapshot.busy else WAITING)
                return
            await self.run(conv, self.make_input(msg.text))

    async def run(
        self, conv: ConversationHandle, given: Any, resume: dict[str, Any] | None = None
    ) -> None:
        """One leg of the thread, streamed into the conversation, then its asks; a Stop
        cancels the leg where it runs."""
        stream = Stream(conv)
        try:
            async for mode, data in self.backend.stream(conv.id, given, resume):
                if mode == "messages":
                    await stream.chunk(data)
                elif isinstance(data, dict):
                    await stream.update(data)
        except asyncio.CancelledError:
            if not self.closing:  # a Stop, not the bridge going
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.backend.cancel(conv.id))
            raise
        except Exception as exc:
            log.warning("thread %s failed: %s", conv.id, exc)
            stream.said = True
            await kit.notice(conv, FAILED.format(error=label(str(exc)) or type(exc).__name__))
        finally:
            await stream.finish()
        snapshot = await self.backend.snapshot(conv.id)
        if not stream.said and not snapshot.pending:
            await stream.final_state(snapshot.values)
        for _ in range(SETTLE):  # a server may call the thread busy a moment after its run
            if await self.sync(conv, snapshot):
                break
            await asyncio.sleep(0.1)
            snapshot = await self.backend.snapshot(conv.id)
