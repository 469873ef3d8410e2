"""A LangGraph Agent Server as the threads' home (``langgraph-sdk``): runs live on the server
and survive the bridge; the bridge reads each thread's state there, starts its runs, resumes
its interrupts with an id-keyed ``Command`` and cancels a run on Stop."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

from bridges.kit.fit import label
from bridges.langgraph.backend import Snapshot, Thread, deadline_of
from bridges.langgraph.mapping import Pending

LISTED = 100  # threads listed at most, the latest first
LEG = "collie_leg"  # a run's metadata: the mark of the leg the bridge started
STREAMED = ["messages-tuple", "updates"]
_UUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")


class ServerError(RuntimeError):
    """The server ended a run with an error event."""


class Server:
    """Threads of one assistant (an assistant id, or a graph id: its default assistant) on
    an Agent Server at ``url``."""

    stoppable: bool = True
    shared: bool = True

    def __init__(self, url: str, assistant: str, poll: float | None = 5.0) -> None:
        self.url, self.assistant, self.poll = url, assistant, poll
        self.runtime = assistant
        self.deadline: float | None = None
        self.graph_id = assistant
        self.running: dict[str, str] = {}  # thread → the run this bridge streams
        self.legs: dict[str, str] = {}  # thread → the mark of that run, known before its id
        self.client: Any = None

    async def open(self) -> None:
        """Reach the server; the assistant's configuration names the deadline, if any.

        Raises:
            OSError: the server cannot be reached, or has no such assistant.
        """
        from langgraph_sdk import get_client

        self.client = get_client(url=self.url, api_key=None)
        try:
            found = await self._assistant()
        except Exception as exc:  # httpx's errors: the server is not there
            raise OSError(f"{self.url}: {exc}") from exc
        if found is None:
            raise OSError(f"{self.url} has no assistant or graph {self.assistant!r}")
        self.graph_id = str(found.get("graph_id") or self.assistant)
        self.deadline = deadline_of(found.get("config"))

    async def _assistant(self) -> dict[str, Any] | None:
        if _UUID.match(self.assistant):
            return dict(await self.client.assistants.get(self.assistant))
        found = await self.client.assistants.search(graph_id=self.assistant, limit=10)
        system = [a for a in found if (a.get("metadata") or {}).get("created_by") == "system"]
        return dict((system or found)[0]) if found else None

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    async def threads(self) -> list[Thread]:
        found = await self.client.threads.search(
            metadata={"graph_id": self.graph_id}, limit=LISTED, sort_by="updated_at"
        )
        return [Thread(str(t["thread_id"]), _title(t)) for t in found]

    async def new_thread(self) -> str | None:
        made = await self.client.threads.create(metadata={"graph_id": self.graph_id})
        return str(made["thread_id"])

    async def snapshot(self, thread: str) -> Snapshot:
        """The thread's state on the server; a thread deleted there has nothing waiting."""
        from langgraph_sdk.errors import NotFoundError

        try:
            state = await self.client.threads.get_state(thread)
            status = (await self.client.threads.get(thread)).get("status")
        except NotFoundError:
            return Snapshot({}, [])
        raw = list(state.get("interrupts") or [])
        for task in state.get("tasks") or []:
            raw += task.get("interrupts") or []
        pending: dict[str, Pending] = {}
        for i in raw:
            schema = i.get("response_schema")
            iid = str(i.get("id"))
            pending.setdefault(
                iid, Pending(iid, i.get("value"), schema if isinstance(schema, dict) else None)
            )
        mark = state.get("checkpoint_id") or (state.get("checkpoint") or {}).get("checkpoint_id")
        return Snapshot(state.get("values"), list(pending.values()), status == "busy", mark)

    async def stream(
        self, thread: str, given: Any, resume: dict[str, Any] | None
    ) -> AsyncIterator[tuple[str, Any]]:
        """One run streamed; it goes on on the server if the bridge goes (``on_disconnect``),
        and is refused while another run of the thread is going (``multitask_strategy``). Its
        metadata marks it as this leg: the server says its id only once the run starts."""
        self.legs[thread] = mark = uuid.uuid4().hex
        parts = self.client.runs.stream(
            thread,
            self.assistant,
            input=given if resume is None else None,
            command={"resume": resume} if resume is not None else None,
            stream_mode=STREAMED,
            metadata={LEG: mark},
            on_disconnect="continue",
            multitask_strategy="reject",
        )
        async for part in parts:  # a Stop cancels here, the run's id still known
            if part.event == "metadata" and isinstance(part.data, dict):
                self.running[thread] = str(part.data.get("run_id"))
            elif part.event == "messages" and isinstance(part.data, list) and part.data:
                yield "messages", part.data[0]
            elif part.event == "updates" and isinstance(part.data, dict):
                yield "updates", part.data
            elif part.event == "error":
                self._ended(thread)
                data = part.data if isinstance(part.data, dict) else {}
                raise ServerError(str(data.get("message") or data.get("error") or part.data))
        self._ended(thread)

    def _ended(self, thread: str) -> None:
        self.running.pop(thread, None)
        self.legs.pop(thread, None)

    async def cancel(self, thread: str) -> None:
        """Cancel the leg this bridge streams: its run, by the id the stream said, or, while
        the run still waits in the server's queue (its id not said yet), found by its mark."""
        run, mark = self.running.pop(thread, None), self.legs.pop(thread, None)
        if run is None and mark is not None:
            found = await self.client.runs.list(thread, limit=10)  # the newest first
            marked = (r for r in found if (r.get("metadata") or {}).get(LEG) == mark)
            run = next((str(r["run_id"]) for r in marked), None)
        if run is not None:
            await self.client.runs.cancel(thread, run)


def _title(thread: dict[str, Any]) -> str:
    """A listed thread's title: its first human message, else its id's start."""
    values = thread.get("values")
    messages = values.get("messages") if isinstance(values, dict) else None
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("type") == "human":
            content = message.get("content")
            if isinstance(content, str) and label(content):
                return label(content)
    return f"Thread {str(thread['thread_id'])[:8]}"
