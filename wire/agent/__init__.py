"""The SDK for writing a durable agent that speaks wire v1 (this part does I/O: aiohttp, SQLite).

Usage::

    from wire.agent import Agent, ConversationHandle, SendMessage

    agent = Agent(runtime="desk", features=["history", "stop"], state_path=Path("desk.db"))

    @agent.on_message
    async def turn(conv: ConversationHandle, msg: SendMessage) -> None:
        await conv.append(kind="reply", text="Noted.")

    agent.run(socket=Path("desk.sock"))
"""

from __future__ import annotations

from wire.agent._agent import (
    Agent,
    AskHandle,
    ButtonHandler,
    ConversationHandle,
    ItemHandle,
    MessageHandler,
    ReplyHandler,
    Resolution,
    StartHandler,
)
from wire.agent._server import AgentRunner
from wire.messages import (
    Answer,
    Argument,
    Button,
    FormField,
    Option,
    Progress,
    SendMessage,
    Starter,
    Step,
    ToolRef,
)

__all__ = [
    "Agent",
    "AgentRunner",
    "Answer",
    "Argument",
    "AskHandle",
    "Button",
    "ButtonHandler",
    "ConversationHandle",
    "FormField",
    "ItemHandle",
    "MessageHandler",
    "Option",
    "Progress",
    "ReplyHandler",
    "Resolution",
    "SendMessage",
    "StartHandler",
    "Starter",
    "Step",
    "ToolRef",
]
