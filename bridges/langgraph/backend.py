"""Where a thread lives, behind one small protocol: ``Backend``. The bridge
(``bridges.langgraph.bridge``) holds the agent-facing logic; a backend reads a thread's
state and runs its legs: ``InProcess`` (the graph imported and run here, on a SQLite
checkpointer of its own) or ``bridges.langgraph.server.Server`` (a LangGraph Agent Server).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from bridges.langgraph.mapping import Pending

DEADLINE_KEY = "collie_deadline_s"  # in the graph's configuration's "configurable"


@dataclass(frozen=True)
class Thread:
    """A thread that exists already: its id and the title its conversation gets."""

    id: str
    title: str


class Snapshot(NamedTuple):
    """A thread as it is now: its state's values, its interrupts still waiting, and whether
    a run the bridge does not stream goes on (its interrupts may be on their way out)."""

    values: Any
    pending: list[Pending]
    busy: bool = False
    mark: str | None = None  # the checkpoint's id: another one, another state


class Backend(Protocol):
    """A thread's home. ``stream`` yields ``("messages", chunk)`` and ``("updates", {node:
    update})``, a message being a LangChain message or its JSON form."""

    runtime: str  # the hello's runtime
    stoppable: bool  # Stop cancels the running leg (the ``stop`` feature)
    shared: bool  # other clients run the threads too (their messages are shown on reading)
    poll: float | None  # seconds between two readings of every thread, if any
    deadline: float | None  # seconds an ask waits, if the graph's configuration names it

    async def open(self) -> None:
        """Reach the graph (import it, or the server); ``deadline`` is known after."""

    async def close(self) -> None:
        """Let go of the graph."""

    async def threads(self) -> list[Thread]:
        """The threads that exist already, to list as conversations."""

    async def new_thread(self) -> str | None:
        """A new thread's id (``None``: the conversation's id will do)."""

    async def snapshot(self, thread: str) -> Snapshot:
        """The thread as it is now."""

    def stream(
        self, thread: str, given: Any, resume: dict[str, Any] | None
    ) -> AsyncIterator[tuple[str, Any]]:
        """Run one leg: the input ``given``, or ``resume`` (an id-keyed map) if not None."""

    async def cancel(self, thread: str) -> None:
        """Cancel the thread's running leg (a Stop)."""


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


def deadline_of(config: object) -> float | None:
    """The seconds ``config["configurable"]["collie_deadline_s"]`` names, if a positive
    number."""
    configurable = config.get("configurable") if isinstance(config, dict) else None
    value = configurable.get(DEADLINE_KEY) if isinstance(configurable, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


class InProcess:
    """The graph imported and run in this process, on a SQLite checkpointer of its own, with
    ``durability="sync"``."""

    stoppable: bool = False  # a run in this process cannot be cancelled safely at any point
    shared: bool = False
    poll: float | None = None

    def __init__(self, graph: str, checkpoints: Path) -> None:
        self.spec, self.checkpoints = graph, checkpoints
        self.runtime = graph.rpartition(":")[2] or graph
        self.graph: Any = None
        self.deadline: float | None = None
        self._saver: Any = None
        self._saver_cm: Any = None

    async def open(self) -> None:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        graph = load(self.spec)
        self.deadline = deadline_of(getattr(graph, "config", None))
        self._saver_cm = AsyncSqliteSaver.from_conn_string(str(self.checkpoints))
        self._saver = await self._saver_cm.__aenter__()
        self.graph = graph.copy(update={"checkpointer": self._saver})

    async def close(self) -> None:
        if self._saver is not None:
            await self._saver_cm.__aexit__(None, None, None)
            self._saver = None

    def config(self, thread: str) -> dict[str, Any]:
        """The run's configuration for ``thread``."""
        return {"configurable": {"thread_id": thread}}

    async def threads(self) -> list[Thread]:
        return []  # every thread here was opened from the phone: its conversation exists

    async def new_thread(self) -> str | None:
        return None

    async def snapshot(self, thread: str) -> Snapshot:
        state = await self.graph.aget_state(self.config(thread))
        pending = [
            Pending(
                i.id, i.value, i.response_schema if isinstance(i.response_schema, dict) else None
            )
            for i in state.interrupts
        ]
        return Snapshot(state.values, pending)

    async def stream(
        self, thread: str, given: Any, resume: dict[str, Any] | None
    ) -> AsyncIterator[tuple[str, Any]]:
        from langgraph.types import Command

        async for mode, data in self.graph.astream(
            Command(resume=resume) if resume is not None else given,
            self.config(thread),
            stream_mode=["messages", "updates"],
            durability="sync",
        ):
            yield mode, data[0] if mode == "messages" else data

    async def cancel(self, thread: str) -> None:
        """Nothing more to do: the leg ran in the task that was cancelled, in this process,
        so it ended with it (no server holds a run). Stop itself is not offered
        (``stoppable``): a node's own work is not cut safely at any point."""
        return None
