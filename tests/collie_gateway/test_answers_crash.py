"""Exactly once through crashes (T1): the gateway or the agent killed -9 at the worst moment.

Real processes: ``python -m collie_gateway serve`` on a free port and a SQLite file, and the
``held`` sample agent (``fixtures/agents/held.py``), which raises ``a1`` in ``c1``, logs every
answer it acts on to a JSON-lines file, and holds its handling of a reply until a file appears:
before it records the reply (``--hold before``) or after (``--hold after``). The gateway
records a tap before sending it, and sends unsettled taps again, with the same request id,
when the agent's link is ready again.
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

from fixtures.agents.harness import SampleAgent, short_dir
from tests.collie_gateway.conftest import eventually
from tests.collie_gateway.processes import GatewayProcess

TAP = {"request_id": "tap-1", "version": 1, "answer": {"option": "allow"}}
ANSWER_PATH = "/api/v1/agents/held/asks/a1/answer"
UNCERTAIN = "Not sure the answer arrived. Retry sends it once more."


@dataclass
class Scene:
    """The held agent (not started) and a gateway for it (not started), in one directory."""

    tmp: Path
    agent: SampleAgent
    gateway: GatewayProcess
    release: Path
    acts_log: Path

    def ledger(self, request_id: str) -> tuple[int, str | None] | None:
        """The gateway's record of ``request_id`` in its SQLite file: (settled, outcome)."""
        with (
            contextlib.suppress(sqlite3.Error),
            contextlib.closing(sqlite3.connect(self.gateway.db)) as conn,
        ):
            row = conn.execute(
                "SELECT settled, outcome FROM answers WHERE request_id = ?", (request_id,)
            ).fetchone()
            return None if row is None else (int(row[0]), row[1])
        return None

    def pending(self, request_id: str) -> bool:
        """Recorded and not settled: the outcome is not known."""
        rec = self.ledger(request_id)
        return rec is not None and rec[0] == 0

    def settled(self, request_id: str) -> bool:
        rec = self.ledger(request_id)
        return rec is not None and rec[0] == 1

    def acts(self) -> list[dict[str, Any]]:
        """Every answer the agent acted on, from its own log."""
        if not self.acts_log.exists():
            return []
        return [json.loads(line) for line in self.acts_log.read_text().splitlines() if line]

    def agent_state(self) -> tuple[list[str], list[tuple[str, str | None]]]:
        """From the agent's state file: the request ids it recorded, and each
        ``ask.resolved`` of ``a1`` as (how, request_id)."""
        with contextlib.closing(sqlite3.connect(self.tmp / "held.db")) as conn:
            recorded = [str(r[0]) for r in conn.execute("SELECT request_id FROM requests")]
            rows = conn.execute("SELECT data FROM events WHERE type = 'ask.resolved'").fetchall()
        events = [json.loads(bytes(r[0])) for r in rows]
        resolved = [(e["how"], e.get("request_id")) for e in events if e["ask_id"] == "a1"]
        return recorded, resolved


@contextlib.asynccontextmanager
async def scene(hold: str) -> AsyncIterator[Scene]:
    with short_dir() as tmp:
        release, acts_log = tmp / "go", tmp / "acts.jsonl"
        sock = tmp / "held.sock"
        agent = SampleAgent(
            "held",
            state=tmp / "held.db",
            socket=sock,
            args=["--acts", str(acts_log), "--release", str(release), "--hold", hold],
        )
        sources = tmp / "sources.json"
        sources.write_text(json.dumps({"durable_agents": [{"name": "held", "socket": str(sock)}]}))
        gateway = GatewayProcess(sources, tmp / "gateway.db", tmp / "gateway.log")
        try:
            yield Scene(tmp, agent, gateway, release, acts_log)
        finally:
            release.touch()  # no held handler outlives the test
            await gateway.stop()
            await agent.stop()


async def exactly_once(s: Scene) -> None:
    """The phone sees "accepted" for tap-1, its card closed, and the agent acted once."""
    await eventually(lambda: s.settled("tap-1"), within=15)
    status = await s.gateway.get("/api/v1/answers/tap-1")
    assert status["outcome"] == "accepted"
    assert status["settled"] is True
    assert status["card"]["closed"] is True
    retry = await s.gateway.post(ANSWER_PATH, TAP)  # the phone's Retry: the ledger answers
    assert retry["outcome"] == "accepted"
    chat = await s.gateway.get("/api/v1/agents/held/conversations/c1?all_cards=true")
    assert chat["cards"]["cards"] == []
    await eventually(lambda: len(s.acts()) == 1)
    assert s.acts() == [{"how": "answered", "request_id": "tap-1"}]
    recorded, resolved = s.agent_state()
    assert resolved == [("answered", "tap-1")]
    assert recorded.count("tap-1") == 1


@pytest.mark.parametrize("hold", ["before", "after"])
async def test_T1_gateway_killed_after_recording_before_the_outcome(hold: str) -> None:
    """kill -9 of the gateway while its answer is with the agent: held before the agent acts
    (it acts once the gateway is dead) or after (it acted; its answer never came back)."""
    async with scene(hold) as s:
        await s.agent.start()
        await s.gateway.start()

        async def tap() -> None:
            with contextlib.suppress(aiohttp.ClientError):
                await s.gateway.post(ANSWER_PATH, TAP)  # hangs: the gateway dies under it

        tapping = asyncio.create_task(tap())
        await eventually(lambda: s.pending("tap-1"))  # recorded, unsettled
        if hold == "after":
            await eventually(lambda: len(s.acts()) == 1)  # the agent acted; held its answer
        else:
            assert s.acts() == []
        await s.gateway.kill()
        await tapping
        assert s.pending("tap-1")  # the outcome was never recorded
        s.release.touch()
        await s.gateway.start()  # the same SQLite file: resends tap-1 once the link is ready
        await exactly_once(s)


@pytest.mark.parametrize("hold", ["before", "after"])
async def test_T1_agent_killed_mid_answer_restarted_on_its_state_file(hold: str) -> None:
    """kill -9 of the agent while it holds the answer: before it recorded the reply (the
    resend is the first delivery), or after (its request-id memory gives the first outcome)."""
    async with scene(hold) as s:
        await s.agent.start()
        await s.gateway.start()
        tapping = asyncio.create_task(s.gateway.post(ANSWER_PATH, TAP))
        await eventually(lambda: s.pending("tap-1"))
        if hold == "after":
            await eventually(lambda: len(s.acts()) == 1)  # recorded and acted
        await s.agent.kill()
        first = await tapping
        assert first["outcome"] == "uncertain"
        assert first["settled"] is False
        assert first["card"]["line"] == UNCERTAIN
        assert first["card"]["retry_label"] == "Retry"
        recorded, resolved = s.agent_state()
        if hold == "after":
            assert (recorded, resolved) == (["tap-1"], [("answered", "tap-1")])
        else:
            assert (recorded, resolved) == ([], [])
            # Before: nothing settles it. After: the agent's ask.resolved (answered, tap-1)
            # may have reached the gateway before the kill, and settles it (T1, issue 9.8).
            assert s.pending("tap-1")
        s.release.touch()
        await s.agent.start()  # the same state file and socket; the gateway resends
        await exactly_once(s)
