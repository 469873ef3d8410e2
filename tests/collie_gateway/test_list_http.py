"""An agent's conversation list through the phone API, against SDK agents on real sockets
(spec L1–L8, X1). Every footer of L6 comes from a real condition on the agent's side."""

from __future__ import annotations

import asyncio
import secrets
import string
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from aiohttp.typedefs import Handler, Middleware

from collie_gateway.core.mirror import LinkState
from collie_gateway.core.reconnect import LinkTiming
from collie_gateway.gateway import Gateway
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import FAST, Rig, eventually, get_json, post_json
from wire.agent import Agent

Client = TestClient[Any, Any]
LIST = "/api/v1/agents/desk/conversations"
POLL = LIST + "?poll=true"
FEATURES = ["history", "reopen", "close"]
# A gateway that gives up on an agent's answer after 0.4 s (L6 "didn't answer").
IMPATIENT = LinkTiming(
    connect=1.0, request=0.4, stream_read=1.0, backoff_first=0.05, backoff_cap=0.2
)
HANG = 0.8  # longer than IMPATIENT.request

NO_LIST = "This durable agent doesn't keep a list of its conversations."
NO_ANSWER = "The durable agent didn't answer. Try again in a moment."
FAILED = "Couldn't load conversations. Try again."
WIRE2 = "Program speaks wire v2, this Collie speaks v1. Update Collie, or the durable agent's SDK."

# A fake GitHub token: its 36 characters are new on every run, so no rule can know them.
SECRET = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))
TOKEN = "ghp_" + SECRET


class ClosedReads:
    """An agent middleware that counts the agent's reads of ``GET /conversations?state=closed``
    and, by ``mode``, answers them as asked: ``ok``; ``hang`` (past the gateway's timeout);
    ``cut`` (a Content-Length for the whole page, half of it sent, the connection closed);
    ``chunked`` (half the JSON in a chunked answer, then the connection closed); ``late``
    (the page is read, then held until ``release`` is set)."""

    def __init__(self) -> None:
        self.count = 0
        self.mode = "ok"
        self.release = asyncio.Event()

    @property
    def middleware(self) -> Middleware:
        @web.middleware
        async def closed_reads(request: web.Request, handler: Handler) -> web.StreamResponse:
            is_closed_read = (
                request.method == "GET"
                and request.path == "/conversations"
                and request.query.get("state") == "closed"
            )
            if not is_closed_read:
                return await handler(request)
            self.count += 1
            if self.mode == "hang":
                await asyncio.sleep(HANG)
            page = await handler(request)
            if self.mode == "late":
                await self.release.wait()
            if self.mode in ("cut", "chunked"):
                return await _cut(request, page, chunked=self.mode == "chunked")
            return page

        return closed_reads


async def _cut(
    request: web.Request, page: web.StreamResponse, *, chunked: bool
) -> web.StreamResponse:
    assert isinstance(page, web.Response)
    assert isinstance(page.body, bytes)
    body = page.body
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    if chunked:
        resp.enable_chunked_encoding()
    else:
        resp.content_length = len(body)
    await resp.prepare(request)
    await resp.write(body[: len(body) // 2])
    assert request.transport is not None
    request.transport.close()
    return resp


async def start(
    rig: Rig,
    *,
    reads: ClosedReads | None = None,
    timing: LinkTiming = FAST,
    features: list[str] | None = None,
    **agent_args: Any,
) -> tuple[Client, Gateway, Agent]:
    """The agent "desk" on its socket and a gateway that has it Ready."""
    agent = rig.agent(
        "desk",
        runtime="desk",
        features=FEATURES if features is None else features,
        middlewares=[reads.middleware] if reads else [],
        **agent_args,
    )
    sock = await rig.serve("desk")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], timing=timing)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return client, gw, agent


def ids(rows: list[dict[str, Any]] | None) -> list[str]:
    return [r["conversation_id"] for r in rows or []]


async def test_L1_L2_order(rig: Rig) -> None:
    client, gw, agent = await start(rig)
    await agent.open_conversation("idle-old", title="Old")
    rig.clock.advance(minutes=1)
    asking_old = await agent.open_conversation("asking-old", title="Asks first")
    await asking_old.ask(kind="text", id="q1", title="Which folder?")
    rig.clock.advance(minutes=1)
    await agent.open_conversation("idle-new", title="New")
    rig.clock.advance(minutes=1)
    says_waiting = await agent.open_conversation("says-waiting", title="Waits")
    await says_waiting.update(state="waiting")  # waiting for the person, no ask
    rig.clock.advance(minutes=1)
    for cid in ("closed-old", "closed-new"):
        conv = await agent.open_conversation(cid, title=cid)
        await conv.close()
        rig.clock.advance(minutes=1)
    await eventually(lambda: gw.mirrors["desk"].waiting_count == 2)
    view = await get_json(client, LIST)
    # Waiting first, then the other open ones, newest activity first in each; then "Closed".
    assert ids(view["rows"]) == ["says-waiting", "asking-old", "idle-new", "idle-old"]
    assert [r["waiting"] for r in view["rows"]] == [True, True, False, False]
    assert view["closed_label"] == "Closed"
    assert ids(view["closed"]) == ["closed-new", "closed-old"]
    assert all(r["closed"] and r["status"] == "closed" for r in view["closed"])
    assert view["footer"] is None
    # New activity moves a row up within its group.
    old = await agent.conversation("idle-old")
    assert old is not None
    rig.clock.advance(minutes=1)
    await old.update(subtitle="Touched")
    await eventually(lambda: gw.mirrors["desk"].conversations["idle-old"].subtitle == "Touched")
    view = await get_json(client, POLL)
    assert ids(view["rows"]) == ["says-waiting", "asking-old", "idle-old", "idle-new"]


async def test_L3_row_contents(rig: Rig) -> None:
    client, gw, agent = await start(rig, subtitle="Keeps your notes")
    await agent.open_conversation("plain", title="Groceries")  # no subtitle of its own
    await agent.open_conversation("sub", title="Taxes", subtitle="Reading the 2025 forms")
    asking = await agent.open_conversation("asking", title="Photos", subtitle="Sorting")
    await asking.ask(kind="text", id="q1", title="Which album?")
    await asking.ask(kind="text", id="q2", title="Keep duplicates?")
    rig.clock.advance(minutes=7)
    await eventually(lambda: gw.mirrors["desk"].waiting_count == 1)
    rows = {r["conversation_id"]: r for r in (await get_json(client, LIST))["rows"]}
    assert rows["asking"]["title"] == "Photos"
    assert rows["asking"]["line"] == "Which album?"  # the waiting question, not the subtitle
    assert rows["asking"]["open_asks"] == 2
    assert rows["asking"]["status"] == "waiting"
    assert rows["sub"]["line"] == "Reading the 2025 forms"
    assert rows["sub"]["open_asks"] is None
    assert rows["sub"]["status"] == "idle"
    assert rows["plain"]["line"] == "Keeps your notes"  # the agent's subtitle
    assert {r["time_label"] for r in rows.values()} == {"7 min"}
    rig.clock.advance(hours=3)
    rows = {r["conversation_id"]: r for r in (await get_json(client, POLL))["rows"]}
    assert rows["plain"]["time_label"] == "3 h"
    assert rows["plain"]["href"] == LIST + "/plain"


@pytest.mark.parametrize("title", [None, "", "   "])
async def test_L3_untitled_conversation(rig: Rig, title: str | None) -> None:
    client, gw, agent = await start(rig)
    done = await agent.open_conversation("done", title=title)
    await done.close()
    await agent.open_conversation("c1", title=title)
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    view = await get_json(client, LIST)
    assert view["rows"][0]["title"] == "Untitled conversation"
    assert view["closed"][0]["title"] == "Untitled conversation"
    chat = await get_json(client, LIST + "/c1")
    assert chat["header"]["title"] == "Untitled conversation"


async def test_L4_open_row_opens_chat_closed_row_read_only_with_reopen(rig: Rig) -> None:
    client, gw, agent = await start(rig)
    await agent.open_conversation("open", title="Still going")
    done = await agent.open_conversation("done", title="Finished")
    await done.append(kind="reply", text="All filed.")
    await done.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    view = await get_json(client, LIST)
    open_row, closed_row = view["rows"][0], view["closed"][0]
    assert open_row["reopen"] is None
    assert closed_row["reopen"] == "Reopen"
    chat = await get_json(client, open_row["href"])
    assert chat["read_only"] is False
    assert chat["bar"] is not None
    shown = await get_json(client, closed_row["href"])
    assert shown["read_only"] is True
    assert shown["bar"] is None
    assert [line["text"] for line in shown["lines"]] == ["All filed."]
    assert shown["menu"]["reopen"]["label"] == "Reopen"
    reopened = await post_json(client, closed_row["href"] + "/reopen", {"request_id": "r1"})
    assert reopened["outcome"] == "accepted"
    await eventually(lambda: "done" in gw.mirrors["desk"].conversations)

    async def back_among_open() -> bool:
        view = await get_json(client, POLL)
        return set(ids(view["rows"])) == {"open", "done"} and view["closed"] is None

    await eventually(back_among_open)


async def test_L4_no_reopen_without_the_feature(rig: Rig) -> None:
    client, _gw, agent = await start(rig, features=["history", "close"])
    done = await agent.open_conversation("done", title="Finished")
    await done.close()
    view = await get_json(client, LIST)
    assert ids(view["closed"]) == ["done"]
    assert view["closed"][0]["reopen"] is None
    shown = await get_json(client, view["closed"][0]["href"])
    assert shown["read_only"] is True
    assert shown["menu"]["reopen"] is None


async def test_L5_closed_rows_read_on_visits_and_on_open_or_close_never_on_polls(
    rig: Rig,
) -> None:
    reads = ClosedReads()
    client, gw, agent = await start(rig, reads=reads)
    conv = await agent.open_conversation("c1", title="One")
    await eventually(lambda: reads.count == 1)  # an open reads once
    assert (await get_json(client, POLL))["rows"][0]["title"] == "One"
    await get_json(client, LIST)
    assert reads.count == 2  # a visit reads once
    for _ in range(10):
        await get_json(client, POLL)
    # Other changes than an open or a close read nothing either.
    await conv.append(kind="reply", text="hello")
    await conv.update(title="One, renamed")
    ask = await conv.ask(kind="text", id="q", title="Name?")
    await ask.decide()
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].title == "One, renamed")
    await asyncio.sleep(0.2)  # four times the refresh's debounce: a read would have started
    for _ in range(10):
        await get_json(client, POLL)
    assert reads.count == 2
    await conv.close()
    await eventually(lambda: reads.count == 3)  # a close reads again

    async def drawn_closed() -> bool:
        return ids((await get_json(client, POLL))["closed"]) == ["c1"]

    await eventually(drawn_closed)  # the poll shows that read, and reads nothing
    await agent.open_conversation("c2", title="Two")
    await eventually(lambda: reads.count == 4)  # an open reads again
    await conv.reopen()
    await eventually(lambda: reads.count == 5)  # so does a reopen
    await eventually(lambda: gw.mirrors["desk"].open_count == 2)
    await asyncio.sleep(0.2)
    assert reads.count == 5


async def test_L5_open_rows_come_from_the_mirror_even_with_the_agent_away(rig: Rig) -> None:
    client, gw, agent = await start(rig)
    await agent.open_conversation("c1", title="One")
    done = await agent.open_conversation("c0", title="Zero")
    await done.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    drawn = await get_json(client, LIST)
    assert ids(drawn["closed"]) == ["c0"]
    await rig.stop("desk")
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.UNREACHABLE)
    polled = await get_json(client, POLL)
    assert ids(polled["rows"]) == ["c1"]
    visited = await get_json(client, LIST)
    assert ids(visited["rows"]) == ["c1"]  # at once, from the gateway's own data
    assert ids(visited["closed"]) == ["c0"]  # L8: the drawn closed rows stay
    assert visited["footer"]["text"] == NO_ANSWER  # nobody listens on the socket


async def test_L5_a_close_during_a_read_is_read_again(rig: Rig) -> None:
    """A conversation that closes while the gateway reads the closed ones must not fall out
    of the list: the read in flight may not hold it."""
    reads = ClosedReads()
    client, gw, agent = await start(rig, reads=reads)
    first = await agent.open_conversation("c1", title="One")
    second = await agent.open_conversation("c2", title="Two")
    await eventually(lambda: reads.count >= 1)
    reads.release.set()
    await get_json(client, LIST)
    reads.release.clear()
    reads.mode = "late"
    before = reads.count
    await first.close()
    await eventually(lambda: reads.count == before + 1)  # read, held before it answers
    await second.close()  # the page in flight holds c1 only
    await eventually(lambda: gw.mirrors["desk"].open_count == 0)
    reads.mode = "ok"
    reads.release.set()

    async def both_closed() -> bool:
        return sorted(ids((await get_json(client, POLL))["closed"])) == ["c1", "c2"]

    await eventually(both_closed, within=3)


async def test_L6_load_more_over_100(rig: Rig) -> None:
    reads = ClosedReads()
    client, gw, agent = await start(rig, reads=reads)
    for n in range(205):
        conv = await agent.open_conversation(f"c{n:03}", title=f"Conversation {n}")
        await conv.close()
        rig.clock.advance(seconds=1)
    # Let the opens and closes, and the reads they cause (L5), settle before counting.
    settled = {"count": -1}

    async def quiet() -> bool:
        count = reads.count
        await asyncio.sleep(0.2)
        stable = count == reads.count == settled["count"] and not gw.chats._refreshes
        settled["count"] = reads.count
        return stable

    await eventually(quiet, within=15)
    view = await get_json(client, LIST)
    assert len(view["closed"]) == 100
    assert view["footer"]["text"] == "Load more"
    # Newest first: c204 … c105 on the first page.
    assert ids(view["closed"]) == [f"c{n:03}" for n in range(204, 104, -1)]
    before = reads.count
    second = await get_json(client, view["footer"]["href"])
    assert reads.count == before + 1  # each tap reads the next 100
    assert ids(second["rows"]) == [f"c{n:03}" for n in range(104, 4, -1)]
    assert all(r["closed"] and r["reopen"] == "Reopen" for r in second["rows"])
    assert second["footer"]["text"] == "Load more"
    third = await get_json(client, second["footer"]["href"])
    assert ids(third["rows"]) == ["c004", "c003", "c002", "c001", "c000"]
    assert third["footer"] is None
    assert reads.count == before + 2


async def test_L6_agent_keeps_no_list(rig: Rig) -> None:
    reads = ClosedReads()
    client, gw, agent = await start(rig, reads=reads, keeps_list=False)
    await agent.open_conversation("c1", title="One")
    done = await agent.open_conversation("c0", title="Zero")
    await done.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    view = await get_json(client, LIST)
    assert reads.count >= 1  # it was asked, and answered that it keeps no list
    assert view["footer"] == {"kind": "no_list", "text": NO_LIST, "href": None}
    assert ids(view["rows"]) == ["c1"]
    assert view["closed"] is None
    assert view["closed_label"] is None


async def test_L6_agent_did_not_answer(rig: Rig) -> None:
    reads = ClosedReads()
    reads.mode = "hang"
    client, gw, agent = await start(rig, reads=reads, timing=IMPATIENT)
    await agent.open_conversation("c1", title="One")
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    view = await get_json(client, LIST)
    assert view["footer"] == {"kind": "no_answer", "text": NO_ANSWER, "href": None}
    assert ids(view["rows"]) == ["c1"]  # the open rows do not wait for the agent
    assert view["closed"] is None


async def test_L6_wire2_agent_gets_the_version_message(rig: Rig) -> None:
    reads = ClosedReads()
    agent = rig.agent("desk", features=["history"], wire_version=2, middlewares=[reads.middleware])
    await agent.open_conversation("c1", title="One")
    sock = await rig.serve("desk")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.VERSION_MISMATCH)
    view = await get_json(client, LIST)
    assert view["footer"] == {"kind": "version", "text": WIRE2, "href": None}
    assert view["warning"] == WIRE2
    assert view["rows"] == []
    assert view["closed"] is None
    assert view["new"] is None
    assert reads.count == 0  # V1: a refused agent is not asked


@pytest.mark.parametrize("how", ["cut", "chunked"])
async def test_L6_read_cut_mid_transfer(rig: Rig, how: str) -> None:
    reads = ClosedReads()
    reads.mode = how
    client, gw, agent = await start(rig, reads=reads)
    await agent.open_conversation("c1", title="One")
    for n in range(3):
        conv = await agent.open_conversation(f"done{n}", title=f"Done {n}")
        await conv.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    view = await get_json(client, LIST)
    assert view["footer"] == {"kind": "failed", "text": FAILED, "href": None}
    assert ids(view["rows"]) == ["c1"]


async def test_L7_agent_without_history_shows_open_ones_and_no_footer(rig: Rig) -> None:
    reads = ClosedReads()
    client, gw, agent = await start(rig, reads=reads, features=["close"], keeps_list=False)
    await agent.open_conversation("c1", title="One")
    done = await agent.open_conversation("c2", title="Two")
    await done.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    for path in (LIST, POLL):
        view = await get_json(client, path)
        assert ids(view["rows"]) == ["c1"]
        assert view["closed"] is None
        assert view["closed_label"] is None
        assert view["footer"] is None
    assert reads.count == 0  # never asked


async def test_L8_a_drawn_list_stays_when_later_reads_fail(rig: Rig) -> None:
    reads = ClosedReads()
    client, gw, agent = await start(rig, reads=reads, timing=IMPATIENT)
    await agent.open_conversation("c1", title="One")
    done = await agent.open_conversation("c0", title="Zero")
    await done.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    drawn = await get_json(client, LIST)
    assert ids(drawn["closed"]) == ["c0"]
    assert drawn["footer"] is None
    for mode, footer in (("cut", FAILED), ("hang", NO_ANSWER), ("chunked", FAILED)):
        reads.mode = mode
        view = await get_json(client, LIST)
        assert view["footer"]["text"] == footer
        assert ids(view["rows"]) == ["c1"]
        assert view["closed_label"] == "Closed"
        assert ids(view["closed"]) == ["c0"]  # still drawn
        assert (await get_json(client, POLL))["closed"] == view["closed"]
    reads.mode = "ok"
    view = await get_json(client, LIST)
    assert view["footer"] is None
    assert ids(view["closed"]) == ["c0"]


async def test_X1_secrets_masked_in_list_titles_subtitles_and_the_header(rig: Rig) -> None:
    client, gw, agent = await start(rig)
    conv = await agent.open_conversation(
        "c1", title=f"Rotate {TOKEN} today", subtitle=f"old key {TOKEN}"
    )
    done = await agent.open_conversation("c0", title=f"Revoked {TOKEN}", subtitle=TOKEN)
    await done.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    events = await client.get("/api/v1/events")
    await conv.update(subtitle=f"new key {TOKEN}")
    new_key = f"new key {TOKEN}"
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].subtitle == new_key)
    view = await get_json(client, LIST)
    chat = await get_json(client, LIST + "/c1")
    shown = [
        view["rows"][0]["title"],
        view["rows"][0]["line"],
        view["closed"][0]["title"],
        view["closed"][0]["line"],
        chat["header"]["title"],
        chat["header"]["line2"],
    ]
    for text in shown:
        assert "ghp_" in text  # the kind stays visible
        assert not any(SECRET[i : i + 6] in text for i in range(len(SECRET) - 5)), text
    assert view["rows"][0]["title"].startswith("Rotate ghp_")
    assert chat["header"]["line2"].startswith("new key ghp_")
    # Nor does the live stream carry it.
    seen = b""
    while b"list.row" not in seen:
        seen += await asyncio.wait_for(events.content.readany(), 5)
    events.close()
    assert SECRET[:8].encode() not in seen


async def test_X1_masked_before_cut_so_a_straddling_secret_leaks_nothing(rig: Rig) -> None:
    client, gw, agent = await start(rig)
    await agent.open_conversation("c1", title="x" * 190 + " " + TOKEN)  # cut at 200
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    title = (await get_json(client, LIST))["rows"][0]["title"]
    assert len(title) <= 200
    assert not any(SECRET[i : i + 4] in title for i in range(len(SECRET) - 3)), title


async def test_X1_redaction_off_shows_titles_as_sent(rig: Rig) -> None:
    agent = rig.agent("desk", features=FEATURES)
    sock = await rig.serve("desk")
    await agent.open_conversation("c1", title=f"Rotate {TOKEN}")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], redact=False)
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    assert (await get_json(client, LIST))["rows"][0]["title"] == f"Rotate {TOKEN}"
