"""The CPU per ask along one conversation's history: the 200th ask costs what the 1st did.

Run: ``python -m bench.history_bench [--asks 500] [--block 50] [--no-open] [--baseline TREE]``.

An SDK agent raises ``--asks`` permission asks one after another in ONE conversation (each
about a tool call whose item it appends first and marks done once answered; ``--kind ask``:
bare choice asks) while a phone follows ``GET /api/v1/events``. When a card arrives the phone
opens the chat (``GET`` the chat screen, as the page does; ``--no-open``: it does not) and
taps Allow (``POST .../asks/{ask}/answer`` with a fresh request id); the next ask is raised once the
stream showed the ask resolved. Printed per block of ``--block`` asks: the gateway process's
CPU time per ask (``/proc/PID/stat``, all threads), the phone's events and bytes per ask and
the wall time per ask; then the last fifth of the blocks against the first fifth (target: at
most 1.2×).
``--baseline TREE`` first runs the same with the gateway of another tree (e.g. a worktree of
main), on an agent and a conversation of its own, so both are printed in one run.
``--count`` also counts, per ask, the gateway's SQL statements, its msgspec encodes, the asks
it walks with the mask and the texts it hands to the redactor (X1).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench._common import (
    Child,
    Json,
    Probe,
    bench_main,
    cpu_seconds,
    heading,
    ratio,
    row,
    short_dir,
    sse_events,
    start_agents,
    start_gateway,
    verdict,
    write_sources,
)

FLAT_TARGET = 1.2  # ours: the last blocks' CPU per ask at most this times the first ones
CONV = "c-bench"  # the agents' chat (bench/_agents.py)
ASK_ID = re.compile(r"a-[0-9a-f]{16}")


class Phone:
    """Follows the live stream: which asks it showed and which it saw resolved."""

    def __init__(self) -> None:
        self.shown: dict[str, asyncio.Event] = {}
        self.resolved: dict[str, asyncio.Event] = {}
        self.events = 0
        self.bytes = 0
        self.types: dict[str, int] = {}

    def _flag(self, table: dict[str, asyncio.Event], ask_id: str) -> None:
        table.setdefault(ask_id, asyncio.Event()).set()

    async def wait(self, table: dict[str, asyncio.Event], ask_id: str, within: float) -> None:
        async with asyncio.timeout(within):
            await table.setdefault(ask_id, asyncio.Event()).wait()
        table.pop(ask_id, None)

    async def follow(self, http: aiohttp.ClientSession) -> None:
        async with http.get("/api/v1/events", timeout=aiohttp.ClientTimeout(total=None)) as resp:
            async for event in sse_events(resp):
                self.events += 1
                self.bytes += len(event.data)
                self.types[event.event] = self.types.get(event.event, 0) + 1
                resolved = event.event == "ask.resolved"
                for ask_id in ASK_ID.findall(event.data):
                    self._flag(self.resolved if resolved else self.shown, ask_id)


@dataclass
class Block:
    """One block of asks as the gateway and the phone paid for it."""

    asks: int
    cpu: float
    events: int
    bytes: int
    wall: float
    counts: Json = field(default_factory=dict)
    top_sql: list[tuple[str, int]] = field(default_factory=list)


async def one_side(
    tag: str, tree: Path | None, agents: Child, where: Json, tmp: Path, args: argparse.Namespace
) -> tuple[list[Block], Probe, dict[str, int]]:
    """A fresh gateway of ``tree`` following agent ``tag`` alone; every block measured."""
    sources = write_sources(tmp, {tag: where[tag]}, f"sources-{tag}.json")
    extra = []
    if args.profile:  # on the loop thread's CPU clock
        extra = ["--profile", str(args.profile / f"{tag}.prof"), "--profile-clock", "cpu"]
    counting = args.count and tree is None  # a baseline's helper may not count
    if counting:
        extra.append("--count")
    gateway, ready = await start_gateway(sources, tmp / f"gateway-{tag}.db", *extra, tree=tree)
    probe = Probe(gateway, args.profile if tree is None else None, args.py_spy)
    blocks: list[Block] = []
    phone = Phone()
    base = f"http://127.0.0.1:{ready['port']}"
    chat_path = f"/api/v1/agents/{tag}/conversations/{CONV}"
    try:
        async with aiohttp.ClientSession(base) as http, aiohttp.ClientSession(base) as stream:
            follower = asyncio.create_task(phone.follow(stream))

            async def one_ask() -> None:
                ask = await agents.call({"cmd": args.kind, "agent": tag})
                await phone.wait(phone.shown, ask["ask"], 10.0)
                if not args.no_open:  # the card came: the phone opens the chat
                    async with http.get(chat_path) as resp:
                        await resp.read()
                        assert resp.status == 200, resp.status
                body = {
                    "request_id": secrets.token_hex(8),
                    "version": ask["version"],
                    "answer": {"option": "allow" if args.kind == "permission" else "main"},
                }
                async with http.post(
                    f"/api/v1/agents/{tag}/asks/{ask['ask']}/answer", json=body
                ) as r:
                    data: Any = await r.json()
                if r.status != 200 or data["outcome"] != "accepted":
                    raise RuntimeError(f"answer: {r.status} {data}")
                await phone.wait(phone.resolved, ask["ask"], 10.0)

            async with http.get(chat_path) as resp:  # read from the agent once, before
                assert resp.status == 200, await resp.text()
            for _ in range(args.warmup):
                await one_ask()
            await asyncio.sleep(0.2)
            count = args.asks // args.block
            for index in range(count):
                phase = f"{tag} block {index + 1}"
                spied = index in (0, count - 1) and (args.py_spy or (args.profile and not tree))
                if spied:
                    await probe.begin(phase)
                if counting:
                    await gateway.call({"cmd": "count_start"})
                cpu0, events0, bytes0 = cpu_seconds(gateway.pid), phone.events, phone.bytes
                started = time.perf_counter()
                for _ in range(args.block):
                    await one_ask()
                await asyncio.sleep(0.05)  # the last ask's events out (a quiet gateway)
                block = Block(
                    args.block,
                    cpu_seconds(gateway.pid) - cpu0,
                    phone.events - events0,
                    phone.bytes - bytes0,
                    time.perf_counter() - started - 0.05,
                )
                if counting:
                    block.counts = await gateway.call({"cmd": "count_take"})
                    block.top_sql = block.counts.pop("top_sql")
                if spied:
                    await probe.end(phase)
                blocks.append(block)
                print(f"  [{tag}] {describe(index, block)}", flush=True)
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
    finally:
        await gateway.close()
    return blocks, probe, phone.types


def per_ask(blocks: list[Block]) -> float:
    """The gateway's CPU seconds per ask over ``blocks``."""
    return sum(b.cpu for b in blocks) / sum(b.asks for b in blocks)


def describe(index: int, b: Block) -> str:
    per = b.asks
    text = (
        f"block {index + 1:>2}: {b.cpu / per * 1e3:6.2f} ms CPU/ask, "
        f"{b.events / per:5.1f} events/ask, {b.bytes / per:7,.0f} B/ask, "
        f"{b.wall / per * 1e3:6.1f} ms wall/ask"
    )
    if b.counts:
        text += ", " + ", ".join(f"{v / per:.1f} {k}/ask" for k, v in b.counts.items())
    return text


async def run(args: argparse.Namespace) -> Json:
    results: Json = {}
    with short_dir() as tmp:
        sides: list[tuple[str, Path | None]] = []
        if args.baseline is not None:
            sides.append(("base", args.baseline.resolve()))
        sides.append(("new", None))
        spec = [
            {
                "name": tag,
                "socket": str(tmp / f"{tag}.sock"),
                "state": str(tmp / f"{tag}.db"),
                "chat": True,
            }
            for tag, _ in sides
        ]
        agents, where = await start_agents(tmp, spec)
        try:
            for tag, tree in sides:
                results[tag] = await one_side(tag, tree, agents, where, tmp, args)
        finally:
            await agents.close()
    return results


def report(r: Json, args: argparse.Namespace) -> None:
    how = "opens the chat, taps" if not args.no_open else "taps (chat not opened)"
    heading(f"{args.asks} asks in one conversation, the phone follows and {how}")
    first_last: dict[str, tuple[float, float]] = {}
    for tag in ("base", "new"):
        if tag not in r:
            continue
        blocks, probe, types = r[tag]
        name = "this tree" if tag == "new" else f"baseline {args.baseline}"
        row(f"{tag}: {name}", f"blocks of {args.block}")
        for index, b in enumerate(blocks):
            row(f"  block {index + 1}", describe(index, b).split(": ", 1)[1])
        # The first and last fifth of the blocks (two of ten): a block's CPU is read in 10 ms
        # ticks, and one block can meet a burst of the machine's other work.
        ends = max(1, len(blocks) // 5)
        first, last = per_ask(blocks[:ends]), per_ask(blocks[-ends:])
        first_last[tag] = (first, last)
        total = sum(b.asks for b in blocks) + args.warmup
        kinds = ", ".join(f"{k} {v / total:.1f}" for k, v in sorted(types.items()) if k != "stream")
        row("  phone events per ask, by type", kinds)
        if blocks[-1].top_sql:
            row("  SQL statements per ask, last block", "")
            for text, n in blocks[-1].top_sql:
                print(f"      {n / blocks[-1].asks:5.2f}  {text}")
        row(
            f"  last {ends} block(s) / first {ends} (<= {FLAT_TARGET:g}x)",
            f"{last * 1e3:.2f} / {first * 1e3:.2f} ms = {ratio(last, first)}: "
            + verdict(last <= FLAT_TARGET * first),
        )
        probe.print()
    if "base" in first_last:
        (b1, bn), (n1, nn) = first_last["base"], first_last["new"]
        row("new / base, first blocks", ratio(n1, b1))
        row("new / base, last blocks", ratio(nn, bn))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--asks", type=int, default=500, help="asks measured, in blocks")
    p.add_argument("--block", type=int, default=50, help="asks per block")
    p.add_argument("--warmup", type=int, default=5, help="asks before the first block")
    p.add_argument(
        "--kind",
        choices=("permission", "ask"),
        default="permission",
        help="permission: a tool item, an ask about it, the item done once answered; "
        "ask: a bare choice ask",
    )
    p.add_argument("--no-open", action="store_true", help="the phone does not open the chat")
    p.add_argument("--baseline", type=Path, help="a tree whose gateway runs first, the same way")
    p.add_argument("--count", action="store_true", help="count SQL, encodes and masks per ask")
    bench_main(p, run, report)


if __name__ == "__main__":
    main()
