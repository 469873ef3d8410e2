"""W4 through crashes: an answer given on the lead reaches the member's agent exactly once
when the member, or the lead, is killed -9 in the middle of it (T1's guarantees, kept by the
member's own ledger); a member offline keeps its section and comes back by itself.

Real processes: the ``held`` sample agent (raises ``a1`` in ``c1``, logs every answer it acts
on, holds its handling of a reply until a file appears) behind the member gateway
``workshop``; a lead with its own ``nohistory`` agent and ``workshop`` in its crew.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from fixtures.agents.harness import SampleAgent, short_dir
from tests.collie_gateway.conftest import eventually
from tests.collie_gateway.crew_scene import acts, call, ledger, section, section_state, write_json
from tests.collie_gateway.processes import GatewayProcess

TAP = {"request_id": "tap-1", "version": 1, "answer": {"option": "allow"}}
ANSWER = "/api/v1/machines/workshop/agents/held/asks/a1/answer"
UNCERTAIN = "Not sure the answer arrived. Retry sends it once more."


@dataclass
class Scene:
    lead: GatewayProcess
    member: GatewayProcess
    release: Path
    acts_log: Path

    async def tap(self) -> Any:
        return await call(self.lead.base, "POST", ANSWER, TAP)

    async def board(self) -> Any:
        return await call(self.lead.base, "GET", "/api/v1/dashboard")


@contextlib.asynccontextmanager
async def scene() -> AsyncIterator[Scene]:
    with short_dir() as tmp:
        release, acts_log = tmp / "go", tmp / "acts.jsonl"
        held = SampleAgent(
            "held",
            state=tmp / "held.db",
            socket=tmp / "held.sock",
            args=["--acts", str(acts_log), "--release", str(release), "--hold", "before"],
        )
        nohist = SampleAgent("nohistory", state=tmp / "nh.db", socket=tmp / "nh.sock")
        member = GatewayProcess(
            write_json(
                tmp / "member.json",
                {"durable_agents": [{"name": "held", "socket": str(tmp / "held.sock")}]},
            ),
            tmp / "member.db",
            tmp / "member.log",
            args=["--machine", "workshop"],
        )
        lead = GatewayProcess(
            tmp / "lead.json", tmp / "lead.db", tmp / "lead.log", args=["--machine", "lead"]
        )
        try:
            await asyncio.gather(held.start(), nohist.start())
            await member.start()
            write_json(
                lead.sources,
                {
                    "durable_agents": [{"name": "nohistory", "socket": str(tmp / "nh.sock")}],
                    "crew": [{"name": "workshop", "url": member.base}],
                },
            )
            await lead.start(ready=1, crew_ready=1)
            yield Scene(lead, member, release, acts_log)
        finally:
            release.touch()  # no held handler outlives the test
            await lead.stop()
            await member.stop()
            await asyncio.gather(held.stop(), nohist.stop())


async def exactly_once(s: Scene) -> None:
    """A retry on the lead sees "accepted" and a closed card; the agent acted once."""

    async def accepted() -> bool:
        return bool((await s.tap())["outcome"] == "accepted")

    await eventually(accepted, within=20)
    retry = await s.tap()
    assert retry["card"]["closed"] is True
    assert retry["machine"] == "workshop"
    await eventually(lambda: len(acts(s.acts_log)) == 1)
    assert acts(s.acts_log) == [{"how": "answered", "request_id": "tap-1"}]
    assert ledger(s.member.db, "tap-1") == (1, "accepted")
    assert ledger(s.lead.db, "tap-1") is None  # the member's ledger, not the lead's
    chat = await call(s.lead.base, "GET", "/api/v1/machines/workshop/agents/held/conversations/c1")
    assert chat["cards"]["cards"] == []


async def test_W4_T1_member_killed_mid_answer_offline_then_back_exactly_once() -> None:
    async with scene() as s:
        tapping = asyncio.create_task(s.tap())
        await eventually(lambda: ledger(s.member.db, "tap-1") == (0, None), within=10)
        await s.member.kill()
        first = await tapping
        assert first["outcome"] == "uncertain"
        assert first["card"]["line"] == UNCERTAIN
        assert first["card"]["retry_label"] == "Retry"
        # Offline: the section stays, its last rows marked unreachable, with a line saying so.
        await section_state(s.lead, "workshop", "unreachable")
        board = await s.board()
        workshop = section(board, "workshop")
        assert workshop["note"] == "workshop is not answering. Its agents show as last seen."
        (row,) = workshop["rows"]
        assert row["agent"] == "held"
        assert row["state"] == "unreachable"
        assert row["right"] == {"label": "Unreachable"}
        assert row["line2"] == "held, local, workshop"
        (own,) = section(board, None)["rows"]
        assert own["state"] == "ready"  # the lead's own agents are unaffected
        again = await s.tap()  # a retry while the member is away: still not sure, nothing lost
        assert again["outcome"] == "uncertain"
        # The lead restarted meanwhile still shows the member's last known rows.
        await s.lead.stop()
        await s.lead.start(ready=1)
        await section_state(s.lead, "workshop", "unreachable")
        (kept,) = section(await s.board(), "workshop")["rows"]
        assert (kept["agent"], kept["state"], kept["line2"]) == (
            "held",
            "unreachable",
            "held, local, workshop",
        )
        s.release.touch()
        await s.member.start()
        await section_state(s.lead, "workshop", "ready")  # back by itself
        await exactly_once(s)


async def test_W4_T1_lead_killed_mid_answer_and_restarted_exactly_once() -> None:
    async with scene() as s:
        tapping = asyncio.create_task(s.tap())
        await eventually(lambda: ledger(s.member.db, "tap-1") == (0, None), within=10)
        await s.lead.kill()
        with contextlib.suppress(aiohttp.ClientError, AssertionError, json.JSONDecodeError):
            await tapping  # the phone lost its answer with the lead
        s.release.touch()
        await s.lead.start(ready=1, crew_ready=1)
        await exactly_once(s)
