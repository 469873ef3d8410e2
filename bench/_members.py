"""Helper process: the member gateways of a crew for ``crew_bench.py``, each built as the
tests build a gateway (``gateway_app(Settings(...))``) and served on 127.0.0.1 (a free port),
all in this one process (so the lead's process measures only itself).

Run by the bench: ``python bench/_members.py SPEC.json``. The spec::

    {"members": [{"name": "m00", "sources": "/tmp/cb-x/m00.json", "db": "/tmp/cb-x/m00.db"}],
     "max_seconds": 240}

First line out, once every member's links are Ready::

    {"ports": {"m00": 43121, ...}, "rss_before_kib": ..., "rss_ready_kib": ..., "links": 1000}

Commands: ``quit``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from bench._common import HELPER_MAX_SECONDS, rss_kib, say, serve_commands
from collie_gateway.serving import GATEWAY, gateway_app
from collie_gateway.settings import Settings
from collie_gateway.sources import load_sources


async def main(spec: Any) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    gc.collect()
    rss_before = rss_kib()
    runners: list[web.AppRunner] = []
    ports: dict[str, int] = {}
    try:
        for member in spec["members"]:
            settings = Settings(
                sources=load_sources(Path(member["sources"])),
                db_path=Path(member["db"]),
                port=0,
                machine=member["name"],
            )
            app = gateway_app(settings)
            runner = web.AppRunner(app, shutdown_timeout=0.5)
            await runner.setup()
            sock = socket.create_server(("127.0.0.1", 0))
            ports[member["name"]] = int(sock.getsockname()[1])
            await web.SockSite(runner, sock).start()
            runners.append(runner)
        links = [link for r in runners for link in r.app[GATEWAY].agents.links.values()]
        async with asyncio.timeout(120):
            await asyncio.gather(*(link.ready.wait() for link in links))
        say(
            {
                "ports": ports,
                "rss_before_kib": rss_before,
                "rss_ready_kib": rss_kib(),
                "links": len(links),
            }
        )
        await serve_commands({}, float(spec.get("max_seconds", HELPER_MAX_SECONDS)))
    except Exception as exc:
        say({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        for runner in runners:
            await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main(json.loads(Path(sys.argv[1]).read_text())))
