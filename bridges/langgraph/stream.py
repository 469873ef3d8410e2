"""One leg of a thread shown in its conversation: AI message chunks as ``reply`` deltas, tool
calls and tool messages as ``tool`` items. A message is a LangChain message (in-process) or
its JSON form (an Agent Server's stream): both read alike here."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from bridges.kit.fit import cut, label, safe_id, tool_text
from wire.agent import ConversationHandle, ItemHandle

OUTPUT_LIMIT = 20_000  # characters of a tool's result kept as its item's output


def field(message: Any, name: str, default: Any = None) -> Any:
    """A message's ``name``, from an object or its JSON form."""
    if isinstance(message, dict):
        return message.get(name, default)
    return getattr(message, name, default)


def text_of(message: Any) -> str:
    """A message's text (its text blocks joined)."""
    if not isinstance(message, dict):
        return str(getattr(message, "text", "") or "")
    content = message.get("content")
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else []
    return "".join(
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in blocks
        if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
    )


def reply_id(message_id: str) -> str | None:
    """The id of the reply item of the AI message ``message_id`` (a message is shown once);
    ``None`` for a message without an id."""
    return safe_id("m", message_id) if message_id not in ("", "None") else None


class Stream:
    """One leg's output in a conversation."""

    def __init__(self, conv: ConversationHandle) -> None:
        self.conv = conv
        self.replies: dict[str, ItemHandle] = {}
        self.tools: dict[str, ItemHandle] = {}
        self.said = False

    def shown(self, item_id: str | None) -> bool:
        """Whether the conversation has the item ``item_id`` already."""
        return item_id is not None and any(item.id == item_id for item in self.conv.items)

    async def chunk(self, message: Any) -> None:
        """A chunk of an AI message: a delta of its reply."""
        if field(message, "type", "") not in ("ai", "AIMessageChunk"):
            return
        text = text_of(message)
        if not text:
            return
        key = str(field(message, "id"))
        item = self.replies.get(key)
        if item is None:
            item = await self.conv.append(kind="reply", final=False, id=reply_id(key))
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
        kind = field(message, "type", "")
        if kind == "ai":
            text = text_of(message)
            key = str(field(message, "id"))
            if text and key not in self.replies and not self.shown(reply_id(key)):
                self.replies[key] = await self.conv.append(
                    kind="reply", text=text, id=reply_id(key)
                )
                self.said = True
            for call in field(message, "tool_calls") or []:
                if not self.earlier(call.get("id") or call.get("name")):
                    await self.tool_call(call)
        elif kind == "tool":
            call_id = field(message, "tool_call_id")
            item = self.tools.get(str(call_id)) or self.earlier(call_id)
            if item is None:
                item = await self.tool_call({"id": call_id, "name": field(message, "name")})
            elif item.item.status in ("done", "failed"):
                return  # shown before (a thread read again)
            failed = field(message, "status", "success") == "error"
            content = field(message, "content")
            output = content if isinstance(content, str) else json.dumps(content, default=str)
            await item.update(
                status="failed" if failed else "done", output=cut(output, OUTPUT_LIMIT)
            )
            self.said = True

    def earlier(self, raw: object) -> ItemHandle | None:
        """The tool item of an earlier leg (before the interrupt, or before the bridge went)
        for the call ``raw``."""
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

    async def history(self, messages: list[Any]) -> None:
        """Whole messages of the thread that the conversation may lack (made while the bridge
        was away, or before it listed the thread): each shown once."""
        for message in messages:
            await self.message(message)

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
