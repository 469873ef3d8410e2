"""What the ACP bridge adds — a permission's round trip, and a streamed reply's delta
rate — each beside the same ACP agent driven directly, in the same run.

The agent is ``fixtures/acp/scripted.py`` (on the ``agent-client-protocol`` package):

- (a) ``bench N``: N permission requests one after another; the agent itself times each (from
  sending ``session/request_permission`` to reading the answer). Direct: the package's own
  ACP client answers each at once. Bridged: the bridge (``python -m bridges.acp``, its own
  process) raises a wire ask; a wire client reading ``GET /events`` answers each
  ``ask.raised`` at once with ``POST /asks/{id}/reply``. Added latency = bridged − direct
  (p50, p99), and the bridge's CPU per round trip.
- (b) ``stream N``: N message chunks ("w1 ", "w2 " …). Direct: the ACP client counts
  ``agent_message_chunk`` notifications; bridged: the wire client counts the chunks in the
  reply's ``item.appended`` + ``item.delta`` events (the bridge merges chunks it reads
  together, so one delta may carry several). Rate = (n − 1) / (last arrival − first arrival).

Run: ``python bench/acp_bench.py [--asks 200] [--deltas 5000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from acp import Client, spawn_agent_process, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    RequestPermissionResponse,
)

from bench._common import (
    Spy,
    bench_main,
    cpu_seconds,
    heading,
    pct,
    profile_top,
    ratio,
    row,
    short_dir,
    sse_events,
)
from bench.mcp_bench import cpu_rows, sdk

REPO = Path(__file__).resolve().parent.parent
AGENT = [sys.executable, "-m", "fixtures.acp.scripted"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}

Json = dict[str, Any]


class _Direct:
    """The package's ACP client, answering every permission at once and timing chunks."""

    def __init__(self) -> None:
        self.chunks: list[float] = []
        self.last_text = ""

    async def request_permission(self, options: list[Any], **kwargs: Any) -> Any:
        outcome = AllowedOutcome(outcome="selected", option_id=options[0].option_id)
        return RequestPermissionResponse(outcome=outcome)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "session_update", "") == "agent_message_chunk":
            self.chunks.append(time.perf_counter())
            self.last_text = getattr(update.content, "text", "")

    def on_connect(self, conn: Any) -> None:
        pass


async def direct(asks: int, deltas: int) -> Json:
    client = _Direct()
    handler: Client = client  # type: ignore[assignment]
    async with spawn_agent_process(handler, *AGENT, env=ENV, cwd=str(REPO)) as (conn, _proc):
        await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities())
        session = await conn.new_session(cwd=str(REPO), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[text_block(f"bench {asks}")])
        trips = [float(t) for t in client.last_text.split()[1:]]
        client.chunks.clear()
        await conn.prompt(session_id=session.session_id, prompt=[text_block(f"stream {deltas}")])
        arrivals = list(client.chunks)
    return {"trips": trips, "arrivals": arrivals}


async def bridged(asks: int, deltas: int, profile: Path | None, spy_dir: Path | None) -> Json:
    with short_dir("ab-") as tmp:
        sock = tmp / "acp.sock"
        prof = ("-m", "cProfile", "-o", str(profile / "bridge.prof")) if profile else ()
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, *prof, "-m", "bridges.acp", "--socket", str(sock)),
            *("--state", str(tmp / "acp.db"), "--cwd", str(REPO), "--", *AGENT),
            stdout=asyncio.subprocess.PIPE,
            env=ENV,
        )
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 60.0)  # "bridge acp: serving …"
        try:
            conn = aiohttp.UnixConnector(path=str(sock))
            async with aiohttp.ClientSession(connector=conn) as http:
                return await _drive(http, proc.pid, asks, deltas, spy_dir)
        finally:
            proc.terminate()
            await proc.wait()


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (the bridge's ACP agent)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


async def _drive(
    http: aiohttp.ClientSession, pid: int, asks: int, deltas: int, spy_dir: Path | None
) -> Json:
    base = "http://agent"
    async with http.post(
        f"{base}/conversations", json={"request_id": "start", "starter": "folder-1"}
    ) as resp:
        conv = (await resp.json())["conversation_id"]
    replies: list[str] = []
    arrivals: list[float] = []
    streaming: set[str] = set()
    done = asyncio.Event()
    stream_open = asyncio.Event()

    async def follow() -> None:
        async with http.get(f"{base}/events") as resp:
            stream_open.set()
            async for event in sse_events(resp):
                data = json.loads(event.data)
                kind = data["type"]
                if kind == "ask.raised":
                    ask = data["ask"]
                    body = {
                        "request_id": "r-" + ask["id"],
                        "version": ask.get("version", 1),
                        "answer": {"option": "o1"},
                    }
                    async with http.post(f"{base}/asks/{ask['id']}/reply", json=body) as r:
                        await r.read()
                elif kind == "item.appended" and data["item"]["kind"] == "reply":
                    item = data["item"]
                    if item.get("final", True) is False:
                        streaming.add(item["id"])
                        arrivals.extend([time.perf_counter()] * item["text"].count("w"))
                    else:
                        replies.append(item.get("text", ""))
                elif kind == "item.delta" and data["item_id"] in streaming:
                    # The bridge merges chunks read together: count the agent's chunks.
                    arrivals.extend([time.perf_counter()] * data["text"].count("w"))
                elif (
                    kind == "item.updated"
                    and data["item"]["kind"] == "reply"
                    and data["item"].get("final", True)
                ):
                    replies.append(data["item"].get("text", ""))
                    done.set()

    follower = asyncio.create_task(follow())
    await stream_open.wait()

    async def say(text: str) -> str:
        done.clear()
        async with http.post(
            f"{base}/conversations/{conv}/messages", json={"request_id": text, "text": text}
        ) as resp:
            await resp.read()
        await asyncio.wait_for(done.wait(), 120.0)
        return replies[-1]

    peer = _children(pid)[0]
    spy = Spy(pid, spy_dir / "acp-bridge.txt") if spy_dir else None
    if spy is not None:
        await spy.start()
    cpu0, peer0 = cpu_seconds(pid), cpu_seconds(peer)
    trips = [float(t) for t in (await say(f"bench {asks}")).split()[1:]]
    cpu_asks, cpu_peer = cpu_seconds(pid) - cpu0, cpu_seconds(peer) - peer0
    spied = await spy.stop(25) if spy is not None else ""
    arrivals.clear()
    cpu0 = cpu_seconds(pid)
    await say(f"stream {deltas}")
    cpu_stream = cpu_seconds(pid) - cpu0
    follower.cancel()
    return {
        "trips": trips,
        "arrivals": list(arrivals),
        "cpu_per_ask": cpu_asks / max(asks, 1),
        "peer_per_ask": cpu_peer / max(asks, 1),
        "spied": spied,
        "cpu_per_delta": cpu_stream / max(deltas, 1),
        "deltas": len(set(arrivals)),
    }


def _rate(arrivals: list[float]) -> float:
    if len(arrivals) < 2 or arrivals[-1] == arrivals[0]:
        return float("nan")
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])


async def run(args: argparse.Namespace) -> Json:
    return {
        "sdk": await sdk(args.asks),
        "direct": await direct(args.asks, args.deltas),
        "bridged": await bridged(args.asks, args.deltas, args.profile, args.py_spy),
    }


def report(results: Json, args: argparse.Namespace) -> None:
    d, b = results["direct"], results["bridged"]
    heading(f"(a) permission round trip, {args.asks} asks, as the agent times it")
    for q in (50, 99):
        dq, bq = pct(d["trips"], q) * 1000, pct(b["trips"], q) * 1000
        row(f"p{q} direct / bridged", f"{dq:.2f} ms / {bq:.2f} ms ({ratio(bq, dq)})")
        row(f"p{q} added by the bridge", f"{bq - dq:.2f} ms")
    cpu_rows(b["cpu_per_ask"], results["sdk"]["cpu_per_ask"], "SDK agent raising as many asks")
    row("the ACP agent's own CPU (bridged)", f"{b['peer_per_ask'] * 1000:.2f} ms")
    if b["spied"]:
        heading("py-spy: the bridge's process during the asks")
        print(b["spied"])
    heading(f"(b) delta rate, one reply of {args.deltas} chunks")
    dr, br = _rate(d["arrivals"]), _rate(b["arrivals"])
    row("direct / bridged", f"{dr:,.0f} /s / {br:,.0f} /s ({ratio(br, dr)} of direct)")
    row("chunks seen direct / bridged", f"{len(d['arrivals'])} / {len(b['arrivals'])}")
    row("item.delta events (bridged)", str(b["deltas"]))
    row("bridge CPU per delta", f"{b['cpu_per_delta'] * 1e6:.0f} µs")
    if args.profile is not None:
        heading("the bridge's process under cProfile (--profile)")
        print(profile_top(args.profile / "bridge.prof"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--asks", type=int, default=200, help="permission round trips (200)")
    p.add_argument("--deltas", type=int, default=5000, help="chunks of the streamed reply")
    bench_main(p, run, report)


if __name__ == "__main__":
    main()
