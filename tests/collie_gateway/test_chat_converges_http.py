"""Nothing lost: a chat survives the agent's ``reset`` (its log cut or lost, wire §10 step 4),
and the live chat equals the reloaded chat (C2: one cleaning, one rendering for both paths).

Against an SDK agent where the SDK can do it (a log cut short, a stream refused), and against
an agent of the tests' own (``LogAgent``) where a foreign agent can do what the SDK never
does: lose its whole log and start its ids again, send raw control characters."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from collie_gateway.core.cleaning import ShownText
from collie_gateway.core.mirror import LinkState
from collie_gateway.sources import Source
from collie_gateway.views.chat import CHAT_TEXT_LIMIT
from tests.collie_gateway.chat_phone import Client, LogAgent, PhoneChat, shown
from tests.collie_gateway.conftest import Rig, eventually, get_json

CHAT = "/api/v1/agents/desk/conversations/c1"
SHORTENED = "Text shortened"


def cleaned(text: str) -> str:
    return ShownText.of(text, CHAT_TEXT_LIMIT).text


@contextlib.asynccontextmanager
async def log_agent_followed(rig: Rig) -> AsyncIterator[tuple[LogAgent, Client]]:
    """A ``LogAgent`` served, and a gateway following it (ready); the agent stops after."""
    agent = LogAgent()
    sock = rig.tmp / "log.sock"
    await agent.serve(sock)
    try:
        client, gw = await rig.gateway([Source(name="desk", socket=sock)])
        await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
        yield agent, client
    finally:
        await agent.stop()


# --- 1: a chat survives reset ---------------------------------------------------------------


async def test_wire_10_a_chat_survives_reset_sdk_agent(rig: Rig) -> None:
    """The issue's reproduction: "one two " is on the phone; ``/events`` answers 503 while
    the agent streams "LOST-1 ", "LOST-2 ", appends a reply and its log is cut; the gateway
    resumes with ``Last-Event-ID``, gets ``reset``, and reads the chat again."""
    refuse = {"events": False}

    @web.middleware
    async def events_503(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/events" and refuse["events"]:
            return web.json_response({"error": "unavailable", "message": "busy"}, status=503)
        return await handler(request)

    agent = rig.agent("desk", runtime="desk", keep_events=2, middlewares=[events_503])
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Notes")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    item = await conv.append(kind="reply", final=False)
    await item.delta("one two ")
    phone = PhoneChat(client, CHAT)

    async def phone_shows(text: str) -> bool:
        return bool(phone.shown() and phone.shown()[0][1] == text)

    await phone.start()
    await eventually(lambda: phone_shows("one two "))
    refuse["events"] = True
    await rig.runners.pop("desk").close()  # the stream drops; /events answers 503
    rig.runners["desk"] = await agent.serve_unix(sock)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.UNREACHABLE)
    await item.delta("LOST-1 ")
    await item.delta("LOST-2 ")
    await conv.append(kind="reply", text="A reply the phone must see")
    await conv.update(subtitle="past the log")  # the log keeps 2: the gateway's position is gone
    refuse["events"] = False
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    await item.delta("three")
    await item.finish()
    want = [
        ("i0", "one two LOST-1 LOST-2 three", True, None),
        ("i1", "A reply the phone must see", True, None),
    ]

    async def read_shows() -> bool:
        return shown(await get_json(client, CHAT)) == want

    await eventually(read_shows)
    await eventually(lambda: phone.shown() == want)
    assert phone.reloads >= 1  # told to read the chat again
    assert phone.misses == 0
    await phone.stop()


async def test_wire_10_a_stream_gone_silent_midway_through_a_reply_loses_no_line(
    rig: Rig,
) -> None:
    """The agent's stream stalls in the middle of a reply (no event, no ping): the gateway
    gives up on it after ``stream_read``, resumes with ``Last-Event-ID`` and relays what the
    stalled stream held back (the rest of the reply, a line appended meanwhile) to the phone,
    which misses nothing and reads nothing again."""
    async with log_agent_followed(rig) as (agent, client):
        reply = agent.append()
        agent.delta(reply, "one ")
        phone = PhoneChat(client, CHAT)
        await phone.start()
        agent.delta(reply, "two ")
        await eventually(lambda: phone.shown() == [("i0", "one two ", False, None)])
        streams = agent.streams
        agent.go_silent()
        agent.delta(reply, "three ")
        agent.append(text="A line appended meanwhile", final=True)
        agent.delta(reply, "four")
        await eventually(lambda: agent.streams > streams, within=30)  # the gateway resumed
        agent.finish(reply)
        want = [
            ("i0", "one two three four", True, None),
            ("i1", "A line appended meanwhile", True, None),
        ]

        async def read_equals() -> bool:
            return shown(await get_json(client, CHAT)) == want

        await eventually(read_equals, within=30)
        await eventually(lambda: phone.shown() == want, within=30)
        assert (phone.misses, phone.reloads, phone.reads) == (0, 0, 1)
        await phone.stop()


async def test_wire_10_converges_through_drops_restarts_cuts_and_lost_logs(rig: Rig) -> None:
    """3,000 random deltas; streams dropped, the agent restarted, its log cut, its log lost
    (ids from 1 again). At the end the phone's chat, read by ``GET`` and followed on the live
    stream (itself dropped and resumed with ``Last-Event-ID``), equals the agent's, exactly."""
    rng = random.Random(9)
    words = ["one", "two", "three", "tidy", "notes", "\n", "\r", "\r\n", "\u202e", "\x00", "é"]
    agent = LogAgent()
    sock = rig.tmp / "log.sock"
    await agent.serve(sock)
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    current = agent.append()
    phone = PhoneChat(client, CHAT)
    await phone.start()
    faults = {"drop": 0, "restart": 0, "cut": 0, "lose": 0, "phone": 0}
    for n in range(3000):
        agent.delta(current, rng.choice(words) + rng.choice(["", " "]))
        roll = rng.random()
        if roll < 0.01:
            agent.finish(current)
            current = agent.append()
        elif roll < 0.014:
            faults["drop"] += 1
            agent.drop_streams()
        elif roll < 0.017:
            faults["restart"] += 1
            await agent.stop()
            await asyncio.sleep(0.02)
            await agent.serve(sock)
        elif roll < 0.020:
            faults["cut"] += 1
            agent.cut_log()
            agent.drop_streams()
        elif roll < 0.023:
            # Its store lost, the agent starts its ids again from 1; the gateway comes back
            # before the agent sends more than the gateway had seen (else the ids overlap and
            # no reader can tell: wire §10 asks such an agent to start above them). So the
            # gateway has seen an event first: a gateway held back at position 0 (a snapshot
            # of a log begun again, none of its events read yet) would resume at 0 in the new
            # log too, with no reset, and miss what the lost log held.
            faults["lose"] += 1
            await eventually(lambda: gw.mirrors["desk"].last_event_id not in (None, "0"))
            streams = agent.streams
            agent.lose_log()
            agent.drop_streams()
            await eventually(lambda s=streams: agent.streams > s)
        elif roll < 0.026:
            faults["phone"] += 1
            await phone.reconnect()
        if n % 20 == 0:
            await asyncio.sleep(0.001)  # the gateway and the phone run meanwhile
    agent.finish(current)
    want = [(i["id"], cleaned(i["text"]), True, None) for i in agent.items]
    try:

        async def read_equals() -> bool:
            return shown(await get_json(client, CHAT)) == want

        await eventually(read_equals, within=20)
        await eventually(lambda: phone.shown() == want, within=20)
    finally:
        await phone.stop()
        await agent.stop()
    assert phone.misses == 0, phone.missed
    assert all(count > 0 for count in faults.values()), faults
    assert agent.resets > 0
    assert phone.reloads > 0


# --- 2: the live chat equals the reloaded chat ------------------------------------------------


async def test_C2_the_live_path_cleans_and_renders_as_the_read(rig: Rig) -> None:
    """Raw control characters (as no SDK sends them) reach neither path; a markdown item
    reaches the live stream rendered; the read plus the live events equals the next read."""
    async with log_agent_followed(rig) as (agent, client):
        phone = PhoneChat(client, CHAT)
        await phone.start()
        reply = agent.append(text="Pay \u202eusd\u202c 10\x00\x07\ufeff")
        for piece in ["a\u200bb", "\x7f\x9b", "c\u2028d", "\x85e\r", "\nf\r", "g"]:
            agent.delta(reply, piece)
        agent.finish(reply)
        agent.append("markdown", "# Plan\n\n- *one*\n\n<b>x</b>\u202e", final=True)
        agent.append("user", "tidy\x1b[31m up", final=True)
        want_reply = "Pay usd 10abc\nd\ne\nf\ng"

        async def read_done() -> bool:
            return len((await get_json(client, CHAT))["lines"]) == 3

        await eventually(read_done)
        view = await get_json(client, CHAT)
        got = shown(view)
        assert got[0] == ("i0", want_reply, True, None)
        md = view["lines"][1]
        assert md["html"] == (
            "<h1>Plan</h1>\n<ul>\n<li><em>one</em></li>\n</ul>\n<p>&lt;b&gt;x&lt;/b&gt;</p>\n"
        )
        assert got[2][1] == "tidy[31m up"
        await eventually(lambda: phone.shown() == got)
        assert phone.events > 0  # by the live path alone
        assert phone.reads == 1
        await phone.stop()


# --- 11: nothing is cut silently --------------------------------------------------------------


async def test_C2_a_long_reply_says_text_shortened_on_both_paths(rig: Rig) -> None:
    agent = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Notes")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    phone = PhoneChat(client, CHAT)
    await phone.start()
    item = await conv.append(kind="reply", final=False)
    chunk = "0123456789" * 10_000  # 100,000 characters
    for _ in range(10):  # a 1 MB reply, streamed
        await item.delta(chunk)
    want_text = (chunk * 2)[:CHAT_TEXT_LIMIT] + "…"

    async def read_cut() -> bool:
        lines: list[dict[str, Any]] = (await get_json(client, CHAT))["lines"]
        return bool(lines) and lines[0].get("shortened") == SHORTENED

    await eventually(read_cut)
    line = (await get_json(client, CHAT))["lines"][0]
    assert (line["text"], line["shortened"]) == (want_text, SHORTENED)
    await eventually(lambda: phone.shown() == [("i0", want_text, False, SHORTENED)])
    await item.finish()
    await conv.append(kind="reply", text="short")

    async def both() -> bool:
        return len((await get_json(client, CHAT))["lines"]) == 2

    await eventually(both)
    final = shown(await get_json(client, CHAT))
    assert final == [("i0", want_text, True, SHORTENED), ("i1", "short", True, None)]
    await eventually(lambda: phone.shown() == final)
    await phone.stop()


async def test_C2_property_first_read_plus_live_events_equals_the_next_read(rig: Rig) -> None:
    """For random sequences of agent events (items of every kind appended whole or streamed,
    deltas split anywhere, raw control and invisible characters, Markdown, pieces of secrets
    masked as they are written, X1), a phone that read the chat and then applied the live
    events shows exactly what the next read shows."""
    pieces = ["a", "b c", "\r", "\n", "\r\n", "\u200d", "\u0915", "\U0001f468", "\ufe0f"]
    pieces += ["\u202e", "\x00", "**", "[x](https://example.com)", "`", "# ", "- ", "é", " "]
    # Secrets in pieces: a token completed by a later delta rewrites text already shown.
    pieces += ["sk_live_", "4eC39HqLyjWDarjtT1zd", "ghp_KBJHFhMpKYolVviUsb6QL4PC", "6TMF3ctIJnlg"]
    pieces += ['password = "', "hunter2 words", '"', "-----BEGIN RSA PRIVATE KEY-----\n"]
    pieces += ["MIIEowIBAAKCAQEAx4aV1b2c\n", "-----END RSA PRIVATE KEY-----", "Bearer "]
    pieces += ["-----BEGIN RSA PRIVATE KEY-----\n", "MIIEowIBAAKCAQEAx4aV1b2c\n"] * 3  # more often
    async with log_agent_followed(rig) as (agent, client):
        for seed in range(25):
            rng = random.Random(seed)
            phone = PhoneChat(client, CHAT)
            await phone.start()
            writing: list[str] = []
            for _ in range(rng.randint(5, 40)):
                roll = rng.random()
                text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
                if roll < 0.2 or not writing:
                    kind = rng.choice(["reply", "markdown", "thinking", "notice", "user", "code"])
                    final = rng.random() < 0.4
                    item = agent.append(kind, text, final=final)
                    if not final:
                        writing.append(item)
                elif roll < 0.3:
                    agent.finish(writing.pop(rng.randrange(len(writing))))
                else:
                    agent.delta(rng.choice(writing), text)
            count = len(agent.items)

            async def read_has_all(n: int = count) -> bool:
                return len((await get_json(client, CHAT))["lines"]) == n

            await eventually(read_has_all)

            async def phone_equals_read(p: PhoneChat = phone) -> bool:
                return p.shown() == shown(await get_json(client, CHAT))

            await eventually(phone_equals_read)
            assert phone.misses == 0, seed
            assert phone.reads == 1  # no read again: the live events alone
            await phone.stop()
