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

from importlib import import_module
from typing import TYPE_CHECKING

from wire.messages import (
    Answer,
    Argument,
    Button,
    FormField,
    NoticePush,
    Option,
    Progress,
    SendMessage,
    Starter,
    Step,
    ToolRef,
    Words,
)

if TYPE_CHECKING:
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

# The SDK's shell loads on first use of its names, so its pure decisions (``_rules``) import
# no I/O with the package.
_SHELL = {
    "Agent": "_agent",
    "AskHandle": "_agent",
    "ButtonHandler": "_agent",
    "ConversationHandle": "_agent",
    "ItemHandle": "_agent",
    "MessageHandler": "_agent",
    "ReplyHandler": "_agent",
    "Resolution": "_agent",
    "StartHandler": "_agent",
    "AgentRunner": "_server",
}

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
    "NoticePush",
    "Option",
    "Progress",
    "ReplyHandler",
    "Resolution",
    "SendMessage",
    "StartHandler",
    "Starter",
    "Step",
    "ToolRef",
    "Words",
]


def __getattr__(name: str) -> object:
    home = _SHELL.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # once: later reads skip this hook
    return value
