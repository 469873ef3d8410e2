"""Bridges: wire-v1 agents built on the SDK (``wire.agent``) that put agents speaking another
protocol on the phone. One module per peer protocol, each a mapping (peer ⇄ wire) on the shared
kit (``bridges.kit``: lifecycle, command line, state, notices, asks); only ``wire`` is imported,
never ``collie_gateway``."""
