"""An ask's round trip through the MCP bridge, beside the same ask raised by an SDK
agent, in the same run.

- Bridged: the bridge (``python -m bridges.mcp``, its own process) serves MCP on a free
  loopback port; this script's ``mcp`` client (Streamable HTTP) calls ``ask_choice`` N times
  one after another and times each call (tool call to result).
- SDK agent: the same choice ask raised N times by an SDK agent (``wire.agent``, its own
  process: this script with ``--sdk-agent``), timed by the agent (``conv.ask`` to
  ``handle.wait()`` returning).

Both sides are answered the same way, at once: a wire client on the agent's Unix socket reads
``GET /events`` and answers each ``ask.raised`` with ``POST /asks/{id}/reply``. A third
process (``--mcp-floor``) serves a tool answering at once through the bridge's HTTP shell: the
``mcp`` package's own cost. Printed: p50 and p99 each way, what the bridge adds, the bridge's
own CPU per round trip beside the SDK agent's and the package's, and MET/MISSED against 2 ms.

Run: ``python -m bench.mcp_bench [--asks 200] [--py-spy DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from bench._common import (
    Spy,
    bench_main,
    cpu_seconds,
    heading,
    pct,
    ratio,
    row,
    short_dir,
    sse_events,
    verdict,
)

SCRIPT = str(Path(__file__).resolve())
REPO = Path(SCRIPT).parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
Json = dict[str, Any]
QUESTION = "Go on?"
ASK: Json = {"question": QUESTION, "options": ["yes", "no"]}
CPU_TARGET_MS = 2.0  # the bridge's own CPU per round trip


async def _answer_every_ask(http: aiohttp.ClientSession, ready: asyncio.Event) -> None:
    """The phone's part, without a gateway: answer each ``ask.raised`` at once."""
    async with http.get("http://agent/events") as resp:
        ready.set()
        async for event in sse_events(resp):
            data = json.loads(event.data)
            if data["type"] != "ask.raised":
                continue
            ask = data["ask"]
            body = {
                "request_id": "r-" + ask["id"],
                "version": ask.get("version", 1),
                "answer": {"option": ask["options"][0]["id"]},  # the first: o1, allow
            }
            async with http.post(f"http://agent/asks/{ask['id']}/reply", json=body) as r:
                await r.read()


@contextlib.asynccontextmanager
async def _answering(
    argv: list[str], tmp: Path, sock: Path
) -> AsyncIterator[tuple[asyncio.subprocess.Process, aiohttp.ClientSession]]:
    """Run ``argv`` (it prints one line once it serves ``sock``) and answer its asks at once;
    yields the process and a wire client on its socket."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, env=ENV, cwd=str(tmp)
    )
    try:
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 60.0)  # "… serving …"
        conn = aiohttp.UnixConnector(path=str(sock))
        async with aiohttp.ClientSession(connector=conn) as http:
            ready = asyncio.Event()
            answering = asyncio.create_task(_answer_every_ask(http, ready))
            await ready.wait()
            try:
                yield proc, http
            finally:
                answering.cancel()
    finally:
        proc.terminate()
        await proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def bridged(asks: int, spy_dir: Path | None = None) -> Json:
    with short_dir("mb-") as tmp:
        sock, port = tmp / "mcp.sock", _free_port()
        argv = [sys.executable, "-m", "bridges.mcp", "--socket", str(sock), "--port", str(port)]
        async with _answering([*argv, "--state", str(tmp / "mcp.db")], tmp, sock) as (proc, _):
            spy = Spy(proc.pid, spy_dir / "mcp-bridge.txt") if spy_dir else None
            return await _calls(proc.pid, port, "ask_choice", asks, spy)


async def floor(calls: int) -> Json:
    """The ``mcp`` package's own cost: a tool answering at once, served by the bridge's HTTP
    shell (``bridges.mcp.http``) in a process of its own (this script with ``--mcp-floor``)."""
    port = _free_port()
    argv = [sys.executable, SCRIPT, "--mcp-floor", str(port)]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, env=ENV)
    try:
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 60.0)  # "… serving …"
        return await _calls(proc.pid, port, "ask_choice", calls, None)
    finally:
        proc.terminate()
        await proc.wait()


async def _calls(pid: int, port: int, tool: str, count: int, spy: Spy | None) -> Json:
    """Call ``tool`` ``count`` times one after another (after one call to warm up), each
    timed; and the serving process's CPU over the calls."""
    from mcp.client.client import Client

    trips: list[float] = []
    async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
        await client.call_tool(tool, ASK)  # the session's conversation
        if spy is not None:
            await spy.start()
        cpu0 = cpu_seconds(pid)
        for _ in range(count):
            t = time.perf_counter()
            result = await client.call_tool(tool, ASK)
            trips.append(time.perf_counter() - t)
            assert not result.is_error, result
        cpu = cpu_seconds(pid) - cpu0
        spied = await spy.stop(25) if spy is not None else ""
    return {"trips": trips, "cpu_per_ask": cpu / max(count, 1), "spied": spied}


def mcp_floor(port: int) -> None:
    """``--mcp-floor PORT``: the package's server with one tool answering at once, as the
    bridge serves it (its HTTP shell, no tracing middleware)."""
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    from bridges.mcp import http

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        tool = types.Tool(name="ask_choice", input_schema={"type": "object"})
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        value = {"outcome": "answered", "choice": "yes"}
        text = types.TextContent(type="text", text=json.dumps(value))
        return types.CallToolResult(content=[text], structured_content=value)

    async def serve() -> None:
        server: Server[Any] = Server("floor", on_list_tools=list_tools, on_call_tool=call_tool)
        server.middleware = []
        uv = http.server(http.app(server, idle=60.0, ended=lambda _: None))
        serving = asyncio.create_task(uv._serve([http.listen("127.0.0.1", port)]))
        for _ in range(3000):  # 30 s
            if uv.started:
                break
            await asyncio.sleep(0.01)
        print(f"mcp floor: serving on {port}", flush=True)
        await serving

    asyncio.run(serve())


async def sdk(asks: int) -> Json:
    with short_dir("mb-") as tmp:
        sock = tmp / "sdk.sock"
        argv = [sys.executable, SCRIPT, "--sdk-agent", str(sock)]
        async with _answering(argv, tmp, sock) as (proc, http):
            body = {"request_id": "start", "starter": "bench"}
            async with http.post("http://agent/conversations", json=body) as resp:
                conv = (await resp.json())["conversation_id"]
            body = {"request_id": "go", "text": f"bench {asks}"}
            cpu0 = cpu_seconds(proc.pid)
            async with http.post(f"http://agent/conversations/{conv}/messages", json=body):
                pass
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 120.0)
            cpu = cpu_seconds(proc.pid) - cpu0
        return {"trips": json.loads(line), "cpu_per_ask": cpu / max(asks, 1)}


def sdk_agent(sock: Path) -> None:
    """``--sdk-agent SOCK``: an SDK agent that raises the same choice ask N times on
    ``bench N`` and prints the round trips (JSON) on stdout."""
    from wire.agent import Agent, ConversationHandle, Option, SendMessage, Starter

    agent = Agent(
        state_path=sock.with_suffix(".db"),
        runtime="bench",
        features=["starters"],
        starters=[Starter(id="bench", label="Bench")],
    )

    @agent.on_message
    async def turn(conv: ConversationHandle, msg: SendMessage) -> None:
        trips: list[float] = []
        options = [Option(id="o1", label="yes"), Option(id="o2", label="no")]
        for _ in range(int(msg.text.split()[1])):
            t = time.perf_counter()
            handle = await conv.ask(kind="choice", title=QUESTION, options=options)
            await handle.wait()
            trips.append(time.perf_counter() - t)
        print(json.dumps(trips), flush=True)

    async def serve() -> None:
        async with agent:
            runner = await agent.serve_unix(sock)
            print(f"sdk agent: serving on {sock}", flush=True)
            await asyncio.sleep(240.0)  # the bench terminates it long before
            await runner.close()

    asyncio.run(serve())


async def run(args: argparse.Namespace) -> Json:
    return {
        "sdk": await sdk(args.asks),
        "floor": await floor(args.asks),
        "bridged": await bridged(args.asks, args.py_spy),
    }


def report(results: Json, args: argparse.Namespace) -> None:
    s, b = results["sdk"], results["bridged"]
    heading(f"an ask's round trip, {args.asks} choice asks one after another, answered at once")
    for q in (50, 99):
        sq, bq = pct(s["trips"], q) * 1000, pct(b["trips"], q) * 1000
        row(f"p{q} SDK agent / MCP bridge", f"{sq:.2f} ms / {bq:.2f} ms ({ratio(bq, sq)})")
        row(f"p{q} added by the bridge", f"{bq - sq:.2f} ms")
    cpu_rows(b["cpu_per_ask"], s["cpu_per_ask"], "SDK agent raising the same asks")
    f = results["floor"]
    row("mcp package alone, a tool at once", f"{f['cpu_per_ask'] * 1000:.2f} ms CPU per call")
    p50, p99 = pct(f["trips"], 50) * 1000, pct(f["trips"], 99) * 1000
    row("  its p50 / p99", f"{p50:.2f} / {p99:.2f} ms")
    if b["spied"]:
        heading("py-spy: the bridge's process during the asks")
        print(b["spied"])


def cpu_rows(bridge: float, baseline: float, label: str) -> None:
    """The bridge's own CPU per round trip beside a baseline of the same run, and the verdict
    against :data:`CPU_TARGET_MS`."""
    row("bridge CPU per round trip", f"{bridge * 1000:.2f} ms (process CPU, all its threads)")
    row(label, f"{baseline * 1000:.2f} ms ({ratio(bridge, baseline)})")
    met = verdict(bridge * 1000 <= CPU_TARGET_MS)
    row(f"target <= {CPU_TARGET_MS} ms per round trip", f"{met} {load_note()}")


def load_note() -> str:
    """The machine's load as the verdict was reached (figures swing with it here)."""
    return f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--sdk-agent":
        sdk_agent(Path(sys.argv[2]))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--mcp-floor":
        mcp_floor(int(sys.argv[2]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--asks", type=int, default=200, help="asks each way (200)")
    bench_main(p, run, report)


if __name__ == "__main__":
    main()
