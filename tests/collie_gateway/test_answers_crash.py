"""Exactly once through crashes (T1): the gateway or the agent killed -9 at the worst moment.

Real processes: ``collie-gateway serve`` and the ``held`` sample agent, whose reply can be held
before or after it records the answer. The gateway records a tap before sending it and sends
unsettled taps again, with the same request id, when the agent's link is ready again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import sys
from pathlib import Path
from typing import Any

import aiohttp

from fixtures.agents.harness import REPO, SampleAgent, short_dir
from tests.collie_gateway.conftest import eventually

ANSWER = {"request_id": "tap-1", "version": 1, "answer": {"option": "allow"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayProcess:
    """``python -m collie_gateway serve`` on a port and a SQLite file."""

    def __init__(self, sources: Path, db: Path) -> None:
        self.sources, self.db, self.port = sources, db, free_port()
        self.proc: asyncio.subprocess.Process | None = None
        self.base = f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        env = {**os.environ, "COLLIE_TOKEN": "", "PYTHONPATH": str(REPO)}
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "collie_gateway", "serve", "--sources", str(self.sources),
            "--db", str(self.db), "--port", str(self.port),
            cwd=REPO, env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip

        async def up() -> bool:
            try:
                async with aiohttp.ClientSession() as http, http.get(self.base + "/healthz") as r:
                    body: dict[str, int] = await r.json()
                    return body["ready"] == 1
            except aiohttp.ClientError:
                return False

        await eventually(up, within=15)

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()


def pending_in_ledger(db: Path, request_id: str) -> bool:
    """Whether the gateway's SQLite file holds the tap, unsettled."""
    try:
        with sqlite3.connect(db) as conn:
            row = conn.execute(
                "SELECT settled FROM answers WHERE request_id = ?", (request_id,)
            ).fetchone()
    except sqlite3.Error:
        return False
    return row is not None and row[0] == 0


def acts(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


async def status(base: str, request_id: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{base}/api/v1/answers/{request_id}") as r,
    ):
        assert r.status == 200
        result: dict[str, Any] = await r.json()
        return result


async def test_T1_gateway_killed_after_recording_before_the_outcome() -> None:
    with short_dir() as tmp:
        release, log = tmp / "go", tmp / "acts.jsonl"
        agent = SampleAgent(
            "held",
            state=tmp / "held.db",
            socket=tmp / "held.sock",
            args=["--acts", str(log), "--release", str(release), "--hold", "after"],
        )
        sources = tmp / "sources.json"
        sources.write_text(
            json.dumps({"durable_agents": [{"name": "held", "socket": str(tmp / "held.sock")}]})
        )
        gateway = GatewayProcess(sources, tmp / "gateway.db")
        async with agent:
            await gateway.start()
            try:
                url = f"{gateway.base}/api/v1/agents/held/asks/a1/answer"

                async def tap() -> None:
                    try:
                        async with aiohttp.ClientSession() as http:
                            await http.post(url, json=ANSWER)
                    except aiohttp.ClientError:
                        pass  # the gateway dies under it

                tapping = asyncio.create_task(tap())
                await eventually(lambda: pending_in_ledger(tmp / "gateway.db", "tap-1"))
                await eventually(lambda: len(acts(log)) == 1)  # the agent took it and acted
                await gateway.kill()  # the tap recorded and sent, its outcome never heard
                await tapping
                release.touch()
                await gateway.start()  # resends the same request id once the link is ready
                await eventually(lambda: not pending_in_ledger(tmp / "gateway.db", "tap-1"))
                answer = await status(gateway.base, "tap-1")
                assert answer["outcome"] == "accepted"
                assert answer["card"]["closed"] is True
                await asyncio.sleep(0.3)
                assert acts(log) == [{"how": "answered", "request_id": "tap-1"}]
            finally:
                await gateway.stop()


async def _agent_killed(hold: str) -> None:
    with short_dir() as tmp:
        release, log = tmp / "go", tmp / "acts.jsonl"
        args = ["--acts", str(log), "--release", str(release), "--hold", hold]
        agent = SampleAgent("held", state=tmp / "held.db", socket=tmp / "held.sock", args=args)
        sources = tmp / "sources.json"
        sources.write_text(
            json.dumps({"durable_agents": [{"name": "held", "socket": str(tmp / "held.sock")}]})
        )
        gateway = GatewayProcess(sources, tmp / "gateway.db")
        await agent.start()
        await gateway.start()
        try:
            async with aiohttp.ClientSession() as http:
                url = f"{gateway.base}/api/v1/agents/held/asks/a1/answer"
                tapping = asyncio.create_task(http.post(url, json=ANSWER))
                await eventually(lambda: pending_in_ledger(tmp / "gateway.db", "tap-1"))
                if hold == "after":
                    await eventually(lambda: len(acts(log)) == 1)  # recorded and acted
                await agent.kill()
                resp = await tapping
                first = await resp.json()
            assert first["outcome"] == "uncertain"
            assert first["card"]["line"] == "Not sure the answer arrived. Retry sends it once more."
            assert first["card"]["retry_label"] == "Retry"
            release.touch()
            await agent.start()  # same state file: it remembers request ids it recorded
            await eventually(lambda: not pending_in_ledger(tmp / "gateway.db", "tap-1"), within=15)
            answer = await status(gateway.base, "tap-1")
            assert answer["outcome"] == "accepted"
            await asyncio.sleep(0.3)
            assert acts(log) == [{"how": "answered", "request_id": "tap-1"}]
        finally:
            await gateway.stop()
            await agent.stop()


async def test_T1_agent_killed_after_recording_the_answer() -> None:
    await _agent_killed("after")


async def test_T1_agent_killed_before_recording_the_answer() -> None:
    await _agent_killed("before")
