"""A crew's lead pairs with a member like a phone (issue 21, W1, W4, V2): real gateway
processes on loopback, the member with ``--auth always`` and ``--tls self-signed``, the lead's
``token_env`` holding the token ``collie-gateway redeem`` printed and its entry pinning the
member's certificate. A ``read`` lead shows the member's agents but cannot answer them (T1's
last row, nothing sent); revoked on the member, the lead's section for it says
``unauthorized``; an entry pinning another certificate never reaches the member."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest

from collie_gateway.errors import SourcesError
from collie_gateway.sources import parse_crew
from collie_gateway.tls import self_signed
from fixtures.agents.harness import SampleAgent, short_dir
from tests.collie_gateway.conftest import eventually
from tests.collie_gateway.crew_scene import acts, call, ledger, section, section_state, write_json
from tests.collie_gateway.processes import GatewayProcess
from tests.collie_gateway.test_phones_cli import cli

OLDER = (
    "This machine runs an older Collie and can't take answers here. "
    "Update it, or answer in the durable agent."
)


async def member_call(
    member: GatewayProcess, method: str, path: str, body: object = None, token: str = ""
) -> tuple[int, Any]:
    """A request to a member over its pinned TLS."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, member.base + path, json=body, headers=headers, ssl=member.ssl) as r,
    ):
        return r.status, await r.json()


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
            args=["--machine", "m1", "--auth", "always", "--tls", "self-signed"],
        )
        # The certificate m1 will keep and serve (made here first, so the test knows its pin).
        cert = self_signed(m1.db, datetime.now(UTC))
        other = self_signed(tmp / "other.db", datetime.now(UTC))
        m1.base = m1.base.replace("http://", "https://")
        m1.ssl = aiohttp.Fingerprint(bytes.fromhex(cert.fingerprint))
        lead: GatewayProcess | None = None
        try:
            at = await mate.start()
            write_json(m1.sources, {"durable_agents": [{"name": "mate", "url": at.url}]})
            await m1.start(ready=0)
            status, refused = await member_call(m1, "GET", "/api/v1/dashboard")
            assert (status, refused["error"]) == (401, "unauthorized")
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
            crew = [
                {
                    "name": "m1",
                    "url": m1.base,
                    "token_env": "M1_TOKEN",
                    "fingerprint": "sha256:" + cert.fingerprint,
                },
                {
                    "name": "impostor",  # the same address, another certificate pinned
                    "url": m1.base,
                    "token_env": "M1_TOKEN",
                    "fingerprint": "sha256:" + other.fingerprint,
                },
            ]
            write_json(lead.sources, {"crew": crew})
            await lead.start(ready=0, crew_ready=1)
            await section_state(lead, "impostor", "unreachable")
            message = {"request_id": "m-1", "text": "ask v1"}
            path = "/api/v1/agents/mate/conversations/c1/messages"
            status, sent = await member_call(m1, "POST", path, message, token=person)
            assert (status, sent["outcome"]) == (200, "accepted")

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


FP = "ab" * 32


@pytest.mark.parametrize(
    ("given", "pinned"),
    [("sha256:" + FP, FP), (":".join(["AB"] * 32), FP), (None, None)],
)
def test_a_crew_entry_pins_a_certificate_as_a_link_or_serve_writes_it(
    given: str | None, pinned: str | None
) -> None:
    entry: dict[str, Any] = {"name": "m1", "url": "https://m1.example:8765"}
    if given is not None:
        entry["fingerprint"] = given
    (member,) = parse_crew({"crew": [entry]}, "sources.json", {})
    assert member.fingerprint == pinned


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"url": "https://m1.example", "fingerprint": "sha256:abc"}, "64 hex digits"),
        ({"url": "https://m1.example", "fingerprint": 5}, "64 hex digits"),
        ({"url": "http://127.0.0.1:8765", "fingerprint": FP}, "needs an https:// url"),
    ],
)
def test_a_wrong_fingerprint_is_one_clear_error(entry: dict[str, Any], words: str) -> None:
    with pytest.raises(SourcesError, match=words):
        parse_crew({"crew": [{"name": "m1", **entry}]}, "sources.json", {})
