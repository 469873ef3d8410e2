"""The ACP bridge: any Agent Client Protocol agent as a durable agent (wire v1).

Run by hand: ``collie-gateway bridge acp --socket PATH --state PATH [--cwd DIR] -- COMMAND …``
(or ``python -m bridges.acp`` with the same arguments).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bridges.acp.bridge import AcpBridge
    from bridges.acp.cli import main, parser

__all__ = ["AcpBridge", "main", "parser"]


def __getattr__(name: str) -> object:
    # Loaded on first use: the pure mappings (jsonrpc, mapping, schema) import no shell.
    if name == "AcpBridge":
        from bridges.acp.bridge import AcpBridge

        return AcpBridge
    if name in ("main", "parser"):
        from bridges.acp import cli

        return getattr(cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
