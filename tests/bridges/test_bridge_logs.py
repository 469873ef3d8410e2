"""A bridge's log lines in the gateway's log (issue 25.7), through ``collie-gateway serve`` run
as a process with an ACP agent that logs in Python's default format: each line keeps the
child's own level (an agent's INFO is not a WARNING) and carries one timestamp."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp

from fixtures.agents.harness import REPO, short_dir
from tests.collie_gateway.processes import free_port

STAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d")


async def _serve_until_ready(folder: Path) -> str:
    """Run the gateway for the chatty agent until it is ready, stop it, return its stderr."""
    entry = {
        "name": "chatty",
        "acp": {
            "command": [sys.executable, str(REPO / "fixtures" / "acp" / "scripted.py")],
            "socket": str(folder / "chatty.sock"),
            "state": str(folder / "chatty.db"),
        },
    }
    sources = folder / "sources.json"
    sources.write_text(json.dumps({"durable_agents": [entry]}), encoding="utf-8")
    port = free_port()
    err = folder / "gateway.err"
    with err.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "collie_gateway", "serve", "--sources", str(sources)),
            *("--db", str(folder / "g.db"), "--port", str(port)),
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "ACP_CHATTY": "1", "COLLIE_TOKEN": ""},
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
                await _ready(http)
            for _ in range(600):  # the agent's lines come just before it is ready
                if "nearly full" in err.read_text(encoding="utf-8"):
                    break
                await asyncio.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 20)
    return err.read_text(encoding="utf-8")


async def _ready(http: aiohttp.ClientSession) -> None:
    for _ in range(600):
        with contextlib.suppress(aiohttp.ClientConnectionError):
            async with http.get("/healthz") as resp:
                if resp.status == 200 and (await resp.json())["ready"] == 1:
                    return
        await asyncio.sleep(0.05)
    raise AssertionError("the bridged agent never got ready")


async def test_a_childs_log_lines_keep_their_level_with_one_timestamp() -> None:
    with short_dir() as folder:
        log = await _serve_until_ready(folder)
    lines = log.splitlines()
    assert [x for x in lines if len(STAMP.findall(x)) != 1] == [], log
    assert "Received initialize request" not in log, "an INFO line shown without -v"
    assert "bridge acp: serving" not in log, "the bridge's ordinary output shown as a warning"
    warned = [x for x in lines if x.endswith("root: the cache is nearly full")]
    assert len(warned) == 1, log
    assert re.fullmatch(
        r"\S+ \S+ WARNING collie_gateway\.bridge\.chatty: chatty: bridges\.acp\.process: "
        r"agent\[\d+\]: root: the cache is nearly full",
        warned[0],
    ), warned[0]
    assert [x for x in lines if "exited with" in x] == [], "a stop asked for, logged as a fault"
