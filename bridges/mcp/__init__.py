"""The MCP bridge: any MCP-capable agent (Claude Code, Codex, Gemini CLI …) asks the person on
the phone through MCP tools; the bridge is a wire-v1 durable agent (``wire.agent``).

Run by hand: ``collie-gateway bridge mcp --socket PATH --state PATH [--port 8790]``; a host
that only launches commands: ``collie-gateway bridge mcp --stdio [--port 8790]``.
"""

from __future__ import annotations

from bridges.mcp.bridge import McpBridge
from bridges.mcp.cli import main, parser

__all__ = ["McpBridge", "main", "parser"]
