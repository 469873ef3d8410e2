"""Links and the dashboard (D1–D10) at 200 agents.

Run: ``python bench/gateway_bench.py [--requests N] [--profile DIR]``.

(a) the time from starting the gateway until 200 agents are all Ready; (b) resident memory per
idle link; (c) ``GET /api/v1/dashboard`` p50/p99 over HTTP on 127.0.0.1 with 200 agents × 5
and × 500 open conversations, beside ``GET /healthz``. The 200 SDK agents live in a helper
process (``_agents.py``), the gateway in another (``_gateway.py``); this process is the phone.
"""

from __future__ import annotations

import argparse
import random
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
    get_latencies,
    heading,
    pct,
    ratio,
    row,
    short_dir,
    start_agents,
    start_gateway,
    verdict,
    write_sources,
)

AGENTS = 200
READY_TARGET_S = 2.0  # ours
LINK_TARGET_KIB = 100.0  # ours
DASHBOARD_P99_TARGET_MS = 5.0  # ours
BUILD_TARGET_MS = 0.3  # ours: the dashboard from the rows encoded for the stream


def agents_spec(tmp: Path, open_count: int) -> list[Json]:
    return [
        {
            "name": f"a{n:03d}",
            "socket": str(tmp / f"a{n:03d}.sock"),
            "state": str(tmp / f"a{n:03d}-{open_count}.db"),
            "open": open_count,
            "features": ["history"],
        }
        for n in range(AGENTS)
    ]


async def latency(port: int, requests: int, budget_s: float) -> dict[str, list[float]]:
    """Alternate dashboard and healthz requests (random order in each pair), keep-alive."""
    base = f"http://127.0.0.1:{port}"
    paths = {"dashboard": "/api/v1/dashboard", "healthz": "/healthz"}
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(base, connector=connector) as http:
        return await get_latencies(http, paths, requests, budget_s, warmup=50, rng=random.Random(3))


async def dashboard_shape(port: int) -> tuple[int, int, int]:
    """Rows, the open conversations they count, and the body's size."""
    url = f"http://127.0.0.1:{port}/api/v1/dashboard"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        body = await resp.read()
        data: Any = await resp.json()
    rows = [r for s in data["sections"] if s["kind"] == "durable_agents" for r in s["rows"]]
    return len(rows), sum(r["right"].get("open") or 0 for r in rows), len(body)


async def dashboard_run(
    tmp: Path, sources: Path, label: str, args: argparse.Namespace, results: Json
) -> Json:
    extra = ["--profile", str(args.profile / f"gateway-{label}.prof")] if args.profile else []
    spy: Spy | None = None

    async def attach(pid: int) -> None:
        nonlocal spy
        spy = Spy(pid, args.py_spy / f"ready-{label}.txt")
        await spy.start()

    gateway, ready = await start_gateway(
        sources,
        tmp / f"gateway-{label}.db",
        *extra,
        on_spawn=attach if args.py_spy else None,
    )
    try:
        spied = await spy.stop() if spy is not None else ""
        rows, open_total, size = await dashboard_shape(ready["port"])
        probe = Probe(gateway, args.profile, args.py_spy)
        await probe.begin(f"dashboard-{label}")
        times = await latency(ready["port"], args.requests, budget_s=40.0)
        await probe.end(f"dashboard-{label}")
        compute = await gateway.call({"cmd": "dashboard_compute", "n": 1000})
    finally:
        await gateway.close()
    if spied:
        probe.spied = {f"startup until Ready, 200 × {label}": spied, **probe.spied}
    if args.profile:
        probe.dumps = {
            f"startup until Ready, 200 × {label}": Path(
                str(args.profile / f"gateway-{label}.prof") + ".ready"
            ),
            **probe.dumps,
        }
    results[label] = {
        "ready": ready,
        "rows": rows,
        "open": open_total,
        "bytes": size,
        "times": times,
        "compute": compute,
        "probe": probe,
    }
    return ready


async def run(args: argparse.Namespace) -> Json:
    results: Json = {}
    with short_dir() as tmp:
        # --- 200 agents × 5 open conversations: (a), (b), (c) small --------------------------
        agents, where = await start_agents(tmp, agents_spec(tmp, 5))
        try:
            sources = write_sources(tmp, where)
            raw = Child("_rawlinks.py", ["--sources", str(sources)])
            results["raw"] = await raw.start(60.0)
            await raw.close()
            await dashboard_run(tmp, sources, "5", args, results)
            traced, first = await start_gateway(sources, tmp / "gateway-traced.db", "--tracemalloc")
            await traced.close()
            results["traced"] = first
        finally:
            await agents.close()
        # --- 200 agents × 500 open conversations: (c) large ------------------------------------
        clock = Timer()
        agents, where = await start_agents(tmp, agents_spec(tmp, 500), within=150.0)
        results["agents_500_start_s"] = clock.elapsed
        try:
            sources = write_sources(tmp, where, "sources-500.json")
            await dashboard_run(tmp, sources, "500", args, results)
        finally:
            await agents.close()
    return results


def report(r: Json, args: argparse.Namespace) -> None:
    small, large, raw, traced = r["5"], r["500"], r["raw"], r["traced"]
    g = small["ready"]

    heading(f"(a) time from starting the gateway until {AGENTS} agents are Ready")
    row("gateway (200 × 5 open)", f"{g['ready_s']:.3f} s")
    row("baseline: bare aiohttp links", f"{raw['ready_s']:.3f} s   (hello + open snapshot)")
    row("ratio gateway / baseline", ratio(g["ready_s"], raw["ready_s"]))
    row(f"target < {READY_TARGET_S:g} s", verdict(g["ready_s"] < READY_TARGET_S))
    row("also: gateway, 200 × 500 open", f"{large['ready']['ready_s']:.3f} s   (no target)")

    heading("(b) resident memory per idle link (RSS after Ready + 1 s, minus before, / 200)")
    per_link = (g["rss_settled_kib"] - g["rss_before_kib"]) / AGENTS
    raw_link = (raw["rss_settled_kib"] - raw["rss_before_kib"]) / AGENTS
    at_ready = (g["rss_ready_kib"] - g["rss_before_kib"]) / AGENTS
    row("gateway, RSS", f"{per_link:.1f} KiB/link   (at the Ready moment: {at_ready:.1f})")
    row("baseline: bare aiohttp link, RSS", f"{raw_link:.1f} KiB/link")
    row("ratio gateway / baseline", ratio(per_link, raw_link))
    row("gateway, tracemalloc", f"{traced['traced_bytes'] / 1024 / AGENTS:.1f} KiB/link")
    for site in traced["traced_top"][:6]:
        row("", f"{site['kib'] / AGENTS:7.1f} KiB/link  {site['file']}")
    per_conv = (
        (large["ready"]["rss_settled_kib"] - large["ready"]["rss_before_kib"])
        - (g["rss_settled_kib"] - g["rss_before_kib"])
    ) / (AGENTS * 495)
    row(
        "also: RSS per mirrored conversation", f"{per_conv * 1024:.0f} bytes   (500 vs 5 per agent)"
    )
    row(f"target < {LINK_TARGET_KIB:g} KiB", verdict(per_link < LINK_TARGET_KIB))

    heading("(c) GET /api/v1/dashboard over HTTP on 127.0.0.1, beside GET /healthz")
    p99s = {}
    for label, res in (("200 × 5", small), ("200 × 500", large)):
        d, h = res["times"]["dashboard"], res["times"]["healthz"]
        p99s[label] = pct(d, 99)
        row(
            f"{label}: {res['open']:,} open, {res['rows']} rows",
            f"{len(d)} requests, body {res['bytes']:,} bytes",
        )
        row(
            "  dashboard p50 / p99",
            f"{pct(d, 50) * 1e3:.2f} / {pct(d, 99) * 1e3:.2f} ms",
        )
        row("  healthz (baseline) p50 / p99", f"{pct(h, 50) * 1e3:.2f} / {pct(h, 99) * 1e3:.2f} ms")
        row(
            "  ratio dashboard / healthz",
            f"p50 {ratio(pct(d, 50), pct(h, 50))}, p99 {ratio(pct(d, 99), pct(h, 99))}",
        )
        c = res["compute"]
        row("  in-process build+encode p50/p99", f"{c['p50_ms']:.2f} / {c['p99_ms']:.2f} ms")
        row(
            f"  target in-process < {BUILD_TARGET_MS:g} ms (p50)",
            verdict(c["p50_ms"] < BUILD_TARGET_MS),
        )
    growth = p99s["200 × 500"] / p99s["200 × 5"]
    row("p99 growth 500 vs 5 per agent", f"{growth:.2f}x")
    worst = max(p99s.values()) * 1e3
    row(
        f"target p99 < {DASHBOARD_P99_TARGET_MS:g} ms, flat",
        f"{verdict(worst < DASHBOARD_P99_TARGET_MS)} (worst p99 {worst:.2f} ms); "
        f"{'flat' if growth < 1.5 else 'GROWS'} with conversations",
    )
    row("setup: agents with 500 open each", f"started in {r['agents_500_start_s']:.1f} s")
    for label in ("5", "500"):
        r[label]["probe"].print()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000, help="dashboard/healthz pairs per run")
    bench_main(p, run, report)


if __name__ == "__main__":
    main()
