"""The gateway tests' rig, for the docs' examples run against a real gateway, and a fresh
PostgreSQL database for the pages that run workers on one."""

from tests.collie_gateway.conftest import rig
from tests.collie_gateway.pg_fixtures import pg_admin, pg_url

__all__ = ["pg_admin", "pg_url", "rig"]
