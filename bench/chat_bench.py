"""A streamed reply through the gateway (C3), and one list page of a long history (L5).

Run: ``python bench/chat_bench.py [--deltas N] [--rounds N] [--profile DIR]``.

(a) 10,000 ``item.delta`` events: deltas/s reaching a phone's live stream
(``GET /api/v1/events``, read with aiohttp) beside the same deltas read straight from the
agent's own ``GET /events``, in two modes — *live* (both readers follow while the agent writes
as fast as the SDK lets it) and *backlog* (the deltas are written while the gateway's link is
away; then the agent's stream is replayed straight, and the gateway catches up).
(b) ``GET /api/v1/agents/{agent}/conversations`` (a visit: it reads the first 100 closed
conversations from the agent) for an agent with 100,000 closed conversations and one with
1,000, beside the agent's own ``GET /conversations?state=closed&limit=100``.
The agents live in a helper process, the gateway in another; this process is the phone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
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
from wire.agent import Agent

RATE_TARGET = 0.5  # ours: the gateway keeps at least half the direct rate
RELAY_TARGET_US = 50  # ours: gateway CPU per live delta, one phone following
RELAY10_TARGET_US = 80  # ours: ten phones
WRITE_TARGET = 20_000  # ours: deltas/s one SDK agent writes (group commit)
LIST_TARGET_MS = 20.0  # ours: one closed-list page
CHAT = "chat"
CONV = "c-bench"
TOKEN = re.compile(r"w\d+ ")  # the text of one delta (bench/_agents.py: stream)


@dataclass
class Arrivals:
    """When each delta reached a reader (counted by its text, so a reader that receives
    several deltas merged into one event counts them all)."""

    want: int
    times: list[float] = field(default_factory=list)
    resets: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def hit(self, deltas: int) -> None:
        """``deltas`` of the reply's deltas arrived now (a phone event may carry several)."""
        self.times.extend([time.perf_counter()] * deltas)
        if len(self.times) >= self.want:
            self.done.set()

    def rate(self) -> float:
        if len(self.times) < 2:
            return 0.0
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


async def phone_reader(http: aiohttp.ClientSession, url: str, box: list[Arrivals]) -> None:
    """The phone's live stream: counts ``chat.delta`` of the chat into ``box[0]``."""
    async with http.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
        async for event in sse_events(resp):
            if event.event == "reset":
                box[0].resets += 1
            elif event.event == "chat.delta" and f'"conversation_id":"{CONV}"' in event.data:
                box[0].hit(len(TOKEN.findall(event.data)))


async def direct_reader(socket: str, after: int, arrivals: Arrivals) -> None:
    """The agent's own stream from ``after``: counts ``item.delta`` until ``arrivals.want``."""
    connector = aiohttp.UnixConnector(path=socket)
    async with aiohttp.ClientSession(connector=connector) as http:
        headers = {"Last-Event-ID": str(after)}
        async with http.get("http://agent/events", headers=headers) as resp:
            async for event in sse_events(resp):
                if event.event == "reset":
                    arrivals.resets += 1
                elif event.event == "item.delta":
                    arrivals.hit(len(TOKEN.findall(event.data)))
                    if arrivals.done.is_set():
                        return


async def wait_done(arrivals: Arrivals, within: float) -> None:
    try:
        async with asyncio.timeout(within):
            await arrivals.done.wait()
    except TimeoutError:
        pass


async def deltas_part(
    agents: Child,
    probe: Probe,
    port: int,
    direct_socket: str,
    n: int,
    paced: int,
    live: bool,
    gap: float = 0.0,
    rate: float = 0.0,
) -> Json:
    out: Json = {}
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession(base) as http:
        box = [Arrivals(n)]
        phone = asyncio.create_task(phone_reader(http, "/api/v1/events", box))
        async with http.get(f"/api/v1/agents/{CHAT}/conversations/{CONV}") as resp:
            assert resp.status == 200, await resp.text()  # the phone shows the chat
        await asyncio.sleep(0.2)
        if live:
            # --- live: both readers follow while the agent writes ----------------------------
            before = (await agents.call({"cmd": "last_event", "agent": CHAT}))["last"]
            direct = Arrivals(n)
            reader = asyncio.create_task(direct_reader(direct_socket, before, direct))
            await asyncio.sleep(0.2)
            await probe.begin("live")
            made = await agents.call({"cmd": "stream", "agent": CHAT, "deltas": n}, within=120.0)
            await wait_done(direct, 30.0)
            await wait_done(box[0], 30.0)
            await probe.end("live")
            reader.cancel()
            out["live"] = {"made": made, "direct": direct, "phone": box[0]}
        # --- backlog: written while the gateway's link is away, then caught up ---------------
        box[0] = Arrivals(n)
        await agents.call({"cmd": "pause", "agent": CHAT})
        made = await agents.call({"cmd": "stream", "agent": CHAT, "deltas": n}, within=120.0)
        direct = Arrivals(n)
        reader = asyncio.create_task(direct_reader(direct_socket, made["before"], direct))
        await wait_done(direct, 30.0)
        reader.cancel()
        await probe.begin("backlog")
        await agents.call({"cmd": "resume", "agent": CHAT})
        await wait_done(box[0], 60.0)
        await probe.end("backlog")
        out["backlog"] = {"made": made, "direct": direct, "phone": box[0]}
        # --- paced: each delta committed (and sent) alone, as a model's tokens come ----------
        await probe.begin("idle")  # what the gateway spends doing nothing, for comparison
        idle = Timer()
        await asyncio.sleep(2.0)
        await probe.end("idle")
        out["idle_s"] = idle.elapsed
        for phones in (1, 10):
            boxes = [box] + [[Arrivals(paced)] for _ in range(phones - 1)]
            box[0] = Arrivals(paced)
            more = [asyncio.create_task(phone_reader(http, "/api/v1/events", b)) for b in boxes[1:]]
            await asyncio.sleep(0.3)
            mode = f"paced{phones}"
            await probe.begin(mode)
            took = Timer()
            made = await agents.call(
                {
                    "cmd": "stream",
                    "agent": CHAT,
                    "deltas": paced,
                    "paced": True,
                    "gap": gap,
                    "rate": rate,
                },
                within=120.0,
            )
            for b in boxes:
                await wait_done(b[0], 30.0)
            await probe.end(mode)
            out[mode] = {"made": made, "phones": [b[0] for b in boxes], "s": took.elapsed}
            for task in more:
                task.cancel()
            await asyncio.gather(*more, return_exceptions=True)
        phone.cancel()
        await asyncio.gather(phone, reader, return_exceptions=True)
    return out


async def list_part(port: int, where: Json, rounds: int, budget_s: float) -> Json:
    """Visits of both lists and the agents' own reads, interleaved in random order."""
    times: dict[str, list[float]] = {}
    shapes: dict[str, Any] = {}
    rng = random.Random(4)
    sessions: dict[str, aiohttp.ClientSession] = {}
    gw = aiohttp.ClientSession(f"http://127.0.0.1:{port}", connector=aiohttp.TCPConnector(limit=1))
    try:
        calls: dict[str, tuple[aiohttp.ClientSession, str]] = {}
        for agent in ("closed100k", "closed1k"):
            connector = aiohttp.UnixConnector(path=where[agent]["socket"])
            sessions[agent] = aiohttp.ClientSession(connector=connector)
            calls[f"gateway {agent}"] = (gw, f"/api/v1/agents/{agent}/conversations")
            calls[f"direct {agent}"] = (
                sessions[agent],
                "http://agent/conversations?state=closed&limit=100",
            )
        for key, (http, url) in calls.items():
            times[key] = []
            for _ in range(10):  # warm-up
                async with http.get(url) as resp:
                    body = await resp.read()
            shapes[key] = json.loads(body)
        clock = Timer()
        for _ in range(rounds):
            order = list(calls)
            rng.shuffle(order)
            for key in order:
                http, url = calls[key]
                t = time.perf_counter()
                async with http.get(url) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{url} answered {resp.status}")
                times[key].append(time.perf_counter() - t)
            if clock.elapsed > budget_s:
                break
    finally:
        await gw.close()
        for s in sessions.values():
            await s.close()
    return {"times": times, "shapes": shapes}


async def write_part(tmp: Path, n: int) -> Json:
    """One SDK agent in this process writes ``n`` deltas (group commit), and ``n // 10`` with a
    commit after each (the baseline: one transaction per delta, as the SDK did before)."""
    out: Json = {}
    async with Agent(state_path=tmp / "writer.db") as agent:
        conv = await agent.open_conversation("c-write")

        async def nothing(tx: object) -> None:
            return None

        for mode, count in (("group", n), ("each", n // 10)):
            item = await conv.append(kind="reply", final=False)
            wall, cpu = time.perf_counter(), time.process_time()
            for i in range(count):
                await item.delta(f"w{i} ")
                if mode == "each":
                    await agent._store.transact(nothing)  # commits the delta queued
            await item.finish()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            out[mode] = {"n": count, "rate": count / wall, "cpu_us": cpu / count * 1e6}
    return out


def chat_spec(tmp: Path) -> Json:
    """The agent that streams the replies (with a second socket for the direct reader)."""
    return {
        "name": CHAT,
        "socket": str(tmp / "chat.sock"),
        "extra_sockets": [str(tmp / "chat-direct.sock")],
        "state": str(tmp / "chat.db"),
        "chat": True,
        "keep_events": 100_000,
    }


async def relay_run(args: argparse.Namespace) -> Json:
    """``--relay``: (a2) and its backlog baseline only, ``--repeat`` times; with ``--baseline
    TREE`` each round runs that worktree's gateway first, then this one's (fresh gateways,
    the same agent), so both sides see the same machine."""
    sides: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline is not None:
        sides.insert(0, ("base", args.baseline.resolve()))
    out: dict[str, list[Json]] = {name: [] for name, _ in sides}
    with short_dir() as tmp:
        agents, where = await start_agents(tmp, [chat_spec(tmp)])
        try:
            sources = write_sources(tmp, where)
            for i in range(args.repeat):
                for name, tree in sides:
                    extra = ["--fast"]
                    spy = prof = None
                    if args.py_spy is not None:
                        spy = args.py_spy / f"{name}{i}"
                        spy.mkdir(exist_ok=True)
                    if args.profile is not None:
                        prof = args.profile / f"{name}{i}"
                        prof.mkdir(exist_ok=True)
                        extra += ["--profile", str(prof / "gateway.prof")]
                    gateway, ready = await start_gateway(
                        sources, tmp / f"gw-{name}-{i}.db", *extra, tree=tree
                    )
                    probe = Probe(gateway, prof, spy)
                    try:
                        deltas = await deltas_part(
                            agents,
                            probe,
                            ready["port"],
                            where[CHAT]["extra"][0],
                            args.deltas,
                            args.paced,
                            live=False,
                            gap=args.gap / 1e3,
                            rate=args.rate,
                        )
                    finally:
                        await gateway.close()
                    out[name].append({"deltas": deltas, "probe": probe})
        finally:
            await agents.close()
    return {"relay": out}


def relay_report(r: Json, args: argparse.Namespace) -> None:
    """Per round and side: the gateway's CPU per paced delta (1 and 10 phones), the backlog's."""
    pace = f", {args.gap:g} ms apart" if args.gap else ""
    pace += f", at most {args.rate:g}/s" if args.rate else ""
    heading(
        f"(a2) {args.paced:,} deltas committed one by one{pace}: gateway CPU per live delta "
        f"(process CPU / deltas), {args.repeat} round(s)"
    )
    medians: dict[str, dict[str, float]] = {}
    for name, rounds in r["relay"].items():
        figures: dict[str, list[float]] = {"paced1": [], "paced10": [], "backlog": []}
        for i, one in enumerate(rounds):
            d, cpu = one["deltas"], one["probe"].cpu
            for mode in ("paced1", "paced10"):
                figures[mode].append(cpu[mode] / args.paced * 1e6)
            figures["backlog"].append(cpu["backlog"] / args.deltas * 1e6)
            missing = [
                f"{mode}: {[len(a.times) for a in d[mode]['phones']]}"
                for mode in ("paced1", "paced10")
                if any(len(a.times) != args.paced or a.resets for a in d[mode]["phones"])
            ]
            wrote = args.paced / d["paced1"]["made"]["seconds"]
            row(
                f"  {name} round {i + 1}",
                f"1 phone {figures['paced1'][-1]:.0f} µs, 10 phones {figures['paced10'][-1]:.0f}"
                f" µs, backlog {figures['backlog'][-1]:.0f} µs (agent wrote {wrote:,.0f}/s)"
                + (f" INCOMPLETE {missing}" if missing else ""),
            )
        medians[name] = {k: pct(v, 50) for k, v in figures.items()}
    for name, m in medians.items():
        row(
            f"  {name}: median",
            f"1 phone {m['paced1']:.0f} µs, 10 phones {m['paced10']:.0f} µs, "
            f"backlog {m['backlog']:.0f} µs",
        )
    if "base" in medians:
        b, t = medians["base"], medians["this"]
        row(
            "  ratio this / base (medians)",
            f"1 phone {ratio(t['paced1'], b['paced1'])}, "
            f"10 phones {ratio(t['paced10'], b['paced10'])}",
        )
    t = medians["this"]
    row(f"  target <= {RELAY_TARGET_US} µs (1)", verdict(t["paced1"] <= RELAY_TARGET_US))
    row(f"  target <= {RELAY10_TARGET_US} µs (10)", verdict(t["paced10"] <= RELAY10_TARGET_US))
    for name, rounds in r["relay"].items():
        for i, one in enumerate(rounds):
            if one["probe"].spied or one["probe"].dumps:
                heading(f"{name} round {i + 1}")
                one["probe"].print()


async def run(args: argparse.Namespace) -> Json:
    if args.relay:
        return await relay_run(args)
    with short_dir() as tmp:
        writes = None if args.relay else await write_part(tmp, args.deltas)
        spec = [chat_spec(tmp)]
        if not args.relay:
            spec += [
                {
                    "name": "closed100k",
                    "socket": str(tmp / "c100k.sock"),
                    "state": str(tmp / "c100k.db"),
                    "closed": 100_000,
                },
                {
                    "name": "closed1k",
                    "socket": str(tmp / "c1k.sock"),
                    "state": str(tmp / "c1k.db"),
                    "closed": 1_000,
                },
            ]
        clock = Timer()
        agents, where = await start_agents(tmp, spec)
        seeded_s = clock.elapsed
        gateway = None
        try:
            sources = write_sources(tmp, where)
            extra = ["--fast"]
            if args.profile:
                extra += ["--profile", str(args.profile / "gateway-chat.prof")]
            gateway, ready = await start_gateway(sources, tmp / "gateway.db", *extra)
            direct_socket = where[CHAT]["extra"][0]
            probe = Probe(gateway, args.profile, args.py_spy)
            deltas = await deltas_part(
                agents, probe, ready["port"], direct_socket, args.deltas, args.paced, not args.relay
            )
            lists = None
            if not args.relay:
                await probe.begin("list")
                lists = await list_part(ready["port"], where, args.rounds, budget_s=40.0)
                await probe.end("list")
        finally:
            if gateway is not None:
                await gateway.close()
            await agents.close()
    return {
        "deltas": deltas,
        "lists": lists,
        "writes": writes,
        "seeded_s": seeded_s,
        "probe": probe,
    }


def report(r: Json, args: argparse.Namespace) -> None:
    if "relay" in r:
        relay_report(r, args)
        return
    _report_stream(r, args)
    _report_paced(r, args)
    if args.relay:
        r["probe"].print()
        return
    _report_lists(r)
    _report_writes(r)
    row("setup: seeding + starting the agents", f"{r['seeded_s']:.1f} s")
    r["probe"].print()


def _report_stream(r: Json, args: argparse.Namespace) -> None:
    """(a): deltas/s reaching the phone beside the agent's own stream, live and backlog."""
    n = args.deltas
    heading(f"(a) a streamed reply of {n:,} deltas: deltas/s reaching the reader")
    for mode, text in (
        ("live", "live (both follow while the agent writes)"),
        ("backlog", "backlog (written while the link was away)"),
    ):
        if mode not in r["deltas"]:
            continue
        m = r["deltas"][mode]
        direct: Arrivals = m["direct"]
        phone: Arrivals = m["phone"]
        made = m["made"]
        row(text, "")
        row(
            "  agent wrote",
            f"{n:,} deltas in {made['seconds']:.2f} s = {n / made['seconds']:,.0f}/s",
        )
        row(
            "  direct: agent's GET /events",
            f"{direct.rate():,.0f}/s ({len(direct.times):,} read, {direct.resets} resets)",
        )
        row(
            "  gateway: phone's /api/v1/events",
            f"{phone.rate():,.0f}/s ({len(phone.times):,} read, {phone.resets} resets)",
        )
        share = phone.rate() / direct.rate() if direct.rate() else 0.0
        row("  ratio gateway / direct", ratio(phone.rate(), direct.rate()))
        if mode == "live" and phone.times and direct.times:
            lag = (phone.times[-1] - direct.times[-1]) * 1e3
            row("  last delta: phone after direct", f"{lag:.1f} ms")
        cpu = r["probe"].cpu[mode]
        row("  gateway CPU (all threads)", f"{cpu:.2f} s = {cpu / n * 1e6:.0f} µs per delta")
        complete = len(phone.times) == n and phone.resets == 0
        row(
            f"  target >= {RATE_TARGET:g} x direct",
            verdict(share >= RATE_TARGET and complete)
            + ("" if complete else " (the phone did not get every delta)"),
        )


def _report_paced(r: Json, args: argparse.Namespace) -> None:
    """(a2): the gateway's CPU per live delta, one phone and ten."""
    n = args.deltas
    heading(f"(a2) {args.paced:,} deltas committed one by one: the gateway's CPU per live delta")
    per_phone = {}
    for phones in (1, 10):
        m = r["deltas"][f"paced{phones}"]
        got = [len(a.times) for a in m["phones"]]
        cpu = r["probe"].cpu[f"paced{phones}"]
        per_phone[phones] = cpu / args.paced * 1e6
        complete = all(g == args.paced for g in got) and all(a.resets == 0 for a in m["phones"])
        wrote = args.paced / m["made"]["seconds"]
        row(
            f"  {phones} phone{'s' if phones > 1 else ''} following",
            f"{per_phone[phones]:.0f} µs per delta (agent wrote {wrote:,.0f}/s)"
            + ("" if complete else f" INCOMPLETE: {got}"),
        )
    backlog = r["probe"].cpu["backlog"] / n * 1e6
    row("  baseline: the same deltas as a backlog", f"{backlog:.0f} µs per delta")
    idle = r["probe"].cpu["idle"] / r["deltas"]["idle_s"]
    spent = r["deltas"]["paced1"]["s"] * idle / args.paced * 1e6
    row(
        "  the gateway idle (not taken off)",
        f"{idle * 1e3:.1f} ms CPU a second = {spent:.0f} µs per paced delta at this rate",
    )
    for phones, target in ((1, RELAY_TARGET_US), (10, RELAY10_TARGET_US)):
        row(f"  target <= {target} µs ({phones})", verdict(per_phone[phones] <= target))


def _report_lists(r: Json) -> None:
    """(b): one closed-list page through the gateway beside the agent's own read."""
    heading("(b) one list page: GET /api/v1/agents/{agent}/conversations (a visit)")
    lists = r["lists"]
    times = lists["times"]
    p99 = {}
    for agent, total in (("closed1k", "1,000"), ("closed100k", "100,000")):
        g, d = times[f"gateway {agent}"], times[f"direct {agent}"]
        shape = lists["shapes"][f"gateway {agent}"]
        closed = len(shape.get("closed") or [])
        footer = (shape.get("footer") or {}).get("kind")
        p99[agent] = pct(g, 99)
        row(f"{total} closed ({len(g)} visits)", f"{closed} closed rows, footer {footer!r}")
        row("  gateway p50 / p99", f"{pct(g, 50) * 1e3:.2f} / {pct(g, 99) * 1e3:.2f} ms")
        row("  direct agent read p50 / p99", f"{pct(d, 50) * 1e3:.2f} / {pct(d, 99) * 1e3:.2f} ms")
        row(
            "  ratio gateway / direct",
            f"p50 {ratio(pct(g, 50), pct(d, 50))}, p99 {ratio(pct(g, 99), pct(d, 99))}",
        )
    growth = p99["closed100k"] / p99["closed1k"]
    worst = max(p99.values()) * 1e3
    row("p99 growth 100,000 vs 1,000", f"{growth:.2f}x")
    row(
        f"target < {LIST_TARGET_MS:g} ms (p99), flat",
        f"{verdict(worst < LIST_TARGET_MS)} (worst p99 {worst:.2f} ms); "
        f"{'flat' if growth < 1.5 else 'GROWS'} with the total",
    )


def _report_writes(r: Json) -> None:
    """(c): deltas/s one SDK agent writes, group commit beside a commit per delta."""
    heading("(c) deltas/s one SDK agent writes (in this process; wall and CPU per delta)")
    w = r["writes"]
    for mode, text in (
        ("group", "group commit (this SDK)"),
        ("each", "baseline: a commit per delta"),
    ):
        m = w[mode]
        row(f"  {text}", f"{m['rate']:,.0f}/s ({m['n']:,}), {m['cpu_us']:.0f} µs CPU per delta")
    row("  ratio group / each", ratio(w["group"]["rate"], w["each"]["rate"]))
    row(f"  target >= {WRITE_TARGET:,}/s", verdict(w["group"]["rate"] >= WRITE_TARGET))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--deltas", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=300, help="list visits per agent")
    p.add_argument("--paced", type=int, default=2000, help="deltas committed one by one")
    p.add_argument("--relay", action="store_true", help="only (a2) and its backlog baseline")
    p.add_argument("--baseline", type=Path, help="--relay: a worktree whose gateway to compare")
    p.add_argument("--repeat", type=int, default=3, help="--relay: rounds (each side once)")
    p.add_argument("--gap", type=float, default=0.0, help="ms the agent waits after each delta")
    p.add_argument("--rate", type=float, default=0.0, help="paced deltas/s (0: as commits go)")
    bench_main(p, run, report)


if __name__ == "__main__":
    main()
