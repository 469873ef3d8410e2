"""V2 and T1's last row, and a wrong crew token: members that cannot take answers given on a
lead show their agents, and a tap on the lead is answered "This machine runs an older
Collie…" with nothing sent.

One ``crewmate`` agent behind two member gateways: ``m1`` (requires its token, takes
answers) and ``m2`` (``--no-crew-answers``). The lead's crew: ``old`` (m1 through a proxy
with no crew route, as a Collie from before crews), ``older`` (m1 through a proxy saying crew
version 0), ``noanswers`` (m2) and ``wrongtoken`` (m1 with a token it does not accept).
"""

from __future__ import annotations

import asyncio
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
    write_json,
)
from tests.collie_gateway.processes import GatewayProcess

pytestmark = pytest.mark.asyncio(loop_scope="module")

M1_TOKEN = "tok-m1-5b7e0d"
OLDER = (
    "This machine runs an older Collie and can't take answers here. "
    "Update it, or answer in the durable agent."
)


@dataclass
class Scene:
    lead: GatewayProcess
    m1: GatewayProcess
    m2: GatewayProcess
    acts_log: Path
    proxies: list[MemberProxy]

    async def get(self, path: str, status: int = 200) -> Any:
        return await call(self.lead.base, "GET", path, status=status)

    async def post(self, path: str, body: object, status: int = 200) -> Any:
        return await call(self.lead.base, "POST", path, body, status=status)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def scene() -> AsyncIterator[Scene]:
    with short_dir() as tmp:
        acts_log = tmp / "acts.jsonl"
        mate = SampleAgent(
            "crewmate", state=tmp / "mate.db", tcp=True, args=["--acts", str(acts_log)]
        )
        m1 = GatewayProcess(
            tmp / "m1.json",
            tmp / "m1.db",
            tmp / "m1.log",
            env={"COLLIE_TOKEN": M1_TOKEN},
            args=["--machine", "m1"],
        )
        m2 = GatewayProcess(
            tmp / "m2.json",
            tmp / "m2.db",
            tmp / "m2.log",
            args=["--machine", "m2", "--no-crew-answers"],
        )
        lead = GatewayProcess(
            tmp / "lead.json",
            tmp / "lead.db",
            tmp / "lead.log",
            env={"WRONG_TOKEN": "not-the-token"},
            args=["--machine", "lead"],
        )
        old = MemberProxy(m1.base, crew_route="missing", upstream_token=M1_TOKEN)
        older = MemberProxy(m1.base, crew_route="old", upstream_token=M1_TOKEN)
        try:
            at = await mate.start()
            for member in (m1, m2):
                write_json(member.sources, {"durable_agents": [{"name": "mate", "url": at.url}]})
            await asyncio.gather(m1.start(), m2.start())
            await asyncio.gather(old.start(), older.start())
            write_json(
                lead.sources,
                {
                    "crew": [
                        {"name": "old", "url": old.url},
                        {"name": "older", "url": older.url},
                        {"name": "noanswers", "url": m2.base},
                        {"name": "wrongtoken", "url": m1.base, "token_env": "WRONG_TOKEN"},
                    ]
                },
            )
            await lead.start(ready=0, crew_ready=3)
            # An ask to tap: raised on m1 itself (m2 mirrors the same agent).
            sent = await call(
                m1.base,
                "POST",
                "/api/v1/agents/mate/conversations/c1/messages",
                {"request_id": "m-1", "text": "ask v1"},
                token=M1_TOKEN,
            )
            assert sent["outcome"] == "accepted"
            yield Scene(lead, m1, m2, acts_log, [old, older])
        finally:
            await lead.stop()
            for proxy in (old, older):
                await proxy.close()
            await asyncio.gather(m1.stop(), m2.stop())
            await mate.stop()


async def _refused_and_nothing_sent(scene: Scene, machine: str, request_id: str) -> None:
    async def waiting() -> bool:
        board = await scene.get("/api/v1/dashboard")
        rows = section(board, machine)["rows"]
        return [r["agent"] for r in rows] == ["mate"] and rows[0]["waiting"] is True

    await eventually(waiting, within=10)  # its agents show, its ask among them
    chat = await scene.get(f"/api/v1/machines/{machine}/agents/mate/conversations/c1")
    (card,) = chat["cards"]["cards"]
    assert card["answer_url"] == f"/api/v1/machines/{machine}/agents/mate/asks/v1/answer"
    tap = {"request_id": request_id, "version": card["version"], "answer": {"option": "allow"}}
    answer = await scene.post(card["answer_url"], tap)
    assert answer["outcome"] == "refused"
    assert answer["card"]["line"] == OLDER
    assert answer["machine"] == machine
    # Nothing was sent: neither member's ledger knows the request id, the agent acted on none.
    assert ledger(scene.m1.db, request_id) is None
    assert ledger(scene.m2.db, request_id) is None
    assert acts(scene.acts_log) == []


@pytest.mark.parametrize("machine", ["old", "older", "noanswers"])
async def test_W4_V2_a_card_on_the_lead_has_its_answer_url_and_says_T1s_last_row_first(
    scene: Scene, machine: str
) -> None:
    """Issue 25.1: before any tap, a member's card on the lead carries the lead's answer URL
    (a Collie from before crews gives none) and, as the member takes no answers there, is
    frozen with T1's last row, as R2's card."""

    async def waiting() -> bool:
        rows = section(await scene.get("/api/v1/dashboard"), machine)["rows"]
        return bool(rows) and rows[0]["waiting"] is True

    await eventually(waiting, within=10)
    chat = await scene.get(f"/api/v1/machines/{machine}/agents/mate/conversations/c1")
    (card,) = chat["cards"]["cards"]
    assert card["answer_url"] == f"/api/v1/machines/{machine}/agents/mate/asks/v1/answer"
    assert card["answerable"] is False
    assert card["outcome"]["line"] == OLDER
    assert (card["outcome"]["frozen"], card["outcome"]["closed"]) == (True, False)
    assert card["body"] is not None, "the options still show, frozen"


async def test_V2_T1_last_row_a_member_without_the_crew_route(scene: Scene) -> None:
    await _refused_and_nothing_sent(scene, "old", "tap-old")


async def test_V2_T1_last_row_a_member_of_an_older_crew_version(scene: Scene) -> None:
    await _refused_and_nothing_sent(scene, "older", "tap-older")


async def test_V2_T1_last_row_a_member_that_takes_no_answers_from_a_lead(scene: Scene) -> None:
    await _refused_and_nothing_sent(scene, "noanswers", "tap-noanswers")
    info = await call(scene.m2.base, "GET", "/api/v1/crew")
    assert info == {"crew": 1, "machine": "m2", "answers": False}
    # A lead that sends it on anyway (one that did not read the crew route) is refused by m2.
    tap = {"request_id": "tap-anyway", "version": 1, "answer": {"option": "allow"}}
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            scene.m2.base + "/api/v1/agents/mate/asks/v1/answer",
            json=tap,
            headers={"Collie-Crew-Lead": "1"},
        ) as r,
    ):
        anyway = await r.json()
    assert (anyway["outcome"], anyway["card"]["line"]) == ("refused", OLDER)
    assert ledger(scene.m2.db, "tap-anyway") is None
    assert acts(scene.acts_log) == []


async def test_W1_a_wrong_crew_token_is_a_clear_state_of_the_members_section(
    scene: Scene,
) -> None:
    board = await scene.get("/api/v1/dashboard")
    wrong = section(board, "wrongtoken")
    assert wrong["state"] == "unauthorized"
    assert wrong["note"] == "wrongtoken did not accept this gateway's crew token."
    assert wrong["rows"] == []
    # The other sections are unaffected, and the lead answers on.
    assert section(board, "old")["state"] == "ready"
    assert section(board, "noanswers")["state"] == "ready"
    read = await scene.get("/api/v1/machines/wrongtoken/agents/mate/conversations", status=502)
    assert read["message"] == "wrongtoken did not accept this gateway's crew token."
    health = await scene.get("/healthz")
    assert health["crew"] == 4
    assert health["crew_ready"] == 3
