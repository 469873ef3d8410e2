"""docs/bridges.md's way to try an ACP agent works as written: the commands fetch the ACP
package's example agents, and the `serve` line serves `echo` until it is Ready."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import aiohttp

from fixtures.agents.harness import REPO, short_dir
from tests.collie_gateway.processes import free_port

PAGE = REPO / "docs" / "bridges.md"


def _acp_commands() -> list[str]:
    """The shell block docs/bridges.md marks as tested, under "ACP agents"."""
    text = PAGE.read_text(encoding="utf-8")
    block = text.split("<!-- tested: tests/docs/test_bridges.py -->\n```sh\n", 1)[1]
    return block.split("\n```", 1)[0].splitlines()


async def test_the_documented_command_fetches_an_acp_example_agent_that_serves() -> None:
    *fetch, serve = _acp_commands()
    argv = shlex.split(serve)
    assert argv[:1] == ["collie-gateway"]
    with short_dir() as folder:
        env = {**os.environ, "HOME": str(folder), "COLLIE_TOKEN": ""}
        bin_dir = str(Path(sys.executable).parent)  # `python` is this venv's, as after set-up
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        fetching = await asyncio.create_subprocess_exec(
            *("sh", "-ec", "\n".join(fetch)),
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(fetching.communicate(), 180)
        assert fetching.returncode == 0, out.decode()
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "collie_gateway", *argv[1:], "--port", str(port)),
            cwd=folder,
            env={**env, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
                assert await _echo_ready(http)
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 20)


async def _echo_ready(http: aiohttp.ClientSession) -> bool:
    for _ in range(600):
        with contextlib.suppress(aiohttp.ClientConnectionError):
            async with http.get("/healthz") as resp:
                if resp.status == 200 and (await resp.json())["ready"] == 1:
                    return True
        await asyncio.sleep(0.05)
    return False
