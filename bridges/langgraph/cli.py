"""The bridge's command line: in-process, ``bridge langgraph --graph MODULE:NAME --checkpoints
PATH [--input messages|MODULE:NAME] --socket PATH --state PATH``; against an Agent Server,
``--url URL --assistant ID`` in place of ``--graph`` and ``--checkpoints``.

Exit codes: 0 stopped by a signal, 1 the graph cannot be imported or its files opened (or the
server cannot be reached), 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bridges import kit

DESCRIPTION = (
    "Serve LangGraph threads as a wire-v1 durable agent on a Unix socket, each thread a "
    "conversation, each interrupt an ask: a graph imported and run here on a SQLite "
    "checkpointer of its own (--graph, --checkpoints), or an assistant of a LangGraph Agent "
    "Server (--url, --assistant)."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the bridge's arguments to ``p`` (also used by ``collie-gateway bridge langgraph``)."""
    kit.add_common(p, verbose="log the threads' life")
    p.add_argument("--graph", help="in-process: the compiled graph, as module:name")
    p.add_argument("--checkpoints", type=Path, help="in-process: the graph's SQLite file")
    p.add_argument("--url", help="an Agent Server's URL, e.g. http://127.0.0.1:2024")
    p.add_argument("--assistant", help="with --url: the assistant's id, or a graph's id")
    p.add_argument(
        "--poll",
        type=float,
        default=5.0,
        help="with --url: seconds between two readings of the server's threads (default 5)",
    )
    p.add_argument(
        "--input",
        default="messages",
        help='"messages" ({"messages": [the message]}) or module:name, a callable of the text',
    )


def run(args: argparse.Namespace) -> int:
    """Serve the bridge until SIGINT or SIGTERM; returns the exit code."""
    served = bool(args.url and args.assistant)
    local = bool(args.graph and args.checkpoints)
    if served == local:
        print(
            "bridge langgraph: give --graph and --checkpoints, or --url and --assistant",
            file=sys.stderr,
        )
        return 2
    kit.start_logging(args.verbose)

    def build() -> kit.AgentBridge:
        from bridges.langgraph.backend import Backend, InProcess
        from bridges.langgraph.bridge import LangGraphBridge
        from bridges.langgraph.server import Server

        backend: Backend = (
            Server(args.url, args.assistant, args.poll or None)
            if served
            else InProcess(args.graph, args.checkpoints)
        )
        return LangGraphBridge(backend, state=args.state, input=args.input)

    return kit.serve(build, args.socket)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bridges.langgraph``."""
    p = argparse.ArgumentParser(prog="python -m bridges.langgraph", description=DESCRIPTION)
    add_arguments(p)
    return run(p.parse_args(argv))
