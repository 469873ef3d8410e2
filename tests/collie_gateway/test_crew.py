"""A crew end to end (W1–W4, P3): a lead gateway and two member gateways as processes on
loopback, SDK sample agents behind them.

- lead: its own ``nohistory`` agent (no asks); crew ``workshop`` then ``attic``.
- ``workshop``: requires its token; ``pi-durable`` is the ``crewmate`` sample on
  ``http://127.0.0.1`` (local), which raises an ask when told ``ask X``.
- ``attic``: no token, seen through a recording proxy; ``desk`` (the desk sample, which
  raises asks at start).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from fixtures.agents.harness import SampleAgent, short_dir
from tests.collie_gateway.conftest import eventually
from tests.collie_gateway.crew_scene import (
    MemberProxy,
    acts,
    call,
    ledger,
    section,
    sections,
    write_json,
)
from tests.collie_gateway.processes import GatewayProcess
from wire.sse import SSEParser

pytestmark = pytest.mark.asyncio(loop_scope="module")

WORKSHOP_TOKEN = "tok-workshop-9f3a1c"
CHAT = "/api/v1/machines/workshop/agents/pi-durable/conversations/c1"
ANSWER_URL = "/api/v1/machines/workshop/agents/pi-durable/asks/a1/answer"


@dataclass
class Scene:
    tmp: Path
    lead: GatewayProcess
    workshop: GatewayProcess
    attic: GatewayProcess
    proxy: MemberProxy
    acts_log: Path
    events: list[tuple[str, dict[str, Any]]]

    async def get(self, path: str, status: int = 200) -> Any:
        return await call(self.lead.base, "GET", path, status=status)

    async def post(self, path: str, body: object, status: int = 200) -> Any:
        return await call(self.lead.base, "POST", path, body, status=status)


async def follow(base: str, into: list[tuple[str, dict[str, Any]]]) -> None:
    """The lead's live stream, as a phone reads it: every event into ``into``."""
    parser = SSEParser()
    timeout = aiohttp.ClientTimeout(total=None)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.get(base + "/api/v1/events") as r,
    ):
        async for chunk in r.content.iter_any():
            for sse in parser.feed(chunk):
                into.append((sse.event, json.loads(sse.data)))


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def crew() -> AsyncIterator[Scene]:
    with short_dir() as tmp:
        acts_log = tmp / "acts.jsonl"
        mate = SampleAgent(
            "crewmate", state=tmp / "mate.db", tcp=True, args=["--acts", str(acts_log)]
        )
        desk = SampleAgent("desk", state=tmp / "desk.db", socket=tmp / "desk.sock")
        nohist = SampleAgent("nohistory", state=tmp / "nh.db", socket=tmp / "nh.sock")
        workshop = GatewayProcess(
            write_json(tmp / "ws.json", {"durable_agents": [{"name": "pi-durable", "url": ""}]}),
            tmp / "workshop.db",
            tmp / "workshop.log",
            env={"COLLIE_TOKEN": WORKSHOP_TOKEN},
            args=["--machine", "workshop"],
        )
        attic = GatewayProcess(
            write_json(
                tmp / "attic.json",
                {"durable_agents": [{"name": "desk", "socket": str(tmp / "desk.sock")}]},
            ),
            tmp / "attic.db",
            tmp / "attic.log",
            args=["--machine", "attic"],
        )
        lead = GatewayProcess(
            tmp / "lead.json",
            tmp / "lead.db",
            tmp / "lead.log",
            env={"WORKSHOP_TOKEN": WORKSHOP_TOKEN},
            args=["--machine", "lead", "--space", "home", "-v"],
        )
        proxy = MemberProxy(attic.base)
        events: list[tuple[str, dict[str, Any]]] = []
        follower: asyncio.Task[None] | None = None
        try:
            mate_at = await mate.start()
            await asyncio.gather(desk.start(), nohist.start())
            write_json(
                workshop.sources, {"durable_agents": [{"name": "pi-durable", "url": mate_at.url}]}
            )
            await asyncio.gather(workshop.start(), attic.start())
            await proxy.start()
            write_json(
                lead.sources,
                {
                    "durable_agents": [{"name": "nohistory", "socket": str(tmp / "nh.sock")}],
                    "crew": [
                        {"name": "workshop", "url": workshop.base, "token_env": "WORKSHOP_TOKEN"},
                        {"name": "attic", "url": proxy.url},
                    ],
                },
            )
            await lead.start(ready=1, crew_ready=2)
            follower = asyncio.create_task(follow(lead.base, events))
            yield Scene(tmp, lead, workshop, attic, proxy, acts_log, events)
        finally:
            if follower is not None:
                follower.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                    await follower
            await lead.stop()
            await proxy.close()
            await asyncio.gather(workshop.stop(), attic.stop())
            await asyncio.gather(mate.stop(), desk.stop(), nohist.stop())


async def test_W1_a_section_per_machine_own_first_then_crew_order(crew: Scene) -> None:
    board = await crew.get("/api/v1/dashboard")
    # attic's desk waits for the person (W3: above the spaces); the lead's own section, then
    # workshop, below them, in crew order.
    assert sections(board) == [
        ("durable_agents", "attic"),
        ("spaces", None),
        ("durable_agents", None),
        ("durable_agents", "workshop"),
    ]
    own = section(board, None)
    assert own["title"] == "Durable agents"
    assert "machine" not in own
    workshop = section(board, "workshop")
    assert workshop["title"] == "Durable agents · workshop"
    assert workshop["state"] == "ready"
    assert "note" not in workshop
    assert [r["agent"] for r in workshop["rows"]] == ["pi-durable"]
    assert [r["agent"] for r in section(board, "attic")["rows"]] == ["desk"]


async def test_W2_a_member_agent_names_its_machine_on_line_2(crew: Scene) -> None:
    board = await crew.get("/api/v1/dashboard")
    (mate,) = section(board, "workshop")["rows"]
    assert mate["line1"] == "pi-durable"
    assert mate["line2"] == "pi-durable, local, workshop"
    assert mate["badge"] == "Experimental"
    assert mate["machine"] == "workshop"
    assert mate["href"] == "/api/v1/machines/workshop/agents/pi-durable/conversations"
    (desk,) = section(board, "attic")["rows"]
    assert desk["line2"].endswith(", local, attic")
    (own,) = section(board, None)["rows"]
    assert own["line2"] == "durable, local" or own["line2"].endswith(", local")
    assert own["machine"] is None
    assert own["href"] == "/api/v1/agents/nohistory/conversations"


async def test_W3_pending_only_across_machines(crew: Scene) -> None:
    board = await crew.get("/api/v1/dashboard?pending_only=true")
    assert board["pending_only"] is True
    assert sections(board) == [("durable_agents", "attic"), ("spaces", None)]
    assert all(r["waiting"] for r in section(board, "attic")["rows"])


async def test_W4_a_member_agent_is_walked_as_a_local_one(crew: Scene) -> None:
    board = await crew.get("/api/v1/dashboard")
    (mate,) = section(board, "workshop")["rows"]
    listing = await crew.get(mate["href"])
    (row,) = listing["rows"]
    assert row["title"] == "Workbench"
    assert row["href"] == CHAT
    chat = await crew.get(row["href"])
    assert chat["header"]["title"] == "Workbench"
    home = await crew.get("/api/v1/machines/workshop/agents/pi-durable")
    assert home["conversations"] == "/api/v1/machines/workshop/agents/pi-durable/conversations"
    new = await crew.get("/api/v1/machines/workshop/agents/pi-durable/new")
    assert new["title"] == "New conversation"
    assert new["empty"] == "This machine's durable agent offers no starters yet."
    # Only agents and answers are reachable through the lead: not the member's devices.
    await crew.get("/api/v1/machines/workshop/devices", status=404)
    await crew.get("/api/v1/machines/nowhere/agents/pi-durable", status=404)


def a1_raised(crew: Scene) -> bool:
    """The lead's live stream carried workshop's ask ``a1``."""
    return any(
        kind == "ask.raised" and data.get("machine") == "workshop" and data["ask"]["id"] == "a1"
        for kind, data in crew.events
    )


async def raise_a1(crew: Scene) -> None:
    """Tell workshop's agent to raise ask ``a1``; wait until the lead streams it."""
    sent = await crew.post(CHAT + "/messages", {"request_id": "msg-1", "text": "ask a1"})
    assert sent["outcome"] == "accepted"
    await eventually(lambda: a1_raised(crew), within=10)


async def test_W3_W4_an_ask_on_a_member_moves_its_section_up_and_is_answered_on_the_lead(
    crew: Scene,
) -> None:
    await raise_a1(crew)

    async def workshop_above() -> bool:
        board = await crew.get("/api/v1/dashboard")
        return sections(board).index(("durable_agents", "workshop")) < sections(board).index(
            ("spaces", None)
        )

    await eventually(workshop_above, within=10)
    chat = await crew.get(CHAT)
    (card,) = chat["cards"]["cards"]
    assert card["caption"] == "Needs your answer · pi-durable"
    assert card["answer_url"] == ANSWER_URL
    tap = {"request_id": "tap-w4", "version": card["version"], "answer": {"option": "allow"}}
    first = await crew.post(card["answer_url"], tap)
    assert first["outcome"] == "accepted"
    assert first["card"]["closed"] is True
    again = await crew.post(card["answer_url"], tap)  # a retry on the lead: the member's ledger
    assert again["outcome"] == "accepted"
    await eventually(lambda: len(acts(crew.acts_log)) == 1)
    assert acts(crew.acts_log) == [{"ask": "a1", "how": "answered", "request_id": "tap-w4"}]
    # The answer went to the member only: its ledger holds it, the lead's does not.
    assert ledger(crew.workshop.db, "tap-w4") == (1, "accepted")
    assert ledger(crew.lead.db, "tap-w4") is None

    async def workshop_below() -> bool:
        board = await crew.get("/api/v1/dashboard")
        return sections(board).index(("durable_agents", "workshop")) > sections(board).index(
            ("spaces", None)
        )

    await eventually(workshop_below, within=10)
    # T1 reads the same on the lead as on the member: a late tap of another request id.
    late = {"request_id": "tap-late", "version": card["version"], "answer": {"option": "deny"}}
    on_lead = await crew.post(card["answer_url"], late)
    direct = {**late, "request_id": "tap-late-2"}
    on_member = await call(
        crew.workshop.base,
        "POST",
        "/api/v1/agents/pi-durable/asks/a1/answer",
        direct,
        token=WORKSHOP_TOKEN,
    )
    assert {**on_lead["card"], "request_id": "-"} == {**on_member["card"], "request_id": "-"}
    assert on_lead["card"]["line"] == "Already answered. This card goes away on the next refresh."
    assert on_lead["outcome"] == on_member["outcome"]
    status = await crew.get("/api/v1/machines/workshop/answers/tap-w4")
    assert status["outcome"] == "accepted"
    assert len(acts(crew.acts_log)) == 1


async def test_P3_the_lead_pushes_a_member_ask_once_keyed_by_its_machine(crew: Scene) -> None:
    """The ask a1 raised on workshop was decided on the lead under the lead's own limits;
    its once-key names the member's machine (no device is registered: not sent, logged).
    Run alone, it raises a1 itself."""
    if not a1_raised(crew):
        await raise_a1(crew)

    def keys() -> list[Any]:
        with contextlib.closing(sqlite3.connect(crew.lead.db)) as conn:
            return [json.loads(str(r[0])) for r in conn.execute("SELECT key FROM push_once")]

    await eventually(lambda: ["workshop", "pi-durable", "tool", "t-a1"] in keys())
    log = await crew.get("/api/v1/pushes")
    assert any(p["ask"] == "a1" for p in log["pushes"])


async def test_W4_answers_reach_only_the_machine_named(crew: Scene) -> None:
    tap = {"request_id": "tap-x", "version": 1, "answer": {"option": "allow"}}
    # pi-durable is no agent of the lead's own: a local path never reaches a member.
    wrong = await crew.post("/api/v1/agents/pi-durable/asks/a1/answer", tap, status=404)
    assert wrong["error"] == "not_found"
    # nohistory is the lead's own: a member's path never reaches it.
    await crew.post("/api/v1/machines/workshop/agents/nohistory/asks/a1/answer", tap, status=404)
    assert ledger(crew.lead.db, "tap-x") is None
    assert ledger(crew.workshop.db, "tap-x") is None


async def test_W4_a_member_token_goes_to_that_member_only_and_is_never_logged(
    crew: Scene,
) -> None:
    assert crew.proxy.auth_seen, "the lead read attic through the proxy"
    assert set(crew.proxy.auth_seen) == {None}  # attic has no token: it is sent none
    assert WORKSHOP_TOKEN not in crew.lead.log.read_text(errors="replace")
    # Without its token, workshop refuses: the lead did send it there.
    await call(crew.workshop.base, "GET", "/api/v1/crew", status=401)
    info = await call(crew.workshop.base, "GET", "/api/v1/crew", token=WORKSHOP_TOKEN)
    assert info == {"crew": 1, "machine": "workshop", "answers": True}
