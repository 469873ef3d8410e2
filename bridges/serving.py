"""A bridge's process: start it, serve it on its socket until SIGINT or SIGTERM, close it."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol


class Bridge(Protocol):
    """What a bridge offers its process."""

    async def start(self) -> None:
        """Start what the bridge follows."""

    async def close(self) -> None:
        """Stop it and the agent it serves."""

    async def serve_unix(self, path: Path) -> object:
        """Serve the wire-v1 agent on a Unix socket."""


async def serve_until_stopped(
    bridge: Bridge,
    name: str,
    socket: Path,
    serving: Callable[[], str | None],
    refused: tuple[type[Exception], ...] = (OSError,),
) -> int:
    """Start ``bridge`` (a start refused with one of ``refused`` exits 1, said in one line),
    serve it on ``socket`` and print ``bridge NAME: serving …``, then wait for a signal."""
    try:
        await bridge.start()
    except refused as exc:
        print(f"bridge {name}: {exc}", file=sys.stderr)
        await bridge.close()
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await bridge.serve_unix(socket)
        print(f"bridge {name}: serving {serving()} on {socket}", flush=True)
        await stop.wait()
    finally:
        await bridge.close()
    return 0
