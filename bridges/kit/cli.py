"""A bridge's command line: the options every bridge takes, its logging, and the main that
serves it until a signal. Exit codes: 0 stopped by a signal, 1 the start was refused, 2 bad
usage."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from bridges.kit.lifecycle import AgentBridge, serve_until_stopped

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_common(
    p: argparse.ArgumentParser, *, required: bool = True, verbose: str = "log the bridge's life"
) -> None:
    """``--socket`` and ``--state`` (``required`` unless a mode of the bridge needs neither)
    and ``-v``/``--verbose`` (``verbose`` says what it logs)."""
    p.add_argument(
        "--socket", type=Path, required=required, help="the wire-v1 Unix socket to serve"
    )
    p.add_argument("--state", type=Path, required=required, help="the bridge's SQLite state file")
    p.add_argument("-v", "--verbose", action="store_true", help=verbose)


def start_logging(verbose: bool) -> None:
    """Log to stderr: INFO with ``--verbose``, else WARNING."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format=LOG_FORMAT, stream=sys.stderr
    )


def serve(build: Callable[[], AgentBridge], socket: Path) -> int:
    """Build the bridge in a new event loop and serve it on ``socket`` until SIGINT or
    SIGTERM; returns the exit code."""

    async def main() -> int:
        return await serve_until_stopped(build(), socket)

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 0


def main(
    build: Callable[[argparse.Namespace], AgentBridge],
    argv: Sequence[str] | None = None,
    *,
    description: str | None = None,
) -> int:
    """The whole ``main`` of a bridge that takes only the common options: parse ``argv``, log,
    build the bridge from the arguments, serve it until SIGINT or SIGTERM; the exit code."""
    p = argparse.ArgumentParser(description=description)
    add_common(p)
    args = p.parse_args(argv)
    start_logging(args.verbose)
    return serve(lambda: build(args), args.socket)
