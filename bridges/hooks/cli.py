"""The bridge's command line: ``bridge hooks --socket PATH --state PATH [--port N]``.

Exit codes: 0 stopped by a signal, 1 the port cannot be bound, 2 bad usage.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from bridges import kit

DEFAULT_PORT = 8791
DESCRIPTION = (
    "Serve Claude Code's and Codex's hooks (HTTP on 127.0.0.1:PORT at /hooks/<client>) as a "
    "wire-v1 durable agent on a Unix socket: their permission questions on the phone."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the bridge's arguments to ``p`` (also used by ``collie-gateway bridge hooks``)."""
    kit.add_common(p, verbose="log the sessions' life")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"hooks port on 127.0.0.1 ({DEFAULT_PORT})"
    )
    p.add_argument(
        "--keys", type=Path, default=None, help="the credentials' hashes (hooks install writes it)"
    )


def run(args: argparse.Namespace) -> int:
    """Run the bridge until SIGINT or SIGTERM; returns the exit code."""
    kit.start_logging(args.verbose)
    return kit.serve(lambda: _bridge(args), args.socket)


def _bridge(args: argparse.Namespace) -> kit.AgentBridge:
    from bridges.hooks.bridge import HooksBridge

    return HooksBridge(state_path=args.state, port=args.port, keys_path=args.keys)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bridges.hooks``."""
    p = argparse.ArgumentParser(prog="python -m bridges.hooks", description=DESCRIPTION)
    add_arguments(p)
    return run(p.parse_args(argv))
