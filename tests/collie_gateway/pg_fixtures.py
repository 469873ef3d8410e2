"""PostgreSQL for the tests: the server named by ``COLLIE_TEST_PG`` (CI starts one), else a
throw-away server each test process (each xdist worker) starts itself
(``fixtures/postgres.py``). Each test that
asks for ``pg_url`` gets a fresh database of its own, dropped after it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from fixtures.postgres import ThrowawayPostgres, drop_database, new_database


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[str]:
    """The URL of a database on a server this session may create databases on."""
    url = os.environ.get("COLLIE_TEST_PG")
    if url:
        yield url
        return
    with ThrowawayPostgres() as server:
        yield server.url()


@pytest.fixture
def pg_url(pg_admin: str) -> Iterator[str]:
    """A fresh, empty database for one test."""
    url = new_database(pg_admin)
    try:
        yield url
    finally:
        drop_database(pg_admin, url)
