"""The answer round trip (T1), phone request to outcome.

Run: ``python bench/answer_bench.py [--rounds N] [--settle S] [--profile DIR] [--py-spy DIR]``.

``POST /api/v1/agents/{agent}/asks/{ask}/answer`` over HTTP on 127.0.0.1, to an SDK agent on a
Unix socket and to one on HTTP (127.0.0.1), beside a direct ``POST /asks/{id}/reply`` to the
same agent in the same run. Each answer goes to a fresh ask: per round the agent raises two,
the phone's live stream shows both, and after ``--settle`` seconds (a person takes longer to
tap) one is answered through the gateway and the other directly, in random order, ``--settle``
seconds apart (so neither waits for the gateway to handle the other's events).
The agents live in a helper process, the gateway in another; this process is the phone.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import secrets
import time
from typing import Any

import aiohttp

from bench._common import (
    Child,
    Json,
    Probe,
    Timer,
    bench_main,
    heading,
    pct,
    ratio,
    row,
    short_dir,
    sse_events,
    start_agents,
    start_gateway,
    verdict,
    write_sources,
)

ADDED_P99_TARGET_MS = 1.0  # ours: the gateway's added p99 per answer (Unix socket)
CPU_PER_ASK_TARGET_MS = 1.0  # ours: raised, shown, answered, resolved, one phone following
CONV = "c-bench"


class Visible:
    """Which asks the phone's live stream has shown (the SDK's ask ids: ``a-`` + 16 hex)."""

    ASK_ID = re.compile(r"a-[0-9a-f]{16}")

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.changed = asyncio.Event()
        self.events = 0
        self.bytes = 0

    async def wait(self, ask_ids: list[str], within: float) -> None:
        async with asyncio.timeout(within):
            while not self.seen.issuperset(ask_ids):
                self.changed.clear()
                await self.changed.wait()
        self.seen.difference_update(ask_ids)

    async def follow(self, http: aiohttp.ClientSession) -> None:
        async with http.get("/api/v1/events", timeout=aiohttp.ClientTimeout(total=None)) as resp:
            async for event in sse_events(resp):
                self.events += 1
                self.bytes += len(event.data)
                found = self.ASK_ID.findall(event.data)
                if found:
                    self.seen.update(found)
                    self.changed.set()


async def one_transport(
    agent: str,
    agents: Child,
    gw: aiohttp.ClientSession,
    direct: aiohttp.ClientSession,
    direct_base: str,
    visible: Visible,
    args: argparse.Namespace,
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"gateway": [], "direct": []}
    rng = random.Random(5)
    answer = {"option": "main"}

    async def via_gateway(ask: Json) -> None:
        body = {"request_id": secrets.token_hex(8), "version": ask["version"], "answer": answer}
        t = time.perf_counter()
        async with gw.post(f"/api/v1/agents/{agent}/asks/{ask['ask']}/answer", json=body) as r:
            data: Any = await r.json()
        times["gateway"].append(time.perf_counter() - t)
        if r.status != 200 or data["outcome"] != "accepted":
            raise RuntimeError(f"gateway answer: {r.status} {data}")

    async def via_agent(ask: Json) -> None:
        body = {"request_id": secrets.token_hex(8), "version": ask["version"], "answer": answer}
        t = time.perf_counter()
        async with direct.post(f"{direct_base}/asks/{ask['ask']}/reply", json=body) as r:
            data: Any = await r.json()
        times["direct"].append(time.perf_counter() - t)
        if r.status != 200 or data["outcome"] != "accepted":
            raise RuntimeError(f"direct reply: {r.status} {data}")

    clock = Timer()
    for index in range(args.rounds + args.warmup):
        asks = [await agents.call({"cmd": "ask", "agent": agent}) for _ in range(2)]
        await visible.wait([a["ask"] for a in asks], 10.0)
        await asyncio.sleep(args.settle)
        pair = [via_gateway(asks[0]), via_agent(asks[1])]
        if rng.random() < 0.5:
            pair.reverse()
        await pair[0]
        await asyncio.sleep(args.settle)  # the first answer's events handled before the second
        await pair[1]
        if index < args.warmup:
            times["gateway"].clear()
            times["direct"].clear()
        if clock.elapsed > args.budget:
            break
    return times


async def run(args: argparse.Namespace) -> Json:
    results: Json = {}
    with short_dir() as tmp:
        spec = [
            {
                "name": "unix",
                "socket": str(tmp / "unix.sock"),
                "state": str(tmp / "unix.db"),
                "chat": True,
            },
            {"name": "http", "tcp": True, "state": str(tmp / "http.db"), "chat": True},
        ]
        agents, where = await start_agents(tmp, spec)
        gateway = None
        try:
            sources = write_sources(tmp, where)
            extra = []
            if args.profile:  # on the loop thread's CPU clock, as history_bench.py's
                extra = ["--profile", str(args.profile / "gateway-answer.prof")]
                extra += ["--profile-clock", "cpu"]
            if args.breakdown:
                extra.append("--trace-answers")
            if args.count:
                extra.append("--count")
            gateway, ready = await start_gateway(sources, tmp / "gateway.db", *extra)
            probe = Probe(gateway, args.profile, args.py_spy)
            base = f"http://127.0.0.1:{ready['port']}"
            visible = Visible()
            async with (
                aiohttp.ClientSession(base, connector=aiohttp.TCPConnector(limit=1)) as gw,
                aiohttp.ClientSession(base) as phone,
            ):
                follower = asyncio.create_task(visible.follow(phone))
                for agent in ("unix", "http"):  # the phone shows the chat, its cards live
                    async with gw.get(f"/api/v1/agents/{agent}/conversations/{CONV}") as resp:
                        assert resp.status == 200, await resp.text()
                for agent in ("unix", "http"):
                    w = where[agent]
                    if w["socket"]:
                        connector: aiohttp.BaseConnector = aiohttp.UnixConnector(path=w["socket"])
                    else:
                        connector = aiohttp.TCPConnector(limit=1)
                    async with aiohttp.ClientSession(connector=connector) as direct:
                        await probe.begin(agent)
                        if args.count:
                            await gateway.call({"cmd": "count_start"})
                        events, size = visible.events, visible.bytes
                        results[agent] = await one_transport(
                            agent, agents, gw, direct, w["url"], visible, args
                        )
                        await probe.end(agent)
                        if args.count:
                            results[f"{agent} counts"] = await gateway.call({"cmd": "count_take"})
                        if args.breakdown:
                            results[f"{agent} spans"] = await gateway.call({"cmd": "answer_spans"})
                        results[f"{agent} phone"] = (visible.events - events, visible.bytes - size)
                follower.cancel()
                await asyncio.gather(follower, return_exceptions=True)
        finally:
            if gateway is not None:
                await gateway.close()
            await agents.close()
    results["probe"] = probe
    return results


def report(r: Json, args: argparse.Namespace) -> None:
    heading("the answer round trip: phone request -> outcome (fresh ask each)")
    for agent, text in (("unix", "agent on a Unix socket"), ("http", "agent on HTTP 127.0.0.1")):
        g, d = r[agent]["gateway"], r[agent]["direct"]
        added50 = (pct(g, 50) - pct(d, 50)) * 1e3
        added99 = (pct(g, 99) - pct(d, 99)) * 1e3
        row(text, f"{len(g)} answers each way, settle {args.settle:g} s")
        row(
            "  gateway POST .../answer p50/p99",
            f"{pct(g, 50) * 1e3:.2f} / {pct(g, 99) * 1e3:.2f} ms",
        )
        row("  direct POST /asks/{id}/reply", f"{pct(d, 50) * 1e3:.2f} / {pct(d, 99) * 1e3:.2f} ms")
        row(
            "  ratio gateway / direct",
            f"p50 {ratio(pct(g, 50), pct(d, 50))}, p99 {ratio(pct(g, 99), pct(d, 99))}",
        )
        row("  the gateway adds (p50, p99)", f"{added50:.2f} ms, {added99:.2f} ms")
        rounds = len(g) + args.warmup
        cpu = r["probe"].cpu[agent]
        row(
            "  gateway CPU per round",
            f"{cpu / rounds * 1e3:.2f} ms (2 asks raised, shown, answered, resolved)",
        )
        per_ask = cpu / rounds / 2 * 1e3
        row(
            f"  target CPU <= {CPU_PER_ASK_TARGET_MS:g} ms an ask",
            f"{per_ask:.2f} ms: {verdict(per_ask <= CPU_PER_ASK_TARGET_MS)}",
        )
        counts = r.get(f"{agent} counts")
        if counts:
            top = counts.pop("top_sql")
            asks = rounds * 2
            row("  per ask (--count)", ", ".join(f"{v / asks:.1f} {k}" for k, v in counts.items()))
            for text, n in top[:8]:
                print(f"      {n / asks:5.2f}  {text}")
        events, size = r[f"{agent} phone"]
        row("  phone stream per round", f"{events / rounds:.1f} events, {size / rounds:,.0f} bytes")
        row(
            f"  target adds <= {ADDED_P99_TARGET_MS:g} ms at p99",
            f"{added99:.2f} ms: {verdict(added99 <= ADDED_P99_TARGET_MS)}",
        )
        spans = r.get(f"{agent} spans")
        if spans:
            row("  inside the gateway (--breakdown)", "p50 / p99")
            for key, v in spans.items():
                if key == "sqlite calls":
                    row("    SQLite round trips per answer", f"{v['mean']:.1f}")
                else:
                    row(f"    {key}", f"{v['p50_ms']:.2f} / {v['p99_ms']:.2f} ms")
    r["probe"].print()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=250, help="answers each way per transport")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--settle", type=float, default=0.08, help="seconds from shown to tap")
    p.add_argument("--budget", type=float, default=60.0, help="seconds at most per transport")
    p.add_argument("--count", action="store_true", help="count SQL, encodes and masks per ask")
    p.add_argument(
        "--breakdown",
        action="store_true",
        help="time the answer path's parts inside the gateway (small overhead)",
    )
    bench_main(p, run, report)


if __name__ == "__main__":
    main()
