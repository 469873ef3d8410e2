"""The bridge kit: what every bridge shares, so a new one writes only its mapping (peer ⇄ wire).

``lifecycle`` (an ``AgentBridge`` served until SIGINT/SIGTERM, one clean stop), ``cli`` (the
common options, logging, the main), ``state`` (the bridge's own tables: the only SQL in
``bridges/``), ``notices`` (the notice items a bridge appends, ``utc``), ``asks`` (typed asks on
the wire's types), ``fit`` (a peer's ids and words fitted to the wire's limits). Imports
``wire`` only, never ``collie_gateway``; ``docs/examples/bridge_minimal.py`` is the smallest
bridge on it.
"""

from __future__ import annotations

from bridges.kit import asks
from bridges.kit.asks import AskDraft
from bridges.kit.cli import add_common, main, serve, start_logging
from bridges.kit.lifecycle import AgentBridge, serve_until_stopped
from bridges.kit.notices import notice, utc
from bridges.kit.state import State, Table

__all__ = [
    "AgentBridge",
    "AskDraft",
    "State",
    "Table",
    "add_common",
    "asks",
    "main",
    "notice",
    "serve",
    "serve_until_stopped",
    "start_logging",
    "utc",
]
