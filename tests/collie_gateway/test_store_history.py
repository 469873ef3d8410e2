"""One schema history for both engines (``store/schema.py``): a store the gateway left before
it — a SQLite file at its last version, a PostgreSQL database at the last version of its own
history — opens with the one store and goes on, its rows kept; a fresh PostgreSQL database
gets the same tables as one that came from the history before.

The stores before are kept as SQL (``store_history/``): the SQLite file's tables as its
``sqlite_master`` held them, and the PostgreSQL history's five steps.
"""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from collie_gateway.core.answers import Action, Outcome, Tap
from collie_gateway.core.phones import Phone, Scope
from collie_gateway.errors import StoreError
from collie_gateway.store.engine import postgres_schema
from collie_gateway.store.schema import LATEST
from collie_gateway.store.stores import Stores, open_stores
from collie_gateway.store.values import Lease
from fixtures.postgres import drop_database, new_database
from push import Environment, Provider

HISTORY = Path(__file__).with_name("store_history")
NOW = "2026-12-01T10:00:00+00:00"
PAIRED = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
# Rows a gateway kept before: a settled answer, an unsettled one holding its ask's claim, a
# phone, a device registered for it, a crew member's rows (in SQLite's words: the PostgreSQL
# tests take them as the schema's, BLOB as BYTEA).
ROWS = """
INSERT INTO answers(request_id, agent, ask_id, version, answer, attempts, settled, outcome,
    reason, created_at, updated_at, phone)
    VALUES ('r1', 'desk', 'a1', 1, CAST('{}' AS BLOB), 1, 1, 'accepted', NULL, '2026-11-30',
            '2026-11-30', 'p1'),
           ('r2', 'desk', 'a2', 1, CAST('{}' AS BLOB), 1, 0, NULL, NULL, '2026-11-30',
            '2026-11-30', 'p1');
INSERT INTO claims(agent, ask_id, request_id) VALUES ('desk', 'a2', 'r2');
INSERT INTO phones(phone_id, name, scope, token_hash, public_key, paired_at)
    VALUES ('p1', 'Ada''s phone', 'answer', 'h1', NULL, '2026-11-30T09:00:00+00:00');
INSERT INTO devices(id, provider, token, environment, key, registered_at, phone)
    VALUES ('d-1', 'apns', 'tok-1', 'production', NULL, 1.0, 'p1');
INSERT INTO kv(key, value) VALUES ('crew.rows:m1', CAST('[]' AS BLOB));
"""


def tap(request_id: str, ask_id: str) -> Tap:
    return Tap(request_id, "desk", ask_id, 1, b"{}", "p1")


async def goes_on(stores: Stores) -> None:
    """The rows kept before read back, and the store takes new ones."""
    kept = await stores.ledger.record("r1")
    assert kept is not None
    assert kept.outcome is Outcome.ACCEPTED
    assert await stores.ledger.unsettled() == {"r2": ("desk", "a2")}
    decision, _ = await stores.ledger.take(tap("r3", "a2"), NOW)  # a2 is claimed by r2
    assert decision.action is Action.REPLY
    assert decision.record.outcome is Outcome.ANSWERED
    decision, _ = await stores.ledger.take(tap("r4", "a4"), NOW)
    assert decision.action is Action.SEND
    assert [p.phone_id for p in await stores.phones.phones()] == ["p1"]
    await stores.phones.add_phone(Phone("p2", "Bo", Scope.ANSWER, PAIRED, "h2"))
    assert [p.phone_id for p in await stores.phones.phones()] == ["p1", "p2"]
    again = await stores.pushes.register(
        Provider.APNS, "tok-1", Environment.PRODUCTION, None, 2.0, phone="p1"
    )
    assert again == "d-1"
    assert await stores.crew.saved_rows() == {"m1": b"[]"}
    assert await stores.phones.revoke("p1", PAIRED)
    assert await stores.pushes.devices() == []


async def test_a_sqlite_file_at_its_last_version_before_opens_and_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "gateway.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript((HISTORY / "sqlite_v7.sql").read_text() + ROWS)
    stores = await open_stores(path)
    try:
        await goes_on(stores)
    finally:
        await stores.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (LATEST,)


async def _script(url: str, script: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(script.encode())


async def _columns(url: str) -> list[tuple[str, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text,"
            " coalesce(column_default::text, '') FROM information_schema.columns"
            " WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
        )
        return [tuple(row) for row in await cur.fetchall()]


async def test_a_postgres_database_of_the_history_before_opens_and_goes_on(pg_url: str) -> None:
    await _script(pg_url, (HISTORY / "postgresql_v5.sql").read_text() + postgres_schema(ROWS))
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute("SELECT value FROM kv WHERE key = 'store_id'")
        store_id = await cur.fetchone()
    stores = await open_stores(Path("unused.db"), pg_url)
    try:
        await goes_on(stores)
        assert stores.cluster is not None
        log = stores.cluster.event_log()
        assert (await log.store_id()).encode() == (store_id or (b"",))[0]  # event ids go on
        assert await log.publish("list.row", b"{}") == 1
        lease = await stores.cluster.leases("w1", 5.0).take("desk")
        assert lease == Lease("desk", "w1", 1)
    finally:
        await stores.close()
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute("SELECT version FROM collie_schema")
        assert await cur.fetchall() == [(LATEST,)]


async def test_a_fresh_postgres_database_has_the_tables_of_the_history_before(
    pg_url: str, pg_admin: str
) -> None:
    await (await open_stores(Path("unused.db"), pg_url)).close()
    before = new_database(pg_admin)
    try:
        await _script(before, (HISTORY / "postgresql_v5.sql").read_text())
        await (await open_stores(Path("unused.db"), before)).close()
        assert await _columns(pg_url) == await _columns(before)
    finally:
        drop_database(pg_admin, before)


async def test_a_postgres_database_midway_through_the_history_before_is_refused_unchanged(
    pg_url: str,
) -> None:
    steps = (HISTORY / "postgresql_v5.sql").read_text().split("-- step 3\n")[0]
    version = (
        "CREATE TABLE collie_schema (one INTEGER PRIMARY KEY CHECK (one = 1), version INTEGER);"
        " INSERT INTO collie_schema VALUES (1, 2);"
    )
    await _script(pg_url, steps + version)
    with pytest.raises(StoreError, match="schema version 2 of an older gateway's PostgreSQL"):
        await open_stores(Path("unused.db"), pg_url)
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute("SELECT version FROM collie_schema")
        assert await cur.fetchall() == [(2,)]
