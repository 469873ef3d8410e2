"""The MCP bridge: any MCP-capable agent (Claude Code, Codex, Gemini CLI …) asks the person on
the phone through MCP tools; the bridge is a wire-v1 durable agent (``wire.agent``).

Run by hand: ``collie-gateway bridge mcp --socket PATH --state PATH [--port 8790]``; a host
that only launches commands: ``collie-gateway bridge mcp --stdio [--port 8790]``.

The names below load on first use: the gateway's command line reads ``bridges.mcp.cli`` to
build its parser, and must not pay for the MCP server package (~0.6 s) on every start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bridges.mcp.bridge import McpBridge
    from bridges.mcp.cli import main, parser

__all__ = ["McpBridge", "main", "parser"]


def __getattr__(name: str) -> object:
    if name == "McpBridge":
        from bridges.mcp.bridge import McpBridge

        return McpBridge
    if name in ("main", "parser"):
        from bridges.mcp import cli

        return getattr(cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
