"""What the LangGraph bridge adds: an interrupt's round trip, and a streamed reply's pace.

Run: ``python bench/langgraph_bench.py [--rounds N] [--words N]``.

Round trip: an answer posted (``POST /asks/{id}/reply`` on the Unix socket) until the next
ask is listed (``GET /conversations/{id}``), through the bridge (the graph resumed by id, run
to its next ``interrupt()``, the ask raised) and, in the same run, from an SDK agent that
raises its next ask when the last is answered (the baseline). Streaming: a fake model's reply
of ``--words`` words, chunks per second through the bridge (each chunk a ``reply`` delta)
beside the graph's own ``astream(stream_mode="messages")``.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench._common import bench_main, heading, pct, ratio, row, short_dir
from bridges.langgraph.backend import InProcess
from bridges.langgraph.bridge import LangGraphBridge
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


async def bridge_rounds(tmp: Path, count: int) -> list[float]:
    bridge = LangGraphBridge(
        InProcess("fixtures.langgraph.graphs:looping", tmp / "g.sqlite"),
        state=tmp / "b.db",
        input="fixtures.langgraph.graphs:said",
    )
    await bridge.start()
    runner = await bridge.serve_unix(tmp / "b.sock")
    samples: list[float] = []
    try:
        conn = aiohttp.UnixConnector(path=str(tmp / "b.sock"))
        async with aiohttp.ClientSession(base_url="http://agent", connector=conn) as session:
            conv = await start_thread(session, "go")
        await rounds(tmp / "b.sock", conv, count, samples)
    finally:
        await runner.close()
        await bridge.close()
    return samples


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
        bridge = await bridge_rounds(tmp, args.rounds)
        sdk = await sdk_rounds(tmp, args.rounds)
        bridge_rate, own_rate, chunks = await streamed(tmp, args.words)
    return {
        "bridge": bridge,
        "sdk": sdk,
        "bridge_rate": bridge_rate,
        "own_rate": own_rate,
        "chunks": chunks,
        "rounds": args.rounds,
    }


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    heading(f"interrupt round trip, answer to next ask, {results['rounds']} each")
    bridge, sdk = results["bridge"], results["sdk"]
    for label, samples in (("through the LangGraph bridge", bridge), ("an SDK agent", sdk)):
        row(label, f"p50 {pct(samples, 50):.2f} ms, p99 {pct(samples, 99):.2f} ms")
    row("ratio p50", ratio(pct(bridge, 50), pct(sdk, 50)))
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
