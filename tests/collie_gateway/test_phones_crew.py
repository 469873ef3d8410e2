"""A crew's lead pairs with a member like a phone (issue 21, W1, W4, V2): real gateway
processes on loopback, the member with ``--auth always``, the lead's ``token_env`` holding the
token ``collie-gateway redeem`` printed. A ``read`` lead shows the member's agents but cannot
answer them (T1's last row, nothing sent); revoked on the member, the lead's section for it
says ``unauthorized``."""

from __future__ import annotations

import re

from fixtures.agents.harness import SampleAgent, short_dir
from tests.collie_gateway.conftest import eventually
from tests.collie_gateway.crew_scene import (
    acts,
    call,
    ledger,
    section,
    section_state,
    write_json,
)
from tests.collie_gateway.processes import GatewayProcess
from tests.collie_gateway.test_phones_cli import cli

OLDER = (
    "This machine runs an older Collie and can't take answers here. "
    "Update it, or answer in the durable agent."
)


async def token_for(member: GatewayProcess, name: str, scope: str) -> str:
    """Pair ``name`` with ``member`` as its person would: ``pair`` there, ``redeem`` here."""
    args = ["pair", "--db", str(member.db), "--no-wait", "--scope", scope]
    code, shown = await cli(*args, "--public-url", member.base)
    assert code == 0
    link = re.search(r"link:\s+(\S+)", shown)
    assert link is not None
    code, token = await cli("redeem", link.group(1), "--name", name)
    assert code == 0
    return token.strip()


async def test_W4_V2_a_read_lead_shows_a_members_agents_and_revoked_it_is_unauthorized() -> None:
    with short_dir() as tmp:
        acts_log = tmp / "acts.jsonl"
        mate = SampleAgent(
            "crewmate", state=tmp / "mate.db", tcp=True, args=["--acts", str(acts_log)]
        )
        m1 = GatewayProcess(
            tmp / "m1.json",
            tmp / "m1.db",
            tmp / "m1.log",
            args=["--machine", "m1", "--auth", "always"],
        )
        lead: GatewayProcess | None = None
        try:
            at = await mate.start()
            write_json(m1.sources, {"durable_agents": [{"name": "mate", "url": at.url}]})
            await m1.start(ready=0)
            assert (await call(m1.base, "GET", "/api/v1/dashboard", status=401))["error"] == (
                "unauthorized"
            )
            person = await token_for(m1, "Pixel", "answer")
            lead_token = await token_for(m1, "lead", "read")
            lead_phone = lead_token.split(".")[1]
            lead = GatewayProcess(
                tmp / "lead.json",
                tmp / "lead.db",
                tmp / "lead.log",
                env={"M1_TOKEN": lead_token},
                args=["--machine", "lead"],
            )
            crew = [{"name": "m1", "url": m1.base, "token_env": "M1_TOKEN"}]
            write_json(lead.sources, {"crew": crew})
            await lead.start(ready=0, crew_ready=1)
            sent = await call(
                m1.base,
                "POST",
                "/api/v1/agents/mate/conversations/c1/messages",
                {"request_id": "m-1", "text": "ask v1"},
                token=person,
            )
            assert sent["outcome"] == "accepted"

            async def waiting() -> bool:
                board = await call(lead.base, "GET", "/api/v1/dashboard")
                rows = section(board, "m1")["rows"]
                return [r["agent"] for r in rows] == ["mate"] and rows[0]["waiting"] is True

            await eventually(waiting, within=15)
            chat = await call(lead.base, "GET", "/api/v1/machines/m1/agents/mate/conversations/c1")
            (card,) = chat["cards"]["cards"]
            tap = {
                "request_id": "tap-lead",
                "version": card["version"],
                "answer": {"option": "allow"},
            }
            answer = await call(lead.base, "POST", card["answer_url"], tap)
            assert (answer["outcome"], answer["card"]["line"]) == ("refused", OLDER)
            assert ledger(m1.db, "tap-lead") is None
            assert acts(acts_log) == []
            # Revoked on the member, from its terminal: the lead's section says so.
            code, said = await cli("phones", "revoke", lead_phone, "--db", str(m1.db))
            assert (code, said) == (0, f"revoked {lead_phone}\n")
            await section_state(lead, "m1", "unauthorized")
            board = await call(lead.base, "GET", "/api/v1/dashboard")
            assert section(board, "m1")["note"] == "m1 did not accept this gateway's crew token."
        finally:
            if lead is not None:
                await lead.stop()
            await m1.stop()
            await mate.stop()
