"""The ACP bridge: any Agent Client Protocol agent as a durable agent (wire v1).

Run by hand: ``collie-gateway bridge acp --socket PATH --state PATH [--cwd DIR] -- COMMAND …``
(or ``python -m bridges.acp`` with the same arguments).
"""

from __future__ import annotations

from bridges.acp.bridge import AcpBridge
from bridges.acp.cli import main, parser

__all__ = ["AcpBridge", "main", "parser"]
