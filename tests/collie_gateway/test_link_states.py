"""What a person sees and reads when an agent cannot be followed (issue 25.3, 25.4): an agent
that refuses the gateway's token is "Unreachable" (D6 names three states) with a reason that
says so, on its home and its list, and a WARNING in the log; each agent's state change is
logged once (WARNING when it goes down, INFO when it is back), not at every retry."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys

import aiohttp

from collie_gateway.sources import Source
from collie_gateway.strings import Catalogue
from fixtures.agents.harness import REPO, short_dir
from tests.collie_gateway.conftest import Rig, eventually, get_json
from tests.collie_gateway.processes import free_port

REFUSED = Catalogue()["agent_unauthorized"]


async def test_D6_an_agent_refusing_the_token_is_unreachable_and_says_why(rig: Rig) -> None:
    assert REFUSED == "The durable agent refused this gateway's token."
    agent = rig.agent("desk", runtime="desk", features=["history"], token="the-old-one")
    url = await rig.serve_tcp("desk", agent)
    client, _ = await rig.gateway([Source(name="desk", url=url, token="the-old-one")])

    async def home_is(state: str) -> bool:
        return bool((await get_json(client, "/api/v1/agents/desk"))["state"] == state)

    await eventually(lambda: home_is("ready"))
    # The agent's token is changed (a restart with another token): the gateway's is refused.
    await rig.stop("desk")
    again = rig.agent("desk", runtime="desk", features=["history"], token="a-new-one")
    rig.runners["desk"] = await again.serve_tcp("127.0.0.1", int(url.rsplit(":", 1)[1]))
    await eventually(lambda: home_is("unreachable"))
    home = await get_json(client, "/api/v1/agents/desk")
    assert home["reason"] == REFUSED
    dash = await get_json(client, "/api/v1/dashboard")
    [row] = [r for s in dash["sections"] for r in s.get("rows") or []]
    assert (row["state"], row["right"]["label"]) == ("unreachable", "Unreachable")
    listing = await get_json(client, "/api/v1/agents/desk/conversations")
    assert listing["footer"] == {"kind": "unauthorized", "text": REFUSED, "href": None}


async def test_D6_an_agent_that_does_not_answer_keeps_its_words(rig: Rig) -> None:
    client, _ = await rig.gateway([Source(name="gone", socket=rig.tmp / "gone.sock")])

    async def unreachable() -> bool:
        return bool((await get_json(client, "/api/v1/agents/gone"))["state"] == "unreachable")

    await eventually(unreachable)
    home = await get_json(client, "/api/v1/agents/gone")
    assert home["reason"] == "The durable agent didn't answer. Try again in a moment."


# --- the log of the CLI, without -v ------------------------------------------------------------


async def _healthz(port: int, ready: int) -> None:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
        for _ in range(600):
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with http.get("/healthz") as resp:
                    if resp.status == 200 and (await resp.json())["ready"] >= ready:
                        return
            await asyncio.sleep(0.05)
    raise AssertionError(f"never {ready} ready")


async def test_D6_each_state_change_is_logged_once_a_refused_token_as_a_warning(
    rig: Rig,
) -> None:
    locked = rig.agent("locked", runtime="desk", token="the-right-one")
    url = await rig.serve_tcp("locked", locked)
    with short_dir() as folder:
        missing = folder / "missing.sock"  # a path nothing serves (yet)
        sources = folder / "sources.json"
        entries = [
            {"name": "missing", "socket": str(missing)},
            {"name": "locked", "url": url, "token_env": "LOCKED_TOKEN"},
        ]
        sources.write_text(json.dumps({"durable_agents": entries}), encoding="utf-8")
        port = free_port()
        err = folder / "gateway.err"
        with err.open("wb") as sink:
            proc = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "collie_gateway", "serve", "--sources", str(sources)),
                *("--db", str(folder / "g.db"), "--port", str(port)),
                cwd=REPO,
                env={**os.environ, "COLLIE_TOKEN": "", "LOCKED_TOKEN": "a-wrong-one"},
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
            try:
                await _healthz(port, 0)
                await asyncio.sleep(4)  # several retries of each (0.5 s, 1 s, 2 s …)
                agent = rig.agent("missing", runtime="desk")
                rig.runners["missing"] = await agent.serve_unix(missing)
                await _healthz(port, 1)
            finally:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 20)
        lines = err.read_text(encoding="utf-8").splitlines()
    about_missing = [x for x in lines if "agent missing:" in x]
    about_locked = [x for x in lines if "agent locked:" in x]
    assert len(about_missing) == 1, lines
    assert (
        " WARNING collie_gateway.services.links: agent missing: unreachable: " in about_missing[0]
    )
    assert str(missing) in about_missing[0]
    assert len(about_locked) == 1, lines
    assert about_locked[0].endswith(
        "WARNING collie_gateway.services.links: agent locked: unreachable: "
        "the agent refused the gateway's token (401)"
    ), about_locked[0]
