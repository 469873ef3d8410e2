"""What the LangGraph bridge adds: an interrupt's round trip, and a streamed reply's pace.

Run: ``python bench/langgraph_bench.py [--rounds N] [--words N]``.

Round trip: an answer posted (``POST /asks/{id}/reply`` on the Unix socket) until the next
ask is listed (``GET /conversations/{id}``), through the bridge (the graph resumed by id, run
to its next ``interrupt()``, the ask raised) in-process and as the client of an Agent Server
on loopback (the fake of its HTTP API, or ``langgraph dev`` when ``COLLIE_LANGGRAPH_DEV``
names its command) and, in the same run, from an SDK agent that raises its next ask when the
last is answered (the baseline). Streaming: a fake model's reply
of ``--words`` words, chunks per second through the bridge (each chunk a ``reply`` delta)
beside the graph's own ``astream(stream_mode="messages")``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench._common import bench_main, heading, pct, ratio, row, short_dir
from bridges.langgraph.backend import Backend, InProcess
from bridges.langgraph.bridge import LangGraphBridge
from bridges.langgraph.server import Server
from fixtures.langgraph.server import DEV
from wire.agent import Agent


async def next_ask(session: aiohttp.ClientSession, conv: str, after: str | None) -> dict[str, Any]:
    """The conversation's open ask once it is not ``after``."""
    while True:
        async with session.get(f"/conversations/{conv}") as got:
            asks = (await got.json()).get("asks", [])
        if asks and asks[0]["id"] != after:
            return dict(asks[0])
        await asyncio.sleep(0.001)


async def rounds(sock: Path, conv: str, count: int, samples: list[float]) -> None:
    """Answer ``count`` asks one after the other, timing each answer to the next ask."""
    conn = aiohttp.UnixConnector(path=str(sock))
    async with aiohttp.ClientSession(base_url="http://agent", connector=conn) as session:
        ask = await next_ask(session, conv, None)
        for _ in range(count):
            body = {"request_id": secrets.token_hex(8), "version": 1, "answer": {"text": "go"}}
            started = time.perf_counter()
            async with session.post(f"/asks/{ask['id']}/reply", json=body) as answer:
                assert (await answer.json())["outcome"] == "accepted"
            ask = await next_ask(session, conv, ask["id"])
            samples.append((time.perf_counter() - started) * 1000)


async def start_thread(session: aiohttp.ClientSession, text: str) -> str:
    body = {"request_id": secrets.token_hex(8), "starter": "thread"}
    async with session.post("/conversations", json=body) as got:
        conv = str((await got.json())["conversation_id"])
    said = {"request_id": secrets.token_hex(8), "text": text}
    async with session.post(f"/conversations/{conv}/messages", json=said) as got:
        assert (await got.json())["outcome"] == "accepted"
    return conv


async def bridge_rounds(tmp: Path, count: int, backend: Backend, name: str) -> list[float]:
    """Round trips through the bridge on ``backend`` (serving the ``looping`` graph)."""
    bridge = LangGraphBridge(
        backend, state=tmp / f"{name}.db", input="fixtures.langgraph.graphs:said"
    )
    await bridge.start()
    sock = tmp / f"{name}.sock"
    runner = await bridge.serve_unix(sock)
    samples: list[float] = []
    try:
        conn = aiohttp.UnixConnector(path=str(sock))
        async with aiohttp.ClientSession(base_url="http://agent", connector=conn) as session:
            conv = await start_thread(session, "go")
        await rounds(sock, conv, count, samples)
    finally:
        await runner.close()
        await bridge.close()
    return samples


async def server_rounds(tmp: Path, count: int) -> tuple[list[float], list[float]]:
    """Round trips through the bridge as an Agent Server's client (the fake server, or
    ``langgraph dev`` when ``COLLIE_LANGGRAPH_DEV`` names it), the server on loopback; and
    the server's own: a resume by a bare ``langgraph-sdk`` client until the next interrupt."""
    from langgraph_sdk import get_client

    from fixtures.langgraph.server import launch, named_dev

    running = await launch(tmp, {}, {"looping": "fixtures.langgraph.graphs:looping"}, named_dev())
    url = running.url
    client = get_client(url=url)
    try:
        served = await bridge_rounds(tmp, count, Server(url, "looping", None), "server")
        thread = (await client.threads.create())["thread_id"]
        given: Any = {"said": ["go"]}
        await drain(client.runs.stream(thread, "looping", input=given))
        own: list[float] = []
        for _ in range(count):
            started = time.perf_counter()
            [waiting] = (await client.threads.get_state(thread))["interrupts"]
            command: Any = {"resume": {waiting["id"]: "go"}}
            await drain(client.runs.stream(thread, "looping", command=command))
            own.append((time.perf_counter() - started) * 1000)
        return served, own
    finally:
        await client.aclose()
        running.stop()


async def drain(parts: Any) -> None:
    """A run's stream read to its end."""
    async for _ in parts:
        pass


async def sdk_rounds(tmp: Path, count: int) -> list[float]:
    agent = Agent(state_path=tmp / "a.db", runtime="bench")
    await agent.start()
    runner = await agent.serve_unix(tmp / "a.sock")
    conv = await agent.open_conversation(id="c-bench", title="bench")

    async def asking() -> None:
        for n in range(count + 1):
            await (await conv.ask(kind="text", title="Again?", id=f"a{n}")).wait()

    task = asyncio.create_task(asking())
    samples: list[float] = []
    try:
        await rounds(tmp / "a.sock", conv.id, count, samples)
    finally:
        task.cancel()
        await runner.close()
        await agent.close()
    return samples


async def streamed(tmp: Path, words: int) -> tuple[float, float, int]:
    """Chunks per second: through the bridge, and the graph's own ``astream``."""
    from langgraph.checkpoint.memory import InMemorySaver

    from fixtures.langgraph.graphs import chat

    text = " ".join(f"w{n}" for n in range(words))
    chunks = 0
    started = time.perf_counter()
    own = chat.copy(update={"checkpointer": InMemorySaver()})
    config = {"configurable": {"thread_id": "own"}}
    message = {"messages": [{"role": "user", "content": text}]}
    async for _ in own.astream(message, config, stream_mode="messages"):
        chunks += 1
    own_rate = chunks / (time.perf_counter() - started)
    bridge = LangGraphBridge(
        InProcess("fixtures.langgraph.graphs:chat", tmp / "s.sqlite"), state=tmp / "s.db"
    )
    await bridge.start()
    runner = await bridge.serve_unix(tmp / "s.sock")
    try:
        conn = aiohttp.UnixConnector(path=str(tmp / "s.sock"))
        async with aiohttp.ClientSession(base_url="http://agent", connector=conn) as session:
            started = time.perf_counter()
            conv = await start_thread(session, text)
            while True:
                async with session.get(f"/conversations/{conv}") as got:
                    items = (await got.json()).get("items", [])
                if any(i["kind"] == "reply" and i.get("final", True) for i in items):
                    break
                await asyncio.sleep(0.005)
            bridge_rate = chunks / (time.perf_counter() - started)
    finally:
        await runner.close()
        await bridge.close()
    return bridge_rate, own_rate, chunks


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with short_dir("lg-") as tmp:
        local = InProcess("fixtures.langgraph.graphs:looping", tmp / "g.sqlite")
        bridge = await bridge_rounds(tmp, args.rounds, local, "local")
        served, own = await server_rounds(tmp, args.rounds)
        sdk = await sdk_rounds(tmp, args.rounds)
        bridge_rate, own_rate, chunks = await streamed(tmp, args.words)
    return {
        "bridge": bridge,
        "served": served,
        "own": own,
        "server": "langgraph dev" if os.environ.get(DEV) else "the fake Agent Server",
        "sdk": sdk,
        "bridge_rate": bridge_rate,
        "own_rate": own_rate,
        "chunks": chunks,
        "rounds": args.rounds,
    }


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    heading(f"interrupt round trip, answer to next ask, {results['rounds']} each")
    bridge, served, sdk = results["bridge"], results["served"], results["sdk"]
    for label, samples in (
        ("through the LangGraph bridge, in-process", bridge),
        (f"through the bridge, server mode ({results['server']})", served),
        ("the same server, a bare langgraph-sdk resume", results["own"]),
        ("an SDK agent", sdk),
    ):
        row(label, f"p50 {pct(samples, 50):.2f} ms, p99 {pct(samples, 99):.2f} ms")
    row("ratio p50, in-process / SDK", ratio(pct(bridge, 50), pct(sdk, 50)))
    row("ratio p50, server mode / SDK", ratio(pct(served, 50), pct(sdk, 50)))
    row("ratio p50, server mode / bare resume", ratio(pct(served, 50), pct(results["own"], 50)))
    heading(f"a streamed reply, {results['chunks']} chunks")
    row("through the bridge", f"{results['bridge_rate']:.0f} chunks/s")
    row("the graph's own astream()", f"{results['own_rate']:.0f} chunks/s")
    row("ratio", ratio(results["bridge_rate"], results["own_rate"]))


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--words", type=int, default=1000)
    bench_main(p, run, report)


if __name__ == "__main__":
    main()
