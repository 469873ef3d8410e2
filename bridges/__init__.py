"""Bridges: wire-v1 agents, built on the SDK, that put other agent runtimes on the phone.

Each imports ``wire`` only, never ``collie_gateway``."""
