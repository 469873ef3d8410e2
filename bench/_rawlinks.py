"""Helper process: the baseline of gateway_bench (a) and (b) — the least a link must do, with
bare aiohttp and msgspec and nothing of the gateway: per agent one ``ClientSession`` on its
Unix socket, ``GET /hello`` and ``GET /conversations?state=open`` decoded (that is "Ready"),
then ``GET /events`` held open and read.

Run by gateway_bench: ``python bench/_rawlinks.py --sources S.json``. First line out:
``{"ready_s": ..., "rss_before_kib": ..., "rss_ready_kib": ..., "rss_settled_kib": ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import sys
import time
from pathlib import Path

import aiohttp

from bench._common import HELPER_MAX_SECONDS, Json, rss_kib, say, serve_commands
from collie_gateway.sources import load_sources
from wire.messages import ConversationPage, Hello, decode


async def main(args: argparse.Namespace) -> None:
    sources = load_sources(args.sources)
    gc.collect()
    rss_before = rss_kib()
    started = time.perf_counter()
    sessions: list[aiohttp.ClientSession] = []
    streams: list[asyncio.Task[None]] = []
    pages: list[ConversationPage] = []

    async def follow(session: aiohttp.ClientSession) -> None:
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get("http://agent/events") as resp:
                async for _ in resp.content.iter_any():
                    pass

    async def link(socket: Path) -> None:
        session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(socket)))
        sessions.append(session)
        async with session.get("http://agent/hello") as resp:
            decode(await resp.read(), Hello)
        async with session.get("http://agent/conversations?state=open") as resp:
            pages.append(decode(await resp.read(), ConversationPage))
        streams.append(asyncio.create_task(follow(session)))

    async with asyncio.timeout(args.ready_timeout):
        await asyncio.gather(*(link(s.socket) for s in sources if s.socket is not None))
    ready_s = time.perf_counter() - started
    rss_ready = rss_kib()
    await asyncio.sleep(args.settle)
    say(
        {
            "ready_s": ready_s,
            "rss_before_kib": rss_before,
            "rss_ready_kib": rss_ready,
            "rss_settled_kib": rss_kib(),
            "links": len(sessions),
        }
    )

    async def nothing(command: Json) -> Json:
        return {}

    try:
        await serve_commands({"noop": nothing}, args.max_seconds)
    finally:
        for task in streams:
            task.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
        for session in sessions:
            await session.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--sources", type=Path, required=True)
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--ready-timeout", type=float, default=60.0)
    p.add_argument("--max-seconds", type=float, default=HELPER_MAX_SECONDS)
    asyncio.run(main(p.parse_args()))
    sys.exit(0)
