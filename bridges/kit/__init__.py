"""The bridge kit: what every bridge shares, so a new one writes only its mapping (peer ⇄ wire).

``lifecycle`` (an ``AgentBridge`` served until SIGINT/SIGTERM, one clean stop), ``cli`` (the
common options, logging, the main), ``state`` (the bridge's own tables: the only SQL in
``bridges/``), ``notices`` (the notice items a bridge appends, ``utc``), ``asks`` (typed asks on
the wire's types), ``fit`` (a peer's ids and words fitted to the wire's limits). Imports
``wire`` only, never ``collie_gateway``; ``docs/examples/bridge_minimal.py`` is the smallest
bridge on it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bridges.kit import asks
    from bridges.kit.asks import AskDraft
    from bridges.kit.cli import add_common, main, serve, start_logging
    from bridges.kit.lifecycle import AgentBridge, serve_until_stopped
    from bridges.kit.notices import notice, utc
    from bridges.kit.state import State, Table

# Each name loads with its module on first use: a pure mapping that imports ``bridges.kit.asks``
# or ``bridges.kit.fit`` does not load the shells (asyncio, SQLite) with the package.
_HOMES = {
    "asks": "",
    "AskDraft": "asks",
    "add_common": "cli",
    "main": "cli",
    "serve": "cli",
    "start_logging": "cli",
    "AgentBridge": "lifecycle",
    "serve_until_stopped": "lifecycle",
    "notice": "notices",
    "utc": "notices",
    "State": "state",
    "Table": "state",
}

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


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not home:
        return import_module(f"{__name__}.{name}")
    return getattr(import_module(f"{__name__}.{home}"), name)
