"""``collie-gateway relay``: run the relay (the command line builds the APNs and FCM senders
from the same environment as the gateway's and passes them in)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from push.relay.app import DAILY_ALERTS, Senders, create_app
from push.webpush import check_endpoint

DEFAULT_PORT = 8792  # ours: not the MCP bridge's 8790 nor the hooks bridge's 8791

Serve = Callable[[web.Application, str, int], int]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The relay's options."""
    parser.add_argument("--db", type=Path, default=Path("relay.db"), help="SQLite file (relay.db)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to listen on ({DEFAULT_PORT})"
    )
    parser.add_argument(
        "--public-url",
        required=True,
        help="the relay's origin as gateways reach it, e.g. https://relay.example.org "
        "(endpoints and the VAPID audience derive from it)",
    )
    parser.add_argument(
        "--daily-alerts",
        type=int,
        default=DAILY_ALERTS,
        help=f"alerting pushes per subscription per UTC day ({DAILY_ALERTS})",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every push")


def run(args: argparse.Namespace, senders: Callable[[], Senders], serve: Serve) -> int:
    """Open the store and serve until a signal; the exit code.

    Raises:
        ValueError: the public URL is not https:// (or http:// on loopback).
    """
    public_url = check_endpoint(args.public_url)
    if args.daily_alerts < 1:
        raise ValueError("--daily-alerts is at least 1")
    app = create_app(
        args.db,
        senders,
        public_url=public_url,
        daily_alerts=args.daily_alerts,
    )
    print(f"collie-gateway relay: {public_url}/push/… served on {args.host}:{args.port}")
    return serve(app, args.host, args.port)
