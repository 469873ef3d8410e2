"""Bridges: wire-v1 agents built on the SDK (``wire.agent``) that put agents speaking another
protocol on the phone. One module per peer protocol; only ``wire`` is imported, never
``collie_gateway``."""
