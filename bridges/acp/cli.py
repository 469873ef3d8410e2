"""The bridge's command line: ``bridge acp --socket PATH --state PATH [--cwd DIR] -- COMMAND …``.

Exit codes: 0 stopped by a signal, 1 the agent could not be started, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bridges import kit
from bridges.acp.bridge import AcpBridge
from bridges.acp.jsonrpc import MAX_LINE


def parser(prog: str = "collie-gateway bridge acp") -> argparse.ArgumentParser:
    """The arguments of the ACP bridge."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Serve an Agent Client Protocol agent (run as COMMAND, spoken to over its "
        "stdio) as a wire-v1 durable agent on a Unix socket.",
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the bridge's arguments to ``p`` (also used by ``collie-gateway bridge acp``)."""
    kit.add_common(p, verbose="log the agent's life")
    p.add_argument(
        "--cwd",
        action="append",
        default=[],
        help="a working folder offered as a starter (repeat; default: the current folder)",
    )
    p.add_argument(
        "--max-line", type=int, default=MAX_LINE, help=f"longest ACP line in bytes ({MAX_LINE})"
    )
    p.add_argument(
        "agent_command",
        nargs=argparse.REMAINDER,
        metavar="COMMAND",
        help="-- COMMAND ARGS…: the agent",
    )


def run(args: argparse.Namespace) -> int:
    """Run the bridge until SIGINT or SIGTERM; returns the exit code."""
    command = list(args.agent_command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("bridge acp: give the agent's command after --", file=sys.stderr)
        return 2
    kit.start_logging(args.verbose)
    return kit.serve(
        lambda: AcpBridge(
            command=command, state_path=args.state, cwds=args.cwd, max_line=args.max_line
        ),
        args.socket,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bridges.acp``."""
    return run(parser("python -m bridges.acp").parse_args(argv))
