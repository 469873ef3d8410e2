"""Helper process: one gateway, built as the tests build it (``gateway_app(Settings(...))``),
serving the phone API on 127.0.0.1 (a free port), and measuring itself.

Run by the benches: ``python bench/_gateway.py --sources S.json --db G.db [--tracemalloc]
[--profile OUT.prof] [--fast]``. First line out, once every link is Ready::

    {"port": 43121, "ready_s": 0.84, "rss_before_kib": ..., "rss_ready_kib": ...,
     "rss_settled_kib": ..., "traced_bytes": ..., "traced_top": [...]}

The first line also has ``gc_s``/``gc_n``: the CPU seconds and passes of the garbage
collector per generation until Ready. The gateway freezes its heap as the serve command does
(``serving.freeze_heap``).

Commands: ``dashboard_compute`` (the dashboard built and encoded in-process, no HTTP),
``counts`` (open conversations mirrored), ``gc`` (the collector since the last ``gc``),
``profile_start``/``profile_stop``, ``quit``; with ``--count``, ``count_start``/``count_take``
(SQL statements, msgspec encodes, mask walks).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import logging
import re
import socket
import sys
import time
import tracemalloc
from pathlib import Path

import msgspec
from aiohttp import web

from bench._common import HELPER_MAX_SECONDS, Handler, Json, pct, rss_kib, say, serve_commands
from collie_gateway.core.reconnect import LinkTiming
from collie_gateway.gateway import Gateway
from collie_gateway.serving import GATEWAY, freeze_heap, gateway_app
from collie_gateway.settings import Settings
from collie_gateway.sources import load_crew, load_sources

_LITERAL = re.compile(r"'[^']*'|x'[0-9a-fA-F]*'|\b\d+(?:\.\d+)?\b")
# Backoff short enough that a paused agent is back within ~0.2 s (chat_bench's replay).
FAST = LinkTiming(backoff_first=0.05, backoff_cap=0.2)


def _instrument_answers() -> dict[str, list[float]]:
    """Time the answer path's parts from the inside (``--trace-answers``): wraps the route
    and the gateway's methods in this process only; nothing outside bench/ changes. Only
    calls made while a phone's answer request is handled count (a context variable)."""
    import contextvars
    from collections import defaultdict
    from collections.abc import Awaitable, Callable
    from typing import Any

    import aiosqlite

    from collie_gateway.services import answering, answers
    from collie_gateway.store import database

    spans: dict[str, list[float]] = defaultdict(list)
    inside: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar(
        "bench_answer", default=None
    )

    def wrap(owner: Any, name: str, key: str, *, outer: bool = False) -> None:
        original: Callable[..., Awaitable[Any]] = getattr(owner, name)

        async def timed(*a: Any, **k: Any) -> Any:
            counts = inside.get()
            mine: dict[str, int] = {"sqlite": 0}
            token = None
            if outer:
                counts = mine
                token = inside.set(mine)
            t = time.perf_counter()
            try:
                return await original(*a, **k)
            finally:
                if counts is not None:
                    spans[key].append(time.perf_counter() - t)
                if token is not None:
                    inside.reset(token)
                    spans["sqlite calls"].append(float(mine["sqlite"]))

        setattr(owner, name, timed)

    def counting(owner: Any, name: str) -> None:
        original: Any = getattr(owner, name)

        async def counted(self: Any, *a: Any, **k: Any) -> Any:
            counts = inside.get()
            if counts is not None:
                counts["sqlite"] += 1
            return await original(self, *a, **k)

        setattr(owner, name, counted)

    # SQLite round trips: through aiosqlite's thread, and (in the current store) the
    # transactions and reads run on the loop's own connection (an older store ran them through
    # aiosqlite).
    counting(aiosqlite.Connection, "_execute")
    counting(database.Database, "run")
    counting(database.Database, "query")
    # The route table holds the handler itself, so the outermost span is the gateway's answer.
    wrap(answers.Answers, "answer", "handler: Answers.answer", outer=True)
    wrap(answering.Answering, "_tap", "tap: record+claim txn, send, settle txn")
    wrap(answering.Answering, "_send", "send + settle txn")
    wrap(answers.Answers, "_send", "agent round trip (gateway's client)")
    return spans


class _Counted:
    """A msgspec encoder that counts its encodes (``--count``)."""

    def __init__(self, inner: msgspec.json.Encoder, counts: dict[str, int]) -> None:
        self.inner = inner
        self.counts = counts

    def encode(self, obj: object) -> bytes:
        self.counts["encodes"] += 1
        return self.inner.encode(obj)


def _install_counters() -> dict[str, int]:
    """Count the gateway's msgspec encodes and its mask walks (``texts.masked``, X1) and
    the texts handed to the redactor (``--count``): module attributes are swapped in this
    process only, before the gateway is built. SQL statements are counted once it is
    (:func:`_count_sql`)."""
    from collections.abc import Callable
    from typing import Any

    from collie_gateway.core import redact, texts

    counts = {"sql": 0, "encodes": 0, "mask walks": 0, "masks": 0}
    original_masked = texts.masked
    plain_encode = msgspec.json.encode

    def masked(value: Any, mask: Callable[[str], str]) -> Any:
        counts["mask walks"] += 1
        return original_masked(value, mask)

    def encode(obj: Any, **kw: Any) -> bytes:
        counts["encodes"] += 1
        return plain_encode(obj, **kw)

    msgspec.json.encode = encode
    for name, module in list(sys.modules.items()):
        if not name.startswith(("collie_gateway", "wire", "push")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, msgspec.json.Encoder):
                setattr(module, attr, _Counted(value, counts))
            elif value is original_masked:  # texts' own too: MaskedAsks calls it there
                setattr(module, attr, masked)
    mask = redact.Redactor.mask

    def counted_mask(self: Any, text: str) -> str:
        counts["masks"] += 1
        return mask(self, text)

    redact.Redactor.mask = counted_mask  # type: ignore[method-assign]
    return counts


async def _count_sql(gw: Gateway, counts: dict[str, int], texts: dict[str, int]) -> None:
    """Count the SQL statements of both SQLite connections (and each statement's text)."""
    from collie_gateway.store.database import Database

    db = getattr(gw.stores.ledger, "db", None)
    if not isinstance(db, Database):
        return

    def traced(sql: str) -> None:
        counts["sql"] += 1
        key = _LITERAL.sub("?", " ".join(sql.split()))[:72]
        texts[key] = texts.get(key, 0) + 1

    db.conn.set_trace_callback(traced)
    await db.db.set_trace_callback(traced)


class GcClock:
    """CPU time the interpreter spends in its cyclic collector (``gc.callbacks``), per
    generation (the thread that collects: the loop's, nearly always)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.counts = [0, 0, 0]
        self._t = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t = time.thread_time()
        else:
            self.seconds[info["generation"]] += time.thread_time() - self._t
            self.counts[info["generation"]] += 1

    def take(self) -> Json:
        """Seconds and collections per generation since the last take."""
        out = {"gc_s": [round(s, 3) for s in self.seconds], "gc_n": list(self.counts)}
        self.seconds, self.counts = [0.0, 0.0, 0.0], [0, 0, 0]
        return out


def _traced_top(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> list[Json]:
    stats = after.compare_to(before, "filename")
    return [
        {
            "file": str(s.traceback[0].filename).replace(str(Path.cwd()) + "/", ""),
            "kib": round(s.size_diff / 1024, 1),
        }
        for s in stats[:10]
    ]


async def _all_ready(gw: Gateway, within: float) -> bool:
    """Wait until every link (the gateway's and its crew's) is Ready; say why not if not."""
    try:
        async with asyncio.timeout(within):
            await asyncio.gather(*(link.ready.wait() for link in gw.agents.links.values()))
            await asyncio.gather(*(link.ready.wait() for link in gw.crew.links.values()))
    except TimeoutError:
        states: dict[str, int] = {}
        for mirror in gw.mirrors.values():
            states[mirror.state.value] = states.get(mirror.state.value, 0) + 1
        say({"error": f"not all links Ready in {within} s: {states}"})
        return False
    return True


def _commands(
    args: argparse.Namespace,
    gw: Gateway,
    spans: dict[str, list[float]],
    profiler: cProfile.Profile | None,
    counted: dict[str, int] | None,
    sql_texts: dict[str, int] | None,
    gc_clock: GcClock,
) -> dict[str, Handler]:
    """The commands the bench process may send once the gateway is Ready."""
    encoder = msgspec.json.Encoder()

    async def dashboard_compute(command: Json) -> Json:
        times = []
        size = 0
        for _ in range(int(command.get("n", 1000))):
            t = time.perf_counter()
            size = len(encoder.encode(gw.rows.dashboard()))
            times.append(time.perf_counter() - t)
        return {"p50_ms": pct(times, 50) * 1e3, "p99_ms": pct(times, 99) * 1e3, "bytes": size}

    async def counts(command: Json) -> Json:
        return {
            "open": sum(m.open_count for m in gw.mirrors.values()),
            "ready": sum(1 for m in gw.mirrors.values() if m.state.value == "ready"),
            "bus_subscribers": gw.bus.subscribers,
        }

    async def answer_spans(command: Json) -> Json:
        out = {
            key: {"n": len(v), "p50_ms": pct(v, 50) * 1e3, "p99_ms": pct(v, 99) * 1e3}
            for key, v in spans.items()
            if key != "sqlite calls"
        }
        calls = spans.get("sqlite calls", [])
        out["sqlite calls"] = {"n": len(calls), "mean": sum(calls) / max(len(calls), 1)}
        for v in spans.values():
            v.clear()
        return out

    async def profile_start(command: Json) -> Json:
        if profiler is None:
            return {"profiling": False}
        profiler.enable()
        return {"profiling": True}

    async def profile_stop(command: Json) -> Json:
        if profiler is None:
            return {"profiling": False}
        profiler.disable()
        out = f"{args.profile}.{command.get('phase', 'run')}"
        profiler.dump_stats(out)
        profiler.clear()
        return {"profile": out}

    async def count_start(command: Json) -> Json:
        for key in counted or {}:
            counted[key] = 0  # type: ignore[index]
        if sql_texts is not None:
            sql_texts.clear()
        return {"counting": counted is not None}

    async def count_take(command: Json) -> Json:
        top = sorted((sql_texts or {}).items(), key=lambda kv: -kv[1])[:16]
        return {**(counted or {}), "top_sql": top}

    async def collector(command: Json) -> Json:
        return gc_clock.take()

    return {
        "count_start": count_start,
        "count_take": count_take,
        "gc": collector,
        "dashboard_compute": dashboard_compute,
        "counts": counts,
        "answer_spans": answer_spans,
        "profile_start": profile_start,
        "profile_stop": profile_stop,
    }


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    sources = load_sources(args.sources)
    settings = Settings(
        sources=sources,
        crew=load_crew(args.sources),  # a lead's members, if any (crew_bench.py)
        db_path=args.db,
        host="127.0.0.1",
        port=0,
        timing=FAST if args.fast else LinkTiming(),
    )
    spans = _instrument_answers() if args.trace_answers else {}
    # The CPU clock of the loop's thread: on a loaded machine wall time blames whatever ran
    # when the process was descheduled.
    clock = time.thread_time if args.profile_clock == "cpu" else time.perf_counter
    profiler = cProfile.Profile(clock) if args.profile else None
    counted = _install_counters() if args.count else None
    sql_texts: dict[str, int] = {}
    gc.collect()
    gc_clock = GcClock()
    rss_before = rss_kib()
    snap_before = None
    if args.tracemalloc:
        tracemalloc.start()
        snap_before = tracemalloc.take_snapshot()
    if profiler is not None:
        profiler.enable()
    started = time.perf_counter()
    app = gateway_app(settings)
    app.on_startup.append(freeze_heap)  # as the serve command does
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    await web.SockSite(runner, sock).start()
    gw: Gateway = app[GATEWAY]
    if not await _all_ready(gw, args.ready_timeout):
        await runner.cleanup()
        return
    ready_s = time.perf_counter() - started
    if counted is not None:
        await _count_sql(gw, counted, sql_texts)
    rss_ready = rss_kib()
    await asyncio.sleep(args.settle)  # streams open, the first flush written
    rss_settled = rss_kib()
    traced = None
    top: list[Json] = []
    if snap_before is not None:
        gc.collect()
        snap_after = tracemalloc.take_snapshot()
        traced = sum(s.size_diff for s in snap_after.compare_to(snap_before, "filename"))
        top = _traced_top(snap_before, snap_after)
        tracemalloc.stop()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(str(args.profile) + ".ready")
        profiler = cProfile.Profile(clock)
    say(
        {
            "port": port,
            "ready_s": ready_s,
            "rss_before_kib": rss_before,
            "rss_ready_kib": rss_ready,
            "rss_settled_kib": rss_settled,
            "traced_bytes": traced,
            "traced_top": top,
            "links": len(gw.agents.links),
            **gc_clock.take(),
            "crew": len(gw.crew.links),
        }
    )
    try:
        await serve_commands(
            _commands(args, gw, spans, profiler, counted, sql_texts, gc_clock), args.max_seconds
        )
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--sources", type=Path, required=True)
    p.add_argument("--db", type=Path, required=True)
    p.add_argument("--tracemalloc", action="store_true")
    p.add_argument("--profile", type=Path)
    p.add_argument("--fast", action="store_true", help="short link backoff")
    p.add_argument("--trace-answers", action="store_true", help="time the answer path's parts")
    p.add_argument("--count", action="store_true", help="count SQL, encodes and masks")
    p.add_argument("--profile-clock", choices=("wall", "cpu"), default="wall")
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--ready-timeout", type=float, default=90.0)
    p.add_argument("--max-seconds", type=float, default=HELPER_MAX_SECONDS)
    asyncio.run(main(p.parse_args()))
