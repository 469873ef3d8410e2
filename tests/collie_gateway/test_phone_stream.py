"""The phone's live stream ``GET /api/v1/events`` against SDK agents on real sockets: it carries
every change of a list or a chat, and a phone that reconnects with ``Last-Event-ID`` misses
nothing (or is told to ``reset``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient

from collie_gateway.core.mirror import LinkState
from collie_gateway.gateway import Gateway
from collie_gateway.http import routes
from collie_gateway.sources import Source
from collie_gateway.store.mirrors import MirrorBatches
from tests.collie_gateway.conftest import Rig, eventually, get_json, post_json
from wire.agent import Agent, ConversationHandle, SendMessage
from wire.sse import SSEParser

Client = TestClient[Any, Any]
CHAT = "/api/v1/agents/desk/conversations/c1"
FEATURES = ["history", "stop", "close", "reopen"]


@dataclass(frozen=True)
class Event:
    id: str
    type: str
    data: Any

    @property
    def seq(self) -> int:
        return int(self.id.rsplit("-", 1)[1])


class Phone:
    """One phone on the live stream; its events are read in the background."""

    def __init__(self, resp: ClientResponse) -> None:
        self.resp = resp
        self.events: list[Event] = []
        self.hello: dict[str, Any] | None = None
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, client: Client, last_event_id: str | None = None) -> Phone:
        headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else {}
        resp = await client.get("/api/v1/events", headers=headers)
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream"
        phone = cls(resp)
        await eventually(lambda: phone.hello is not None)
        return phone

    async def _read(self) -> None:
        parser = SSEParser()
        async for chunk in self.resp.content.iter_any():
            for sse in parser.feed(chunk):
                data = json.loads(sse.data)
                if sse.event == "stream":
                    self.hello = data
                else:
                    assert sse.id is not None
                    self.events.append(Event(sse.id, sse.event, data))

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.resp.close()

    def of(self, type_: str) -> list[Any]:
        return [e.data for e in self.events if e.type == type_]

    async def wait_for(self, type_: str, check: Callable[[Any], bool] = lambda _: True) -> Any:
        """The first event of ``type_`` that passes ``check``, once it came."""
        await eventually(lambda: any(check(d) for d in self.of(type_)))
        return next(d for d in self.of(type_) if check(d))

    @property
    def last_id(self) -> str:
        return self.events[-1].id


async def start(rig: Rig, **settings: Any) -> tuple[Client, Gateway, Agent, ConversationHandle]:
    agent = rig.agent("desk", runtime="desk", features=FEATURES)
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Notes")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], **settings)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return client, gw, agent, conv


async def test_stream_carries_every_change_of_a_list_and_a_chat(rig: Rig) -> None:
    client, _gw, agent, conv = await start(rig)
    release = asyncio.Event()

    @agent.on_message
    async def turn(handle: ConversationHandle, msg: SendMessage) -> None:
        await release.wait()

    await get_json(client, CHAT)  # the phone shows the chat: it is kept live
    phone = await Phone.connect(client)
    assert phone.hello is not None
    assert phone.hello["stream_id"].startswith("s-")

    # A conversation opens: its row, the dashboard's counts, the closed rows read again.
    other = await agent.open_conversation("c2", title="Plans")
    row = await phone.wait_for("list.row", lambda d: d["row"]["conversation_id"] == "c2")
    assert (row["agent"], row["row"]["title"]) == ("desk", "Plans")
    dash = await phone.wait_for("dashboard.row", lambda d: d["right"].get("open") == 2)
    assert dash["agent"] == "desk"
    await phone.wait_for("list.changed")

    # The chat: an item, its deltas, its final text.
    item = await conv.append(kind="reply", final=False)
    appended = await phone.wait_for("chat.item", lambda d: d["item"]["id"] == item.id)
    assert (appended["conversation_id"], appended["item"]["final"]) == ("c1", False)
    await item.delta("Hel")
    await item.delta("lo ")  # a word shows once it ends (X1: it may be a secret's start)
    await eventually(
        lambda: (
            "".join(d["text"] for d in phone.of("chat.delta") if d["item_id"] == item.id)
            == "Hello "
        )
    )
    await item.finish()
    final = await phone.wait_for(
        "chat.item", lambda d: d["item"]["id"] == item.id and d["item"].get("final", True)
    )
    assert final["item"]["text"] == "Hello "

    # The conversation changes: its row and its chat's header.
    await conv.update(title="Notes, sorted")
    await phone.wait_for("list.row", lambda d: d["row"]["title"] == "Notes, sorted")
    changed = await phone.wait_for(
        "chat.changed", lambda d: d["header"]["title"] == "Notes, sorted"
    )
    assert changed["conversation_id"] == "c1"

    # An ask: the row waits, the dashboard counts it, the chat shows its card.
    ask = await conv.ask(kind="text", id="q1", title="Which folder?")
    waiting = await phone.wait_for("list.row", lambda d: d["row"]["waiting"])
    assert (waiting["row"]["line"], waiting["row"]["open_asks"]) == ("Which folder?", 1)
    await phone.wait_for("dashboard.row", lambda d: d["right"].get("waiting") == 1)
    await phone.wait_for("chat.changed", lambda d: len(d["cards"]["cards"]) == 1)
    await ask.decide()
    await phone.wait_for("chat.note", lambda d: d["note"]["kind"] == "receipt")

    # The person's message: its echo, the dots, and a stop's note.
    await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Go"})
    echo = await phone.wait_for("chat.item", lambda d: d["item"]["kind"] == "user")
    assert echo["item"]["request_id"] == "m1"
    working = await phone.wait_for("chat.changed", lambda d: d["dots"] and d["turn"] == 1)
    stop = working["bar"]["controls"][0]
    assert (stop["label"], stop["tappable"]) == ("Stop", True)
    await post_json(client, CHAT + "/stop", {"request_id": "s1", "turn": 1})
    note = await phone.wait_for("chat.note", lambda d: d["note"]["kind"] == "stopped")
    assert (note["conversation_id"], note["note"]["text"]) == ("c1", "stopped")

    # A conversation closes: its row goes, the closed rows are read again and hold it.
    count = len(phone.of("list.changed"))
    await other.close()
    gone = await phone.wait_for("list.removed")
    assert gone == {"agent": "desk", "conversation_id": "c2"}
    await eventually(lambda: len(phone.of("list.changed")) > count)
    listing = phone.of("list.changed")[-1]
    assert [r["conversation_id"] for r in listing["closed"]] == ["c2"]
    assert [r["conversation_id"] for r in listing["rows"]] == ["c1"]

    seqs = [e.seq for e in phone.events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # numbered, none skipped
    await phone.close()


async def test_a_reply_streamed_token_by_token_reaches_every_phone_whole(rig: Rig) -> None:
    """Issue 16: deltas sent one by one reach ten phones with the reply's exact text, as
    fewer events than deltas (a busy stream is read a frame at a time and its deltas
    merged), and they do not wake the gateway's store (they change no stored row)."""
    client, gw, _agent, conv = await start(rig)
    await get_json(client, CHAT)
    phones = [await Phone.connect(client) for _ in range(10)]
    item = await conv.append(kind="reply", final=False)
    await phones[0].wait_for("chat.item", lambda d: d["item"]["id"] == item.id)
    await gw.mirrors_repo.flush()
    words = [f"w{n} " for n in range(150)]
    for word in words:
        await item.delta(word)
        await asyncio.sleep(0.003)  # past the agent's group commit: one commit, one write each

    def text(phone: Phone) -> str:
        return "".join(d["text"] for d in phone.of("chat.delta") if d["item_id"] == item.id)

    await eventually(lambda: all(text(p) == "".join(words) for p in phones))
    assert isinstance(gw.mirrors_repo, MirrorBatches)
    assert not gw.mirrors_repo._dirty_agents  # no stored row changed, no flush was asked for
    for phone in phones:
        assert len(phone.of("chat.delta")) < len(words) * 3 / 4
        await phone.close()
    await item.finish()


async def test_reconnect_with_last_event_id_misses_nothing(rig: Rig) -> None:
    client, gw, agent, conv = await start(rig)
    await get_json(client, CHAT)
    steady = await Phone.connect(client)  # never disconnects: the reference
    phone = await Phone.connect(client)

    async def changes(tag: str) -> None:
        item = await conv.append(kind="reply", final=False)
        for piece in ("a", "b", "c"):
            await item.delta(f"{tag}{piece} ")
        await item.finish()
        await conv.update(subtitle=f"after {tag}")
        extra = await agent.open_conversation(f"x-{tag}", title=tag)
        await extra.close()

    await changes("one")
    await eventually(lambda: len(phone.events) >= 4)
    await phone.close()
    last = phone.last_id
    before = list(phone.events)
    await changes("two")  # while the phone is away
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].subtitle == "after two")
    again = await Phone.connect(client, last_event_id=last)
    await changes("three")  # live again
    await conv.update(title="marker")

    def has_marker(p: Phone) -> bool:
        return any(e.type == "list.row" and e.data["row"]["title"] == "marker" for e in p.events)

    await eventually(lambda: has_marker(again) and has_marker(steady))
    await asyncio.sleep(0.1)  # anything after the marker reaches both phones
    got = before + again.events
    assert "reset" not in [e.type for e in got]
    assert [e.seq for e in got] == list(range(got[0].seq, got[0].seq + len(got)))  # once, in order
    assert got == steady.events  # every change, exactly once, as a phone that never left saw it
    types = {e.type for e in again.events}
    assert {"chat.item", "chat.delta", "list.row", "list.removed", "list.changed"} <= types
    await steady.close()
    await again.close()


async def test_reset_for_an_id_from_another_boot(rig: Rig) -> None:
    client, _gw, _agent, conv = await start(rig)
    phone = await Phone.connect(client)
    await conv.update(title="Renamed")
    await phone.wait_for("list.row")
    old_boot_id = phone.last_id
    await phone.close()
    assert rig.client is not None
    await rig.client.close()  # the gateway restarts: a new boot
    client2, gw2 = await rig.gateway([Source(name="desk", socket=rig.sockets["desk"])])
    await eventually(lambda: gw2.mirrors["desk"].state is LinkState.READY)
    back = await Phone.connect(client2, last_event_id=old_boot_id)
    await eventually(lambda: bool(back.events))
    assert back.events[0].type == "reset"
    await back.close()
    for stale in ("garbage", f"{gw2.bus.boot}-999999", f"{gw2.bus.boot}-x"):
        other = await Phone.connect(client2, last_event_id=stale)
        await eventually(lambda other=other: bool(other.events))
        assert other.events[0].type == "reset", stale
        await other.close()
    fresh = await Phone.connect(client2)  # no id: a new phone, nothing to reset
    await conv.update(title="Again")
    await fresh.wait_for("list.row")
    assert "reset" not in [e.type for e in fresh.events]
    await fresh.close()


async def test_reset_for_a_phone_that_fell_out_of_the_ring(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig, phone_ring=5)
    phone = await Phone.connect(client)
    await conv.update(title="t0")
    await phone.wait_for("list.row")
    last = phone.last_id
    await phone.close()
    for n in range(1, 8):  # one by one: changes read together are published as one
        await conv.update(title=f"t{n}")
        await eventually(lambda n=n: gw.mirrors["desk"].conversations["c1"].title == f"t{n}")
    back = await Phone.connect(client, last_event_id=last)
    await eventually(lambda: bool(back.events))
    assert back.events[0].type == "reset"  # older than the ring keeps: read the screens again
    await back.close()


async def test_a_quiet_stream_is_pinged_and_a_busy_one_is_not(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `: ping` comes after PING_SECONDS of silence on the stream, and not while events come
    more often than that (issue 16: one ping timer a stream, not one per wait)."""
    monkeypatch.setattr(routes, "PING_SECONDS", 0.3)
    client, _gw, _agent, conv = await start(rig)
    resp = await client.get("/api/v1/events")
    seen: list[tuple[float, bytes]] = []
    loop = asyncio.get_running_loop()

    async def read() -> None:
        async for chunk in resp.content.iter_any():
            seen.append((loop.time(), chunk))

    reader = asyncio.create_task(read())
    try:
        await eventually(lambda: any(b": ping\n\n" in c for _, c in seen))  # quiet: pinged
        busy_from = loop.time()
        for n in range(12):  # an event every 0.1 s for 1.2 s: never 0.3 s of silence
            await conv.update(subtitle=f"busy {n}")
            await asyncio.sleep(0.1)
        busy = [c for t, c in seen if busy_from + 0.05 < t < loop.time() - 0.05]
        assert busy
        assert not any(b": ping" in c for c in busy)
        quiet_from = loop.time()
        await eventually(lambda: any(t > quiet_from and b": ping\n\n" in c for t, c in seen))
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        resp.close()


async def test_a_phone_that_stops_reading_gets_every_event_once_in_order(rig: Rig) -> None:
    """Events go straight to a phone's connection while it keeps up; one that stops reading
    (its connection full) gets the rest from its stream's reader: when it reads again, every
    event is there, once, in order."""
    client, gw, _agent, _conv = await start(rig)
    reader, writer = await asyncio.open_connection(client.host, client.port, limit=2**24)
    writer.write(b"GET /api/v1/events HTTP/1.1\r\nHost: phone\r\n\r\n")
    await reader.readuntil(b"event: stream\n")  # the stream is open: the phone stops reading
    base = gw.bus.last_id
    filler = "x" * 20_000
    for n in range(300):  # ~6 MB: more than the sockets hold
        gw.bus.publish("bench.note", {"n": n, "filler": filler})
        if n % 20 == 0:
            await asyncio.sleep(0)  # the streams are written as events come
    parser = SSEParser(max_data=2**20)
    seen: list[tuple[str | None, int]] = []
    try:
        async with asyncio.timeout(20):
            while len(seen) < 300:
                for sse in parser.feed(await reader.read(2**16)):
                    if sse.event == "bench.note":
                        seen.append((sse.id, json.loads(sse.data)["n"]))
    finally:
        writer.close()
    first = int(base.rsplit("-", 1)[1])
    assert seen == [(f"{gw.bus.boot}-{first + 1 + n}", n) for n in range(300)]


async def test_a_phone_that_dies_mid_stream_leaves_the_others_whole(rig: Rig) -> None:
    """A phone whose connection is torn down (an RST, no goodbye) while events are written
    straight to it is dropped from the bus; another phone's stream gets every event, once,
    in order."""
    client, gw, _agent, _conv = await start(rig)
    dying_reader, dying = await asyncio.open_connection(client.host, client.port)
    dying.write(b"GET /api/v1/events HTTP/1.1\r\nHost: phone\r\n\r\n")
    await dying_reader.readuntil(b"event: stream\n")
    phone = await Phone.connect(client)
    await eventually(lambda: gw.bus.subscribers == 2)
    base = gw.bus.last_id
    for n in range(200):
        if n == 50:  # torn down mid-stream: SO_LINGER 0 sends an RST
            sock = dying.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            dying.transport.abort()
        gw.bus.publish("bench.note", {"n": n})
        if n % 10 == 0:
            await asyncio.sleep(0.01)  # the streams are written as events come
    await eventually(lambda: len(phone.of("bench.note")) == 200)
    await eventually(lambda: gw.bus.subscribers == 1)  # the dead phone's stream ended
    first = int(base.rsplit("-", 1)[1])
    got = [(e.id, e.data["n"]) for e in phone.events if e.type == "bench.note"]
    assert got == [(f"{gw.bus.boot}-{first + 1 + n}", n) for n in range(200)]
    await phone.close()
