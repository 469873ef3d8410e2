"""Test helpers for the chat path: a wire-v1 agent of the tests' own that misbehaves as a
foreign agent may (its event log cut or lost, its streams dropped, raw control characters in
its text), and a phone that follows one chat the way the app does: a read, then the live
stream with ``Last-Event-ID``, reading again on ``chat.reload`` or ``reset``."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from wire.sse import SSEParser

Client = TestClient[Any, Any]
UPDATED_AT = "2026-12-02T12:00:00Z"


class LogAgent:
    """Conversations of items (``c1``, and any others named); every change is an event in
    its log. ``cut_log`` forgets every event kept (a reader behind it gets ``reset``),
    ``lose_log`` also starts the ids again from 1 (its store was lost), ``drop_streams`` ends
    every open ``/events``, ``go_silent`` keeps every open ``/events`` open but sends nothing
    more on it, not even a ping (a stream stalled midway)."""

    def __init__(self, features: list[str] | None = None, others: tuple[str, ...] = ()) -> None:
        self.features = features or []
        self.convs: dict[str, list[dict[str, Any]]] = {c: [] for c in ("c1", *others)}
        self.items = self.convs["c1"]
        self.ids: list[int] = []  # the ids of the events kept, oldest first
        self.frames: list[bytes] = []
        self.next_id = 1
        self.generation = 0
        self.wake = asyncio.Event()
        self.resets = 0  # how many ``reset`` events it sent
        self.streams = 0  # how many ``/events`` it answered
        self.silent_upto = 0  # the streams up to this one send nothing more
        self._runner: web.AppRunner | None = None

    # --- what the agent does ----------------------------------------------------------------

    def emit(self, event: dict[str, Any]) -> None:
        event_id = self.next_id
        self.next_id += 1
        data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
        self.ids.append(event_id)
        self.frames.append(f"id: {event_id}\nevent: {event['type']}\ndata: {data}\n\n".encode())
        self.wake.set()
        self.wake = asyncio.Event()

    def append(
        self, kind: str = "reply", text: str = "", *, final: bool = False, conv: str = "c1"
    ) -> str:
        items = self.convs[conv]
        item = {"id": f"i{len(items)}", "kind": kind, "text": text, "final": final}
        items.append(item)
        self.emit({"type": "item.appended", "conversation_id": conv, "item": dict(item)})
        return str(item["id"])

    def delta(self, item_id: str, text: str, conv: str = "c1") -> None:
        item = next(i for i in self.convs[conv] if i["id"] == item_id)
        item["text"] += text
        self.emit({"type": "item.delta", "conversation_id": conv, "item_id": item_id, "text": text})

    def finish(self, item_id: str, conv: str = "c1") -> None:
        item = next(i for i in self.convs[conv] if i["id"] == item_id)
        item["final"] = True
        self.emit({"type": "item.updated", "conversation_id": conv, "item": dict(item)})

    def cut_log(self) -> None:
        self.ids.clear()
        self.frames.clear()

    def lose_log(self) -> None:
        self.cut_log()
        self.next_id = 1

    def go_silent(self) -> None:
        self.silent_upto = self.streams
        self.wake.set()
        self.wake = asyncio.Event()

    def drop_streams(self) -> None:
        self.generation += 1
        self.wake.set()
        self.wake = asyncio.Event()

    # --- the wire ------------------------------------------------------------------------------

    def _conversation(self, conv_id: str, *, items: bool) -> dict[str, Any]:
        conv: dict[str, Any] = {"id": conv_id, "title": "Notes", "updated_at": UPDATED_AT}
        if items:
            conv["items"] = self.convs[conv_id]
        return conv

    async def handle(self, request: web.Request) -> web.StreamResponse:
        newest = {"Wire-Event-Id": str(self.next_id - 1)}
        if request.path == "/hello":
            return web.json_response({"wire": 1, "runtime": "log", "features": self.features})
        if request.path == "/conversations":
            page = {"conversations": [self._conversation(c, items=False) for c in self.convs]}
            return web.json_response(page, headers=newest)
        conv_id = request.path.removeprefix("/conversations/")
        if conv_id in self.convs:
            return web.json_response(self._conversation(conv_id, items=True), headers=newest)
        if request.path == "/events":
            return await self._events(request)
        return web.json_response({"error": "not_found", "message": "no such path"}, status=404)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        self.streams += 1
        number = self.streams
        generation = self.generation
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        after = self.next_id - 1
        raw = request.headers.get("Last-Event-ID")
        if raw is not None:
            oldest = self.ids[0] if self.ids else self.next_id
            if raw.isdigit() and oldest - 1 <= int(raw) <= self.next_id - 1:
                after = int(raw)
            else:
                self.resets += 1
                await resp.write(b'event: reset\ndata: {"type":"reset"}\n\n')
        with contextlib.suppress(ConnectionError):
            while generation == self.generation:
                wake = self.wake
                if number <= self.silent_upto:
                    await wake.wait()  # until dropped (or the reader goes away)
                    continue
                at = bisect.bisect_right(self.ids, after)
                if at < len(self.ids):
                    await resp.write(b"".join(self.frames[at:]))
                    after = self.ids[-1]
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await wake.wait()
                if generation == self.generation and not wake.is_set():
                    await resp.write(b": ping\n\n")
        return resp

    async def serve(self, path: Path) -> None:
        """Serve on ``path`` (a Unix socket) until ``stop``."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.05)
        await self._runner.setup()
        await web.UnixSite(self._runner, str(path)).start()

    async def stop(self) -> None:
        """Stop serving: every stream ends, every connection goes (a restart or a crash)."""
        self.drop_streams()
        await asyncio.sleep(0.01)  # the streams end first, so every connection closes whole
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


def seq(event_id: str) -> int:
    """The sequence number of a gateway stream id ``<boot>-<seq>``."""
    return int(event_id.rsplit("-", 1)[1])


class PhoneChat:
    """A phone showing one chat: it reads it, then follows ``GET /api/v1/events`` from the
    read's ``event_id``, applying ``chat.item`` and ``chat.delta``; on ``chat.reload`` or
    ``reset`` it reads the chat again. ``reconnect`` drops its stream and resumes with
    ``Last-Event-ID``."""

    def __init__(self, client: Client, path: str, agent: str = "desk", conv: str = "c1") -> None:
        self.client = client
        self.path = path
        self.key = (agent, conv)
        self.lines: dict[str, dict[str, Any]] = {}
        self.after = 0
        self.last_id: str | None = None
        self.reads = 0
        self.reloads = 0
        self.events = 0
        self.reconnects = 0
        self.misses = 0
        self.missed: list[str] = []  # what each miss was, for the failure's message
        self._task: asyncio.Task[None] | None = None

    async def read(self) -> None:
        """Read the chat, again until the gateway answers (the agent may be restarting)."""
        while True:
            resp = await self.client.get(self.path)
            if resp.status == 200:
                view = await resp.json()
                break
            await asyncio.sleep(0.02)
        self.reads += 1
        self.lines = {line["id"]: line for line in view["lines"]}
        self.after = seq(view["event_id"])
        if self.last_id is None:
            self.last_id = view["event_id"]

    async def start(self) -> None:
        await self.read()
        self._task = asyncio.create_task(self._follow())

    async def reconnect(self) -> None:
        await self.stop()
        self.reconnects += 1
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _follow(self) -> None:
        headers = {"Last-Event-ID": self.last_id} if self.last_id else {}
        async with self.client.get("/api/v1/events", headers=headers) as resp:
            parser = SSEParser()
            async for chunk in resp.content.iter_any():
                for sse in parser.feed(chunk):
                    if sse.id is None:
                        continue  # the stream's hello
                    await self._apply(sse.id, sse.event, json.loads(sse.data))
                    self.last_id = sse.id  # applied whole: resume after it

    async def _apply(self, event_id: str, kind: str, data: dict[str, Any]) -> None:
        if kind == "reset":
            await self.read()
            return
        if seq(event_id) <= self.after:
            return  # the last read holds it
        if (data.get("agent"), data.get("conversation_id")) != self.key:
            return
        self.events += 1
        if kind == "chat.item":
            line = data["item"]
            self.lines[line["id"]] = line
        elif kind == "chat.delta":
            line = self.lines.get(data["item_id"])
            if line is None:
                self.misses += 1  # a delta for a line the phone never got: a bug
                self.missed.append(
                    f"{event_id}: a delta to {data['item_id']} after the read at {self.after}"
                    f" showing {list(self.lines)} (reads {self.reads}, reloads {self.reloads},"
                    f" reconnects {self.reconnects})"
                )
                return
            line["text"] = line.get("text", "") + data["text"]
            if data.get("shortened"):
                line["shortened"] = data["shortened"]
        elif kind == "chat.reload":
            self.reloads += 1
            await self.read()

    def shown(self) -> list[tuple[str, str, bool, str | None]]:
        """Each agent line as the phone shows it: id, text (or html), final, shortened."""
        return [
            (
                line["id"],
                line.get("text") or line.get("html") or "",
                line.get("final", True),
                line.get("shortened"),
            )
            for line in self.lines.values()
            if not line["id"].startswith("pending:")
        ]


def shown(view: dict[str, Any]) -> list[tuple[str, str, bool, str | None]]:
    """The same as ``PhoneChat.shown`` for a chat read by ``GET``."""
    return [
        (
            line["id"],
            line.get("text") or line.get("html") or "",
            line.get("final", True),
            line.get("shortened"),
        )
        for line in view["lines"]
        if not line["id"].startswith("pending:")
    ]
