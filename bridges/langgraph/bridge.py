"""The LangGraph bridge, in-process: a compiled graph imported and run here on a SQLite
checkpointer of its own (``durability="sync"``), each thread a conversation, each pending
interrupt an ask (``bridges.langgraph.mapping``), answers resumed by interrupt id only.

Exactly once, as far as LangGraph allows: one lock per thread; before a tap is taken the
thread is read again (gone: ``not_open``; other content: ``changed``); a resume is recorded
before it is sent, so an interrupt that comes back after it (a crash inside the resumed node)
is a new ask, ``…:attempt{n}``, with a notice, never the old answer sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from bridges import kit
from bridges.kit.fit import cut, label, safe_id, tool_text
from bridges.langgraph import mapping
from bridges.langgraph.mapping import AskPlan, Pending, Unfit
from wire.agent import (
    Agent,
    AskHandle,
    ConversationHandle,
    ItemHandle,
    SendMessage,
    Starter,
)
from wire.messages import Answer, Ask, Reply, ReplyResult

log = logging.getLogger(__name__)

OUTPUT_LIMIT = 20_000  # characters of a tool's result kept as its item's output
WAITING = "The graph waits for an answer above; the message was not sent to it."
ATTEMPT = (
    "The graph stopped while it acted on your answer to “{title}”, and asks again. What your "
    "earlier answer did before it stopped is not known."
)
FAILED = "The graph failed: {error}"


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


def load(dotted: str) -> Any:
    """``package.module:name`` imported.

    Raises:
        ImportError: no such module or name.
    """
    module, _, name = dotted.partition(":")
    found = importlib.import_module(module)
    try:
        return getattr(found, name or "graph")
    except AttributeError:
        raise ImportError(f"{module} has no {name!r}") from None


def input_builder(spec: str) -> Callable[[str], Any]:
    """``messages``: ``{"messages": [user message]}``; else a dotted callable of the text."""
    if spec == "messages":
        return lambda text: {"messages": [{"role": "user", "content": text}]}
    built: Callable[[str], Any] = load(spec)
    return built


class LangGraphBridge(kit.AgentBridge):
    """A compiled LangGraph graph as a durable agent (in-process mode)."""

    protocol = "langgraph"
    refused = (OSError, ImportError)

    def __init__(self, *, graph: str, checkpoints: Path, state: Path, input: str = "messages"):
        super().__init__(
            Agent(
                state_path=state,
                runtime=label(graph.rpartition(":")[2] or graph),
                features=["history", "starters"],
                starters=[Starter(id="thread", label="New thread")],
                answer_check=self._check,
            )
        )
        self.graph_spec, self.checkpoints, self.input_spec = graph, checkpoints, input
        self.state = kit.State(state, RESUMES, DECISIONS)
        self.plans: dict[str, AskPlan] = {}
        self.locks: dict[str, asyncio.Lock] = {}
        self.graph: Any = None
        self._saver: Any = None
        self.agent.on_message(self._on_message)
        self.agent.on_reply(self._on_reply)

    async def start(self) -> None:
        """Import the graph, open its checkpointer, start the agent, show every thread's
        pending interrupts as asks."""
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        graph = load(self.graph_spec)
        self.make_input = input_builder(self.input_spec)
        self._saver_cm = AsyncSqliteSaver.from_conn_string(str(self.checkpoints))
        self._saver = await self._saver_cm.__aenter__()
        self.graph = graph.copy(update={"checkpointer": self._saver})
        await super().start()
        for conv in list(self.agent.conversations):
            async with self.lock(conv.id):
                await self.sync(conv)

    async def close(self) -> None:
        """Stop serving, close the agent, the checkpointer and the state file."""
        await super().close()
        if self._saver is not None:
            await self._saver_cm.__aexit__(None, None, None)
            self._saver = None
        self.state.close()

    def lock(self, thread: str) -> asyncio.Lock:
        """The thread's lock: one leg of a thread at a time."""
        return self.locks.setdefault(thread, asyncio.Lock())

    def config(self, thread: str) -> dict[str, Any]:
        """The run's configuration for ``thread``."""
        return {"configurable": {"thread_id": thread}}

    # --- the thread's pending interrupts as asks ------------------------------------------

    async def pending(self, thread: str) -> list[Pending]:
        """The thread's interrupts still waiting, as the checkpointer has them."""
        snapshot = await self.graph.aget_state(self.config(thread))
        return [
            Pending(
                i.id, i.value, i.response_schema if isinstance(i.response_schema, dict) else None
            )
            for i in snapshot.interrupts
        ]

    async def sync(self, conv: ConversationHandle) -> None:
        """Raise (or change) an ask per pending interrupt; an ask whose interrupt went without
        our resume is ``decided``. Call with the thread's lock held."""
        wanted: dict[str, AskPlan] = {}
        for pending in await self.pending(conv.id):
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
            await p.draft.raise_in(conv, id=p.ask_id)  # open: its version grows if changed
            if p.attempt > 1 and p.slot <= 1:
                text = ATTEMPT.format(title=p.draft.title)
                await kit.notice(conv, text, id=safe_id("attempt", p.ask_id))

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
        await self.sync(conv)  # the thread as it is now, not as it was shown
        p = self.plans.get(handle.id)
        if not handle.open or p is None:
            return ReplyResult(outcome="not_open", reason="no longer waiting"), None
        if handle.version != reply.version:
            return ReplyResult(outcome="changed"), None
        try:
            value = mapping.value_of(p, reply.answer)
        except Unfit as exc:  # checked before; kept for an answer_check skipped
            return ReplyResult(outcome="not_open", reason=str(exc)), None
        decisions = await self._decisions(p, value)
        if decisions is None:
            return ReplyResult(outcome="accepted"), None
        key = f"{conv.id}:{p.interrupt_id}"
        await self.state.off_loop(self.state.put, RESUMES, Resumes(key, p.attempt))
        return ReplyResult(outcome="accepted"), {p.interrupt_id: mapping.resume_value(p, decisions)}

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
        from langgraph.types import Command

        try:
            await self.run(conv, Command(resume=resume))
        finally:
            lock.release()

    # --- turns --------------------------------------------------------------------------

    async def _on_message(self, conv: ConversationHandle, msg: SendMessage) -> None:
        """The thread's next turn; refused while an interrupt waits (never a bare run)."""
        async with self.lock(conv.id):
            if await self.pending(conv.id):
                await kit.notice(conv, WAITING)
                return
            await self.run(conv, self.make_input(msg.text))

    async def run(self, conv: ConversationHandle, given: Any) -> None:
        """One leg of the thread, streamed into the conversation, then its asks."""
        stream = Stream(conv)
        try:
            async for mode, data in self.graph.astream(
                given,
                self.config(conv.id),
                stream_mode=["messages", "updates"],
                durability="sync",
            ):
                if mode == "messages":
                    await stream.chunk(data[0])
                elif isinstance(data, dict):
                    await stream.update(data)
        except Exception as exc:
            log.warning("thread %s failed: %s", conv.id, exc)
            stream.said = True
            await kit.notice(conv, FAILED.format(error=label(str(exc)) or type(exc).__name__))
        finally:
            await stream.finish()
        snapshot = await self.graph.aget_state(self.config(conv.id))
        if not stream.said and not snapshot.interrupts:
            await stream.final_state(snapshot.values)
        await self.sync(conv)


def _text(message: Any) -> str:
    """A message's text (its text blocks joined)."""
    return str(getattr(message, "text", "") or "")


class Stream:
    """One leg's output in a conversation: AI message chunks as ``reply`` deltas, tool calls
    and tool messages as ``tool`` items."""

    def __init__(self, conv: ConversationHandle) -> None:
        self.conv = conv
        self.replies: dict[str, ItemHandle] = {}
        self.tools: dict[str, ItemHandle] = {}
        self.said = False

    async def chunk(self, message: Any) -> None:
        """A chunk of an AI message: a delta of its reply."""
        if getattr(message, "type", "") not in ("ai", "AIMessageChunk"):
            return
        text = _text(message)
        if not text:
            return
        key = str(message.id)
        item = self.replies.get(key)
        if item is None:
            item = await self.conv.append(kind="reply", final=False)
            self.replies[key] = item
        await item.delta(text)
        self.said = True

    async def update(self, data: dict[str, Any]) -> None:
        """A node's update: tool calls and tool messages; an AI message never streamed."""
        for update in data.values():
            messages = update.get("messages") if isinstance(update, dict) else None
            for message in messages if isinstance(messages, list) else []:
                await self.message(message)

    async def message(self, message: Any) -> None:
        """A whole message of a node's update."""
        kind = getattr(message, "type", "")
        if kind == "ai":
            text = _text(message)
            if text and str(message.id) not in self.replies:
                self.replies[str(message.id)] = await self.conv.append(kind="reply", text=text)
                self.said = True
            for call in message.tool_calls:
                await self.tool_call(call)
        elif kind == "tool":
            item = self.tools.get(str(message.tool_call_id)) or self.earlier(message.tool_call_id)
            if item is None:
                item = await self.tool_call({"id": message.tool_call_id, "name": message.name})
            failed = getattr(message, "status", "success") == "error"
            output = (
                message.content
                if isinstance(message.content, str)
                else json.dumps(message.content, default=str)
            )
            await item.update(
                status="failed" if failed else "done", output=cut(output, OUTPUT_LIMIT)
            )
            self.said = True

    def earlier(self, raw: object) -> ItemHandle | None:
        """The tool item of an earlier leg (before the interrupt) for the call ``raw``."""
        call_id = safe_id("call", str(raw))
        for seq in range(len(self.conv.items) - 1, -1, -1):
            item = self.conv.items[seq]
            if item.kind == "tool" and item.call_id == call_id:
                return ItemHandle(self.conv, seq)
        return None

    async def tool_call(self, call: dict[str, Any]) -> ItemHandle:
        """A tool call: a ``tool`` item, running."""
        raw = str(call.get("id") or call.get("name"))
        item = await self.conv.append(
            kind="tool",
            text=tool_text(call.get("args")),
            call_id=safe_id("call", raw),
            name=label(str(call.get("name") or "tool")) or "tool",
            status="running",
        )
        self.tools[raw] = item
        return item

    async def finish(self) -> None:
        """Every streamed reply made final."""
        for item in self.replies.values():
            if not item.item.final:
                with contextlib.suppress(Exception):
                    await item.finish()

    async def final_state(self, values: Any) -> None:
        """A graph with no messages: its final state's text."""
        if isinstance(values, dict) and isinstance(values.get("messages"), list):
            return
        if isinstance(values, dict):
            texts = [v for v in values.values() if isinstance(v, str)]
            text = "\n".join(texts) if texts else json.dumps(values, default=str, indent=1)
        else:
            text = str(values)
        if text:
            await self.conv.append(kind="reply", text=cut(text, OUTPUT_LIMIT))
