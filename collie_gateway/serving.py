"""Serve the phone API until SIGTERM or SIGINT, then stop within a bounded time
(docs/configuration.md, "Stopping"); ``gateway_app``: the phone API on a gateway (the
composition root hands its services to the app).

The first signal stops accepting, ends every live stream (phones reconnect with
``Last-Event-ID`` to the next run), gives requests in flight ``HTTP_GRACE`` seconds (an
answer not settled by then stays recorded as uncertain and is sent again by the next run),
gives pending pushes one shared ``PUSH_GRACE`` (``Pushing.close``), flushes the store and
returns 0. A second signal exits at once with ``EXIT_CUT_SHORT``: what was committed stays (the
store is written as if killed), nothing else is waited for. Should a stop still take longer
than ``BACKSTOP`` seconds, the process exits the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import resource
import signal
import ssl
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

from aiohttp import web

from collie_gateway.gateway import Gateway
from collie_gateway.http.app import create_app
from collie_gateway.settings import Settings

log = logging.getLogger(__name__)

HTTP_GRACE: Final = 1.0  # ours: requests in flight at a stop (answers) get this long
BACKSTOP: Final = 4.5  # ours: a stop never takes longer (service managers wait 5 s or more)
EXIT_CUT_SHORT: Final = 1  # "failed while running": the stop was cut short
FILES_PER_LINK: Final = 2  # an agent's event stream, and a call to it (an answer, a read)
FILES_SPARE: Final = 256  # ours: phones, the store, the log, bridges' pipes
FREEZE_STEP: Final = 500  # ours: links Ready between two freezes of the heap at start-up
FREEZE_FOR: Final = 600.0  # ours: seconds the start-up's freezing waits for links at most
# ours: the collector's first threshold while links start (Python's is 700 allocations): the
# start-up's short-lived objects (requests, answers) die before a pass sees them
START_YOUNG: Final = 20_000


#: The gateway under an app of :func:`gateway_app`, once started: for tests and benchmarks (the
#: routes use the services' own keys).
GATEWAY = web.AppKey("gateway", Gateway)


def gateway_app(settings: Settings, gateway: Gateway | None = None) -> web.Application:
    """The phone API on ``gateway`` (left open), else on one opened at the app's start and
    closed at its clean-up.

    Raises:
        ConfigError: as :func:`collie_gateway.http.app.check_settings`.
    """

    @contextlib.asynccontextmanager
    async def rooms() -> AsyncIterator[Gateway]:
        gw = gateway if gateway is not None else await Gateway.open(settings)
        app[GATEWAY] = gw
        yield gw
        if gateway is None:
            await gw.close()

    app = create_app(settings, rooms)
    return app


async def freeze_heap(app: web.Application) -> None:
    """``on_startup`` of the serve command: keep the long-lived heap (the links, their
    mirrors) out of the collector's full passes, which otherwise scan it again and again as
    thousands of links start, and stall the loop later (docs/benchmarks.md, sizing). While
    the links start, the young generation is collected less often (``START_YOUNG``)."""
    gc.collect()
    gc.freeze()
    app[GATEWAY].tasks.spawn(_freeze_as_links_start(app[GATEWAY]), "freeze-heap")


async def _freeze_as_links_start(gw: Gateway, every: float = 0.5) -> None:
    """Each time another ``FREEZE_STEP`` links are Ready, and once all are (or after
    ``FREEZE_FOR`` seconds, some agents away): the young objects collected, the rest frozen
    (a frozen cycle that became garbage is not freed: start-up's few). Until then the
    collector's first threshold is ``START_YOUNG``; the one before is set again after."""
    links = list(gw.agents.links.values())
    loop = asyncio.get_running_loop()
    until = loop.time() + FREEZE_FOR
    frozen = ready = 0
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], START_YOUNG), *thresholds[1:])
    try:
        while True:
            # Links turn Ready about in the order they started (their gate is first come,
            # first served): count on from the first not Ready yet, not over all each time.
            while ready < len(links) and links[ready].ready.is_set():
                ready += 1
            last = ready == len(links) or loop.time() >= until
            if ready - frozen >= FREEZE_STEP or last:
                gc.collect(1)
                gc.freeze()
                frozen = ready
                if last:
                    return
            await asyncio.sleep(every)
    finally:
        gc.set_threshold(*thresholds)


def raise_open_files(links: int) -> int:
    """Raise this process's soft limit of open files to its hard limit (a gateway holds a
    socket or two per agent, and systems often start processes at 1,024), saying so in the
    log; a WARNING when even the hard limit is short of what ``links`` links need. Returns
    the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("open files: the limit stays %d (%s)", soft, exc)
        else:
            log.info("open files: limit raised from %d to %d", soft, hard)
            soft = hard
    need = links * FILES_PER_LINK + FILES_SPARE
    if soft != resource.RLIM_INFINITY and soft < need:
        log.warning(
            "open files: the limit is %d, %d agent links need about %d; raise it (ulimit -n)",
            soft,
            links,
            need,
        )
    return soft


def _exit_now(message: str) -> None:
    """Leave at once: no cleanup, no traceback (the store is crash-safe, as after kill -9)."""
    try:
        sys.stderr.write(f"collie-gateway: {message}\n")
        sys.stderr.flush()
    finally:
        os._exit(EXIT_CUT_SHORT)


def serve(
    app: web.Application,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    unix_path: Path | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> int:
    """Serve ``app`` on ``host:port`` (with TLS when ``ssl_context``; or the Unix socket
    ``unix_path``) until a signal; the exit code (0 after a clean stop).

    Raises:
        OSError: the address cannot be bound.
    """
    backstop: list[threading.Timer] = []
    try:
        return asyncio.run(_serve(app, host, port, unix_path, backstop, ssl_context))
    finally:
        # Stopped in time: what the caller does next (the demo stops its agents) is its own.
        for timer in backstop:
            timer.cancel()


async def _serve(
    app: web.Application,
    host: str,
    port: int,
    unix_path: Path | None,
    backstop: list[threading.Timer],
    ssl_context: ssl.SSLContext | None = None,
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            _exit_now(f"{sig.name} again: exiting at once")
        stop.set()
        # Whatever hangs past this point, the process still leaves (a daemon thread: it
        # fires even if the loop or the interpreter's exit is blocked).
        timer = threading.Timer(BACKSTOP, _exit_now, (f"stop took over {BACKSTOP} s",))
        timer.daemon = True
        timer.start()
        backstop.append(timer)
        log.warning("%s: stopping (send it again to exit at once)", sig.name)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    # aiohttp waits ``shutdown_timeout`` for handlers, then cancels them and waits as long
    # again: half the grace each.
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=HTTP_GRACE / 2)
    try:
        await runner.setup()
        site: web.BaseSite
        if unix_path is not None:
            site = web.UnixSite(runner, str(unix_path))
        else:
            site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
        await site.start()
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0
