"""The bridge's command line: ``bridge mcp --socket PATH --state PATH [--port N]`` serves MCP
and the wire; ``bridge mcp --stdio [--port N | --url URL]`` carries one host's stdio to it.

Exit codes: 0 stopped by a signal (or stdin ended), 1 the port or the bridge cannot be
reached, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bridges import kit

DEFAULT_PORT = 8790


def parser(prog: str = "collie-gateway bridge mcp") -> argparse.ArgumentParser:
    """The arguments of the MCP bridge."""
    p = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_arguments(p)
    return p


DESCRIPTION = (
    "Serve MCP tools that ask the person on the phone (Streamable HTTP on 127.0.0.1:PORT at "
    "/mcp) as a wire-v1 durable agent on a Unix socket; or, with --stdio, carry one MCP "
    "host's stdio to that bridge."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the bridge's arguments to ``p`` (also used by ``collie-gateway bridge mcp``)."""
    kit.add_common(p, required=False, verbose="log the sessions' life")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"MCP port on 127.0.0.1 ({DEFAULT_PORT})"
    )
    p.add_argument(
        "--idle",
        type=float,
        default=60.0,
        help="seconds without a request in flight that end a session (60)",
    )
    p.add_argument(
        "--stdio", action="store_true", help="carry this process's stdio to a running bridge"
    )
    p.add_argument("--url", help="with --stdio: the bridge's MCP URL (default: from --port)")


def run(args: argparse.Namespace) -> int:
    """Run the bridge (or the stdio relay) until SIGINT or SIGTERM; returns the exit code."""
    kit.start_logging(args.verbose)
    if args.stdio:
        return _relay(args)
    if args.socket is None or args.state is None:
        print("bridge mcp: give --socket and --state (or --stdio)", file=sys.stderr)
        return 2
    return kit.serve(lambda: _bridge(args), args.socket)


def _relay(args: argparse.Namespace) -> int:
    import anyio
    import httpx2

    from bridges.mcp.stdio import relay

    url = args.url or f"http://127.0.0.1:{args.port}/mcp"
    try:
        anyio.run(relay, url, Path.cwd())
    except (httpx2.HTTPError, OSError) as exc:
        print(f"bridge mcp --stdio: the bridge at {url} is not reachable: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


def _bridge(args: argparse.Namespace) -> kit.AgentBridge:
    from bridges.mcp.bridge import McpBridge

    return McpBridge(state_path=args.state, port=args.port, idle=args.idle)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bridges.mcp``."""
    return run(parser("python -m bridges.mcp").parse_args(argv))
