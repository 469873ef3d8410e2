"""A crew's lead (W1–W4) with 20 members × 50 agents on loopback, each figure beside a
baseline measured in the same run.

- (a) every member's section Ready: from starting the lead until all its member links are
  Ready. Baseline: the least a lead must do with bare aiohttp (per member, ``GET /api/v1/crew``,
  the live stream opened, ``GET /api/v1/dashboard`` decoded), all members at once.
- (b) the lead's ``GET /api/v1/dashboard`` (1,000 member rows) p50/p99 over HTTP, beside the
  lead's ``/healthz`` and one member's own dashboard (50 rows).
- (c) an ask raised on a member's agent: when it shows on the lead's live stream, beside when it
  shows on the member's own stream (the baseline), from the moment the bench asks the agent.
- (d) the lead's resident memory per member agent, beside a member's own per agent link.

Run: ``python bench/crew_bench.py [--members 20] [--agents 50] [--asks 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from typing import Any

import aiohttp
import msgspec

from bench._common import (
    Child,
    Json,
    Timer,
    bench_main,
    cpu_seconds,
    get_latencies,
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

READY_TARGET_S = 3.0
DASHBOARD_P99_TARGET_MS = 5.0
ASK_P99_TARGET_MS = 100.0
MEMORY_TARGET_KIB = 20.0


async def bare_ready(ports: dict[str, int]) -> float:
    """The baseline of (a): what any lead must do to show its members, with bare aiohttp."""
    timer = Timer()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        streams: list[aiohttp.ClientResponse] = []

        async def one(port: int) -> None:
            base = f"http://127.0.0.1:{port}/api/v1/"
            async with http.get(base + "crew") as r:
                await r.read()
            stream = await http.get(base + "events")
            streams.append(stream)
            await stream.content.readline()  # the stream's first event has begun
            async with http.get(base + "dashboard") as r:
                msgspec.json.decode(await r.read())

        await asyncio.gather(*(one(p) for p in ports.values()))
        seconds = timer.elapsed
        for stream in streams:
            stream.close()
    return seconds


async def latency(paths: dict[str, str], requests: int, budget_s: float) -> dict[str, list[float]]:
    """Each URL in turn, keep-alive, one connection per URL."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=8)) as http:
        return await get_latencies(http, paths, requests, budget_s, warmup=30)


async def watch(url: str, seen: dict[str, float], opened: asyncio.Event) -> None:
    """Note when each ``ask.raised`` shows on the stream at ``url``."""
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(url) as resp:
        async for event in sse_events(resp):
            if event.event == "stream":
                opened.set()
            elif event.event == "ask.raised":
                ask_id = json.loads(event.data)["ask"]["id"]
                seen.setdefault(ask_id, time.perf_counter())


async def asks_part(agents: Child, ports: dict[str, int], lead_port: int, n: int) -> Json:
    """(c): ``n`` asks, round robin over the members' first agents."""
    lead_seen: dict[str, float] = {}
    member_seen: dict[str, float] = {}
    tasks = []
    opened: list[asyncio.Event] = []
    for url in [f"http://127.0.0.1:{lead_port}/api/v1/events"] + [
        f"http://127.0.0.1:{p}/api/v1/events" for p in ports.values()
    ]:
        event = asyncio.Event()
        seen = lead_seen if not opened else member_seen
        tasks.append(asyncio.create_task(watch(url, seen, event)))
        opened.append(event)
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in opened)), 30)
    sent: dict[str, float] = {}
    members = list(ports)
    for index in range(n):
        agent = f"{members[index % len(members)]}a00"
        t0 = time.perf_counter()
        answer = await agents.call({"cmd": "ask", "agent": agent})
        sent[answer["ask"]] = t0
        await asyncio.sleep(0.01)
    deadline = time.perf_counter() + 10
    # Polls two dicts the watchers fill; the time of arrival is taken by the watchers.
    while time.perf_counter() < deadline and (len(lead_seen) < n or len(member_seen) < n):  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
            await task
    lead = [lead_seen[a] - t for a, t in sent.items() if a in lead_seen]
    member = [member_seen[a] - t for a, t in sent.items() if a in member_seen]
    return {"lead": lead, "member": member, "sent": len(sent)}


async def run(args: argparse.Namespace) -> Json:
    results: Json = {"members": args.members, "agents": args.agents}
    with short_dir() as tmp:
        spec = [
            {
                "name": f"m{m:02d}a{a:02d}",
                "socket": str(tmp / f"m{m:02d}a{a:02d}.sock"),
                "state": str(tmp / f"m{m:02d}a{a:02d}.db"),
                "features": ["history"],
                "chat": a == 0,  # the member's first agent raises the asks of (c)
            }
            for m in range(args.members)
            for a in range(args.agents)
        ]
        clock = Timer()
        agents, where = await start_agents(tmp, spec, within=150)
        results["agents_start_s"] = clock.elapsed
        members_spec: list[Json] = []
        for m in range(args.members):
            name = f"m{m:02d}"
            mine = {k: v for k, v in where.items() if k.startswith(name)}
            path = write_sources(tmp, mine, name=f"{name}.json")
            members_spec.append({"name": name, "sources": str(path), "db": str(tmp / f"{name}.db")})
        spec_path = tmp / "members.json"
        spec_path.write_text(json.dumps({"members": members_spec, "max_seconds": 240}))
        members = Child("_members.py", [str(spec_path)])
        lead: Child | None = None
        try:
            first = await members.start(150)
            ports: dict[str, int] = first["ports"]
            results["member_links"] = first["links"]
            results["member_rss_kib"] = first["rss_ready_kib"] - first["rss_before_kib"]
            results["bare_ready_s"] = await bare_ready(ports)
            crew = [{"name": n, "url": f"http://127.0.0.1:{p}"} for n, p in ports.items()]
            lead_sources = tmp / "lead.json"
            lead_sources.write_text(json.dumps({"crew": crew}))
            lead, ready = await start_gateway(lead_sources, tmp / "lead.db", within=60)
            results["lead"] = ready
            base = f"http://127.0.0.1:{ready['port']}"
            first_member = f"http://127.0.0.1:{next(iter(ports.values()))}/api/v1/dashboard"
            results["times"] = await latency(
                {
                    "lead dashboard": base + "/api/v1/dashboard",
                    "lead healthz": base + "/healthz",
                    "member dashboard": first_member,
                },
                args.requests,
                budget_s=25,
            )
            async with aiohttp.ClientSession() as http, http.get(base + "/api/v1/dashboard") as r:
                body = await r.read()
            board: Any = json.loads(body)
            results["rows"] = sum(len(s.get("rows") or []) for s in board["sections"])
            results["bytes"] = len(body)
            results["compute"] = await lead.call({"cmd": "dashboard_compute", "n": 300})
            cpu0 = cpu_seconds(lead.pid)
            results["asks"] = await asks_part(agents, ports, ready["port"], args.asks)
            results["ask_cpu_s"] = cpu_seconds(lead.pid) - cpu0
        finally:
            if lead is not None:
                await lead.close()
            await members.close()
            await agents.close()
    return results


def report(r: Json, args: argparse.Namespace) -> None:
    total = r["members"] * r["agents"]
    lead = r["lead"]
    heading(f"(a) a lead with {r['members']} members × {r['agents']} agents: every section Ready")
    row("lead", f"{lead['ready_s']:.3f} s")
    row("baseline: bare aiohttp reads", f"{r['bare_ready_s']:.3f} s   (crew, stream, dashboard)")
    row("ratio lead / baseline", ratio(lead["ready_s"], r["bare_ready_s"]))
    row(f"target < {READY_TARGET_S:g} s", verdict(lead["ready_s"] < READY_TARGET_S))

    heading("(b) GET /api/v1/dashboard on the lead over HTTP on 127.0.0.1")
    times = r["times"]
    d, h, m = times["lead dashboard"], times["lead healthz"], times["member dashboard"]
    row(f"{r['rows']} rows, body {r['bytes']:,} bytes", f"{len(d)} requests")
    row("lead dashboard p50 / p99", f"{pct(d, 50) * 1e3:.2f} / {pct(d, 99) * 1e3:.2f} ms")
    row("baseline: lead healthz p50 / p99", f"{pct(h, 50) * 1e3:.2f} / {pct(h, 99) * 1e3:.2f} ms")
    row("a member's own dashboard p50 / p99", f"{pct(m, 50) * 1e3:.2f} / {pct(m, 99) * 1e3:.2f} ms")
    row("ratio lead dashboard / healthz", f"p99 {ratio(pct(d, 99), pct(h, 99))}")
    c = r["compute"]
    row("in-process build+encode p50/p99", f"{c['p50_ms']:.2f} / {c['p99_ms']:.2f} ms (no HTTP)")
    row(
        f"target p99 < {DASHBOARD_P99_TARGET_MS:g} ms",
        verdict(pct(d, 99) * 1e3 < DASHBOARD_P99_TARGET_MS),
    )

    heading("(c) an ask raised on a member: shown on the lead's live stream")
    asks = r["asks"]
    lead_t, member_t = asks["lead"], asks["member"]
    row(
        "asks raised", f"{asks['sent']}; seen on the lead {len(lead_t)}, on members {len(member_t)}"
    )
    row(
        "lead stream p50 / p99",
        f"{pct(lead_t, 50) * 1e3:.1f} / {pct(lead_t, 99) * 1e3:.1f} ms",
    )
    row(
        "baseline: member's stream p50 / p99",
        f"{pct(member_t, 50) * 1e3:.1f} / {pct(member_t, 99) * 1e3:.1f} ms",
    )
    row("added by the lead, p99", f"{(pct(lead_t, 99) - pct(member_t, 99)) * 1e3:.1f} ms")
    per_ask = r["ask_cpu_s"] / max(asks["sent"], 1) * 1e3
    row("the lead's CPU per ask", f"{per_ask:.2f} ms (relay, push decision, stream)")
    met = len(lead_t) == asks["sent"] and pct(lead_t, 99) * 1e3 < ASK_P99_TARGET_MS
    row(f"target p99 < {ASK_P99_TARGET_MS:g} ms", verdict(met))

    heading("(d) the lead's resident memory per member agent (RSS after Ready + 1 s − before)")
    per = (lead["rss_settled_kib"] - lead["rss_before_kib"]) / total
    own = r["member_rss_kib"] / max(r["member_links"], 1)
    row("lead", f"{per:.1f} KiB per member agent")
    row("baseline: a member, per own agent link", f"{own:.1f} KiB")
    row("ratio lead / baseline", ratio(per, own))
    row(f"target < {MEMORY_TARGET_KIB:g} KiB", verdict(per < MEMORY_TARGET_KIB))
    row("setup: agents started in", f"{r['agents_start_s']:.1f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=20)
    p.add_argument("--agents", type=int, default=50, help="agents per member")
    p.add_argument("--asks", type=int, default=200)
    p.add_argument("--requests", type=int, default=1000, help="dashboard requests")
    bench_main(p, run, report)


if __name__ == "__main__":
    main()
