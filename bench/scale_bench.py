"""One gateway carrying a crew's agents, at 100, 300 and 1,000 agents (or 10,000).

Run: ``python -m bench.scale_bench [--sizes 100,300,1000] [--window 6] [--agents raw|sdk]
[--baseline TREE] [--py-spy DIR]``.

Each agent on its own Unix socket with two open conversations. ``--agents raw`` (the default):
the 20 streamers are SDK agents (``bench/_agents.py``) and the rest the bench's own wire-v1
agents (``bench/_wirefleet.py``, ``--fleet-processes`` processes), so the start-up measures the
gateway; ``--agents sdk``: all SDK agents, several hundred per helper process, so it also pays
each SDK agent's own start. For each size a fresh gateway (``--baseline TREE``: that tree's
first, then this one's) follows the first N of them; during a window of ``--window`` seconds,
20 agents stream replies at 50 deltas/s each (each delta's text is its send time), one ask a
second is raised on one of the others (and decided by its agent half a second later), and the
phone — this process — follows the live stream with one streaming chat open and reads the
dashboard ten times a second. Printed per size: the time until every link is Ready and the CPU
it took (the gateway's, its collector's, the agents'), the gateway's CPU share of one core
during the window, its RSS, the dashboard p50/p99 and the phone's delay per delta p50/p99
(send to arrival); the gateway's CPU a link (from the two sizes); and the growth from the
smallest size, the baseline of the same run, with each target's MET/MISSED.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench._common import (
    Child,
    Json,
    Probe,
    Spy,
    Timer,
    bench_main,
    cpu_seconds,
    heading,
    pct,
    ratio,
    row,
    rss_kib,
    short_dir,
    sse_events,
    start_agents,
    start_gateway,
    verdict,
    write_sources,
)

STREAMERS = 20
RATE = 50.0  # deltas/s for each streaming agent
PER_PROCESS = 250  # SDK agents per helper process
STAMP = re.compile(r"t(\d+\.\d+) ")
CHAT = "c-bench"  # bench/_agents.py: CHAT_ID
# The targets (judged at the largest size): all links Ready, the gateway's CPU share and RSS
# during the window, the dashboard's p99 over the smallest size's.
READY_S, CPU_PCT, RSS_MIB, FLAT = 10.0, 50.0, 400.0, 1.5
# 10,000 agents take minutes to start on a loaded 2-core machine: longer than other benches.
READY_WAIT, CAP = 240.0, 900.0


async def phone_stream(http: aiohttp.ClientSession, delays: list[tuple[float, float]]) -> None:
    """The phone's live stream: for each delta of a ``chat.delta``, (sent, arrived)."""
    async with http.get("/api/v1/events", timeout=aiohttp.ClientTimeout(total=None)) as resp:
        async for event in sse_events(resp):
            if event.event == "chat.delta":
                now = time.time()
                delays.extend((float(s), now) for s in STAMP.findall(event.data))


async def open_chat(http: aiohttp.ClientSession, agent: str) -> None:
    """The phone opens a streaming agent's chat (kept live from then on)."""
    for _ in range(100):
        async with http.get(f"/api/v1/agents/{agent}/conversations/{CHAT}") as resp:
            if resp.status == 200:
                return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the chat of {agent} did not open")


async def window(
    port: int,
    pid: int,
    host_of: dict[str, Child],
    names: list[str],
    seconds: float,
    probe: Probe,
    phase: str,
) -> Json:
    delays: list[tuple[float, float]] = []
    dash: list[float] = []
    size = 0
    rng = random.Random(16)
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
        phone = asyncio.create_task(phone_stream(http, delays))
        streamers = names[:STREAMERS]
        await host_of[streamers[0]].call(
            {"cmd": "stream_loop", "agents": streamers, "rate": RATE, "seconds": seconds + 1.5}
        )
        await open_chat(http, streamers[0])
        await asyncio.sleep(0.5)
        await probe.begin(phase)
        cpu0, started = cpu_seconds(pid), time.time()
        clock = Timer()
        asks = 0
        tick = 0
        while clock.elapsed < seconds:
            if tick % 10 == 0 and len(names) > STREAMERS:
                agent = rng.choice(names[STREAMERS:])
                await host_of[agent].call({"cmd": "ask_once", "agent": agent, "after": 0.5})
                asks += 1
            t = time.perf_counter()
            async with http.get("/api/v1/dashboard") as resp:
                size = len(await resp.read())
                assert resp.status == 200
            dash.append(time.perf_counter() - t)
            tick += 1
            await asyncio.sleep(max(0.0, tick * 0.1 - clock.elapsed))
        cpu, took = cpu_seconds(pid) - cpu0, clock.elapsed
        ended = time.time()
        await probe.end(phase)
        rss = rss_kib(pid)
        await asyncio.sleep(0.3)  # the window's last deltas arrive
        phone.cancel()
        await asyncio.gather(phone, return_exceptions=True)
    late = [arrived - sent for sent, arrived in delays if started <= sent <= ended]
    return {
        "cpu_share": cpu / took,
        "rss_kib": rss,
        "dash": dash,
        "delays": late,
        "deltas_per_s": len(late) / took,
        "asks": asks,
        "dash_bytes": size,
    }


async def start_fleet(args: argparse.Namespace, tmp: Path, names: list[str]) -> Json:
    """Every agent's helper process: SDK agents (``_agents.py``, ``PER_PROCESS`` each), or with
    ``--agents raw`` the streamers as SDK agents and the rest as raw wire agents
    (``_wirefleet.py``, ``--fleet-processes`` processes sharing them)."""
    specs = [
        {"name": n, "socket": str(tmp / f"{n}.sock"), "state": str(tmp / f"{n}.db"), "open": 2}
        for n in names
    ]
    if args.agents == "sdk":
        sdk, raw = specs, []
    else:
        sdk, raw = specs[:STREAMERS], specs[STREAMERS:]
    groups = [sdk[i : i + PER_PROCESS] for i in range(0, len(sdk), PER_PROCESS)]
    starts = [start_agents(tmp, g, within=READY_WAIT, max_seconds=CAP) for g in groups]
    n = max(1, args.fleet_processes)
    starts += [
        start_agents(tmp, raw[i::n], within=READY_WAIT, max_seconds=CAP, script="_wirefleet.py")
        for i in range(n)
        if raw[i::n]
    ]
    started = await asyncio.gather(*starts)
    where: Json = {}
    host_of: dict[str, Child] = {}
    for child, ready in started:
        where.update(ready)
        host_of.update({name: child for name in ready})
    return {"children": [c for c, _ in started], "where": where, "host_of": host_of}


async def one_size(
    args: argparse.Namespace,
    tmp: Path,
    fleet: Json,
    order: list[str],
    size: int,
    tree: Path | None,
    label: str,
) -> Json:
    """One fresh gateway (``tree``'s, or this tree's) following the first ``size`` agents of
    ``order``: its start-up until Ready, then the window."""
    children: list[Child] = fleet["children"]
    sources = write_sources(
        tmp, {n: fleet["where"][n] for n in order[:size]}, name=f"sources-{label}-{size}.json"
    )
    spy: Spy | None = None

    async def attach(pid: int) -> None:
        nonlocal spy
        spy = Spy(pid, args.py_spy / f"ready-{label}-{size}.txt")
        await spy.start()

    agents_cpu = sum(cpu_seconds(c.pid) for c in children)
    gateway, ready = await start_gateway(
        sources,
        tmp / f"gateway-{label}-{size}.db",
        "--ready-timeout",
        str(READY_WAIT),
        "--max-seconds",
        str(CAP),
        within=READY_WAIT + 30,
        on_spawn=attach if args.py_spy else None,
        tree=tree,
    )
    ready_cpu = cpu_seconds(gateway.pid)
    agents_cpu = sum(cpu_seconds(c.pid) for c in children) - agents_cpu
    try:
        spied = await spy.stop() if spy is not None else ""
        probe = Probe(gateway, args.profile, args.py_spy)
        await gateway.call({"cmd": "gc"})  # the collector's count starts again here
        result = await window(
            ready["port"],
            gateway.pid,
            fleet["host_of"],
            order[:size],
            args.window,
            probe,
            f"agents-{label}-{size}",
        )
        result["window_gc"] = await gateway.call({"cmd": "gc"})
        result["rebuild"] = await gateway.call({"cmd": "dashboard_compute", "n": 50})
    finally:
        await gateway.close()
    result["ready_s"] = ready["ready_s"]
    result["ready_cpu_s"] = ready_cpu
    result["agents_cpu_s"] = agents_cpu
    result["gc_s"] = sum(ready.get("gc_s") or [0.0])
    result["per_link_kib"] = (ready["rss_settled_kib"] - ready["rss_before_kib"]) / size
    if spied:
        probe.spied = {f"start-up until Ready, {label}, {size:,} agents": spied, **probe.spied}
    result["probe"] = probe
    return result


async def run(args: argparse.Namespace) -> Json:
    sizes = sorted(int(s) for s in args.sizes.split(","))
    names = [f"a{i:04d}" for i in range(max(sizes))]
    # The streamers share a helper process (one command streams them all); the rest are
    # followed in an order that takes each next agent from another helper, as agents that each
    # run in their own process: a gateway's link reads N agents spread over every helper.
    rest = sorted(range(STREAMERS, len(names)), key=lambda i: (i % PER_PROCESS, i // PER_PROCESS))
    order = names[:STREAMERS] + [names[i] for i in rest]
    out: Json = {"sizes": {}, "base": {}}
    with short_dir("sc-") as tmp:
        clock = Timer()
        fleet = await start_fleet(args, tmp, names)
        out["agents_s"] = clock.elapsed
        out["processes"] = len(fleet["children"])
        try:
            for size in sizes:
                if args.baseline is not None:
                    base = await one_size(args, tmp, fleet, order, size, args.baseline, "base")
                    out["base"][size] = base
                out["sizes"][size] = await one_size(args, tmp, fleet, order, size, None, "new")
        finally:
            await asyncio.gather(*(c.close() for c in fleet["children"]))
    return out


def report(r: Json, args: argparse.Namespace) -> None:
    heading(
        f"one gateway, N agents ({STREAMERS} streaming at {RATE:g} deltas/s each, one ask a "
        f"second across the rest), {args.window:g} s each"
    )
    most = max(r["sizes"])
    if args.agents == "sdk":
        fleet = f"{most:,} SDK agents"
    else:
        fleet = f"{STREAMERS} SDK agents (the streamers) and {most - STREAMERS:,} raw wire agents"
    row("setup", f"{fleet} in {r['processes']} processes, started in {r['agents_s']:.1f} s")
    if args.agents == "raw":
        row(
            "  what Ready measures",
            "the gateway's links against cheap agents (bench/_wirefleet.py: no SQLite, no "
            "aiohttp); --agents sdk adds each SDK agent's own start-up",
        )
    sizes: dict[int, Any] = r["sizes"]
    base: dict[int, Any] = r["base"]
    for size, m in sizes.items():
        if size in base:
            sized(size, base[size], f"base {args.baseline}")
        sized(size, m, "this tree" if base else "")
        if size in base:
            b = base[size]
            row(
                "  this tree / base",
                f"Ready {ratio(m['ready_s'], b['ready_s'])}, CPU until Ready "
                f"{ratio(m['ready_cpu_s'], b['ready_cpu_s'])}, window CPU "
                f"{ratio(m['cpu_share'], b['cpu_share'])}, RSS {ratio(m['rss_kib'], b['rss_kib'])}",
            )
    first, last = min(sizes), max(sizes)
    if first != last:
        a, b = sizes[first], sizes[last]
        row(
            f"growth {last:,} vs {first:,} agents",
            f"CPU {ratio(b['cpu_share'], a['cpu_share'])}, RSS {ratio(b['rss_kib'], a['rss_kib'])}"
            f", dashboard p99 {ratio(pct(b['dash'], 99), pct(a['dash'], 99))}"
            f", delay p99 {ratio(pct(b['delays'], 99), pct(a['delays'], 99))}",
        )
        for label, runs in (("base", base), ("this tree", sizes)):
            if first in runs and last in runs:
                extra = runs[last]["ready_cpu_s"] - runs[first]["ready_cpu_s"]
                row(
                    f"gateway CPU a link ({label})",
                    f"{extra / (last - first) * 1e3:.2f} ms (CPU until Ready at {last:,} minus "
                    f"at {first:,}, over the {last - first:,} links more)",
                )
        targets(sizes, base)
    for m in [*base.values(), *sizes.values()]:
        m["probe"].print()


def sized(size: int, m: Json, label: str) -> None:
    """One gateway's figures at one size."""
    tag = f" ({label})" if label else ""
    row(f"{size:,} agents{tag}", f"all links Ready in {m['ready_s']:.1f} s, {m['asks']} asks")
    row(
        "  start-up",
        f"CPU until Ready: the gateway {m['ready_cpu_s']:.2f} s = "
        f"{m['ready_cpu_s'] / size * 1e3:.2f} ms a link (collector {m['gc_s']:.2f} s), the "
        f"agents' processes {m['agents_cpu_s']:.1f} s; {m['per_link_kib']:.1f} KiB RSS per "
        "link (settled, over the RSS before)",
    )
    gc_s, gc_n = m["window_gc"]["gc_s"], m["window_gc"]["gc_n"]
    row(
        "  gateway CPU",
        f"{m['cpu_share'] * 100:.1f} % of one core (collector {sum(gc_s):.2f} s in the window "
        f"and its lead-in; passes by generation {gc_n})",
    )
    row("  gateway RSS", f"{m['rss_kib'] / 1024:.0f} MiB")
    d = m["dash"]
    row(
        "  dashboard p50 / p99",
        f"{pct(d, 50) * 1e3:.2f} / {pct(d, 99) * 1e3:.2f} ms ({len(d)} reads of "
        f"{m['dash_bytes'] / 1024:,.0f} KiB)",
    )
    row(
        "  dashboard rebuilt after a change",
        f"p50 {m['rebuild']['p50_ms']:.2f} ms in the gateway (built and encoded in-process; "
        "a read with no row changed since sends the JSON kept)",
    )
    late = m["delays"]
    row(
        "  phone delay per delta p50 / p99",
        f"{pct(late, 50) * 1e3:.1f} / {pct(late, 99) * 1e3:.1f} ms "
        f"({m['deltas_per_s']:,.0f} deltas/s reached the phone)",
    )


def targets(sizes: dict[int, Any], base: dict[int, Any]) -> None:
    """The targets, judged at the largest size beside the smallest of the same run. The
    dashboard's p99 is "flat" when the largest size's is within 1.5x the smallest's (HTTP,
    as the phone reads it; the body itself grows with the rows, one per agent). With a
    baseline, its verdicts are printed beside."""
    first, last = min(sizes), max(sizes)
    heading(f"targets at {last:,} agents (beside {first:,} in this run)")
    for label, runs in (("base: ", base), ("", sizes)):
        if last not in runs or first not in runs:
            continue
        a, b = runs[first], runs[last]
        row(
            f"{label}Ready <= {READY_S:g} s",
            f"{b['ready_s']:.1f} s ({first:,}: {a['ready_s']:.1f} s): "
            f"{verdict(b['ready_s'] <= READY_S)}",
        )
        cpu, rss = b["cpu_share"] * 100, b["rss_kib"] / 1024
        row(f"{label}CPU <= {CPU_PCT:g} % of a core", f"{cpu:.1f} %: {verdict(cpu <= CPU_PCT)}")
        row(f"{label}RSS <= {RSS_MIB:g} MiB", f"{rss:.0f} MiB: {verdict(rss <= RSS_MIB)}")
        p99a, p99b = pct(a["dash"], 99), pct(b["dash"], 99)
        row(
            f"{label}dashboard p99 flat (<= {FLAT:g}x)",
            f"{p99b * 1e3:.2f} vs {p99a * 1e3:.2f} ms, {ratio(p99b, p99a)}: "
            f"{verdict(p99b <= FLAT * p99a)}",
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,300,1000", help="agent counts, comma-separated")
    p.add_argument("--window", type=float, default=6.0, help="seconds measured per size")
    p.add_argument(
        "--agents",
        choices=("raw", "sdk"),
        default="raw",
        help="raw: the bench's own wire agents (the streamers SDK agents); sdk: all SDK agents",
    )
    p.add_argument("--fleet-processes", type=int, default=2, help="processes of raw agents")
    p.add_argument("--baseline", type=Path, help="a worktree whose gateway runs first at each size")
    bench_main(p, run, report, cap=CAP)


if __name__ == "__main__":
    main()
