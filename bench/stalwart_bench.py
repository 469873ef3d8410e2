"""What the stalwart bridge adds to an answer's round trip.

Run: ``python bench/stalwart_bench.py [--rounds N]``.

The reference server (``fixtures/stalwart``) and the bridge run in this process, the server's
run store on a SQLite file. Per round the server pauses twice on one thread (the same thread
every round); the bridge shows
both as asks. One is answered through the bridge (``POST /asks/{id}/reply`` on its Unix socket:
the SDK's checks, the ledger, ``POST /resume``, the outcome recorded), the other by a direct
``POST /threads/{id}/resume`` to the server (the baseline), in random order. Printed: p50 and
p99 of each, the bridge's added time, and the CPU time of this process per answer.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import time
from typing import Any

import aiohttp

from bench._common import bench_main, heading, pct, ratio, row, short_dir
from bridges.stalwart import Bridge, StalwartConfig
from fixtures.stalwart.server import Worker
from fixtures.stalwart.store import RunStore


async def run(args: argparse.Namespace) -> dict[str, Any]:
    bridge_ms: list[float] = []
    direct_ms: list[float] = []
    with short_dir("sb-") as tmp:
        store = RunStore(tmp / "runs.db")
        async with Worker(store).serve() as url:
            bridge = Bridge(StalwartConfig(url=url), state_path=tmp / "bridge.db")
            await bridge.start()
            runner = await bridge.agent.serve_unix(tmp / "b.sock")
            cpu0 = time.process_time()
            try:
                conn = aiohttp.UnixConnector(path=str(tmp / "b.sock"))
                async with (
                    aiohttp.ClientSession(base_url="http://agent", connector=conn) as agent,
                    aiohttp.ClientSession(base_url=url) as server,
                ):
                    for n in range(args.rounds):
                        await one_round(n, store, bridge, agent, server, bridge_ms, direct_ms)
            finally:
                cpu = time.process_time() - cpu0
                await runner.close()
                await bridge.close()
    return {"bridge": bridge_ms, "direct": direct_ms, "cpu": cpu, "rounds": args.rounds}


async def one_round(
    n: int,
    store: RunStore,
    bridge: Bridge,
    agent: aiohttp.ClientSession,
    server: aiohttp.ClientSession,
    bridge_ms: list[float],
    direct_ms: list[float],
) -> None:
    thread = "t-bench"  # one thread, so one stream: the server's stream cost stays out
    await bridge.thread(thread)
    turn = await asyncio.to_thread(store.message, thread, f"charge 1 for {n}000 and 2 for 2000")
    await bridge.sync(thread)
    via_bridge, direct = turn.interrupts

    async def through_bridge() -> None:
        body = {"request_id": secrets.token_hex(8), "version": 1, "answer": {"option": "skip"}}
        started = time.perf_counter()
        async with agent.post(f"/asks/{via_bridge['id']}/reply", json=body) as answer:
            outcome = (await answer.json())["outcome"]
        bridge_ms.append((time.perf_counter() - started) * 1000)
        assert outcome == "accepted", outcome

    async def straight() -> None:
        body = {"interrupt_id": direct["id"], "decision": "skip", "token": direct["token"]}
        started = time.perf_counter()
        async with server.post(f"/threads/{thread}/resume", json=body) as answer:
            status = answer.status
            await answer.read()
        direct_ms.append((time.perf_counter() - started) * 1000)
        assert status == 200, status

    order = [through_bridge, straight]
    random.shuffle(order)
    for step in order:
        await step()
        await asyncio.sleep(0.01)


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    heading(f"answer round trip, {results['rounds']} answers each")
    bridge, direct = results["bridge"], results["direct"]
    for label, samples in (("through the bridge", bridge), ("straight to the server", direct)):
        row(label, f"p50 {pct(samples, 50):.2f} ms, p99 {pct(samples, 99):.2f} ms")
    added50 = pct(bridge, 50) - pct(direct, 50)
    added99 = pct(bridge, 99) - pct(direct, 99)
    row("added by the bridge", f"p50 {added50:.2f} ms, p99 {added99:.2f} ms")
    row("ratio p50", ratio(pct(bridge, 50), pct(direct, 50)))
    row("CPU of this process per round", f"{results['cpu'] / results['rounds'] * 1000:.2f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=200)
    bench_main(p, run, report)


if __name__ == "__main__":
    main()
