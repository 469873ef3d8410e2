"""The gateway as a real process for tests: ``python -m collie_gateway serve`` on a free port
and a SQLite file, its output in a log file."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from fixtures.agents.harness import REPO
from tests.collie_gateway.conftest import eventually


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayProcess:
    """``python -m collie_gateway serve`` on a free port and a SQLite file; ``env`` is added
    to the environment (push settings, for instance), ``args`` to the command line."""

    def __init__(
        self,
        sources: Path,
        db: Path,
        log: Path,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.sources, self.db, self.log = sources, db, log
        self.env = dict(env or {})
        self.args = list(args)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.ssl: aiohttp.Fingerprint | bool = True  # a self-signed member: its pin
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, ready: int = 1, crew_ready: int = 0, within: float = 60.0) -> None:
        """Run it and wait (``within`` seconds at most) until ``ready`` of its agents and
        ``crew_ready`` of its crew members are ready."""
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("COLLIE_TOKEN", None)  # only a token the test gives
        env.update(self.env)
        with self.log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "collie_gateway", "serve",
                "--sources", str(self.sources), "--db", str(self.db), "--port", str(self.port),
                *self.args, cwd=REPO, env=env, stdout=log, stderr=log,
            )  # fmt: skip

        async def started() -> bool:
            assert self.proc is not None
            assert self.proc.returncode is None, self.log.read_text(errors="replace")
            try:
                async with (
                    aiohttp.ClientSession() as http,
                    http.get(self.base + "/healthz", ssl=self.ssl) as r,
                ):
                    body: dict[str, int] = await r.json()
                    return body["ready"] >= ready and body.get("crew_ready", 0) >= crew_ready
            except aiohttp.ClientError:
                return False

        await eventually(started, within=within)  # generous: a machine busy with other tests

    async def kill(self) -> None:
        """SIGKILL: no clean shutdown, nothing flushed."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()
        self.proc = None

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                async with asyncio.timeout(10):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        self.proc = None

    async def get(self, path: str) -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, http.get(self.base + path, ssl=self.ssl) as r:
            assert r.status == 200, await r.text()
            result: dict[str, Any] = await r.json()
            return result

    async def post(self, path: str, body: object) -> dict[str, Any]:
        async with (
            aiohttp.ClientSession() as http,
            http.post(self.base + path, json=body, ssl=self.ssl) as r,
        ):
            assert r.status == 200, await r.text()
            result: dict[str, Any] = await r.json()
            return result
