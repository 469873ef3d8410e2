"""The bridge's command line: ``bridge langgraph --graph MODULE:NAME --checkpoints PATH
[--input messages|MODULE:NAME] --socket PATH --state PATH``.

Exit codes: 0 stopped by a signal, 1 the graph cannot be imported or its files opened, 2 bad
usage.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from bridges import kit

DESCRIPTION = (
    "Serve a LangGraph graph (imported, run here on a SQLite checkpointer of its own) as a "
    "wire-v1 durable agent on a Unix socket: each thread a conversation, each interrupt an ask."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the bridge's arguments to ``p`` (also used by ``collie-gateway bridge langgraph``)."""
    kit.add_common(p, verbose="log the threads' life")
    p.add_argument("--graph", required=True, help="the compiled graph, as module:name")
    p.add_argument("--checkpoints", type=Path, required=True, help="the graph's SQLite file")
    p.add_argument(
        "--input",
        default="messages",
        help='"messages" ({"messages": [the message]}) or module:name, a callable of the text',
    )


def run(args: argparse.Namespace) -> int:
    """Serve the bridge until SIGINT or SIGTERM; returns the exit code."""
    kit.start_logging(args.verbose)

    def build() -> kit.AgentBridge:
        from bridges.langgraph.bridge import LangGraphBridge

        return LangGraphBridge(
            graph=args.graph, checkpoints=args.checkpoints, state=args.state, input=args.input
        )

    return kit.serve(build, args.socket)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bridges.langgraph``."""
    p = argparse.ArgumentParser(prog="python -m bridges.langgraph", description=DESCRIPTION)
    add_arguments(p)
    return run(p.parse_args(argv))
