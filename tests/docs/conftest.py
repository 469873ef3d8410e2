"""The gateway tests' rig, for the README's examples run against a real gateway."""

from tests.collie_gateway.conftest import rig

__all__ = ["rig"]
