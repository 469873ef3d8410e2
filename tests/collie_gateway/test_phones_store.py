"""Phones in SQLite (issue 21): the schema step on a file of the previous version, a code that
pairs one phone however many send it at once, revoking with the phone's push registrations,
and old codes forgotten."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from collie_gateway.core.phones import CodeState, Effect, Pairing, Phone, Scope, code_hash
from collie_gateway.services.phones import Paired, Phones, Refused
from collie_gateway.store.database import Database
from collie_gateway.store.phones import PhonesRepo
from collie_gateway.store.schema import DELTAS as MIGRATIONS
from collie_gateway.store.schema import PHONES as PHONES_MIGRATION

T0 = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    opened = await Database.open(tmp_path / "gateway.db")
    try:
        yield opened
    finally:
        await opened.close()


def phones_of(db: Database, clock: Clock) -> Phones:
    return Phones(
        PhonesRepo(db), admin_token="admin", clock=clock, monotonic=asyncio.get_running_loop().time
    )


async def test_a_file_of_the_previous_version_gains_phones_and_keeps_its_answers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        before = MIGRATIONS.index(PHONES_MIGRATION)  # later steps came after it
        for step in MIGRATIONS[:before]:
            conn.executescript(step)
        conn.execute(f"PRAGMA user_version={before}")
        conn.execute(
            "INSERT INTO answers VALUES ('r1', 'desk', 'p', 1, x'7b7d', 1, 1, 'accepted', NULL,"
            " '2026-01-01', '2026-01-01')"
        )
        conn.commit()
    db = await Database.open(path)
    try:
        rows = await db.query(
            lambda c: c.execute("SELECT request_id, phone FROM answers").fetchall()
        )
        assert rows == [("r1", None)]
        version = await db.query(lambda c: c.execute("PRAGMA user_version").fetchone()[0])
        assert version == len(MIGRATIONS)
        assert await PhonesRepo(db).phones() == []
    finally:
        await db.close()


async def test_a_code_sent_50_times_at_once_pairs_one_phone(db: Database) -> None:
    phones = phones_of(db, Clock())
    made = await phones.new_code()
    results = await asyncio.gather(
        *(phones.pair(made.code, f"phone {i}", None, None, f"10.0.0.{i}") for i in range(50))
    )
    paired = [r for r in results if isinstance(r, Paired)]
    refused = [r for r in results if isinstance(r, Refused)]
    assert len(paired) == 1
    assert {r.effect for r in refused} == {Effect.REFUSE_USED}
    assert [p.name for p in await phones.phones()] == [paired[0].phone.name]
    found = await phones.repo.pairing(made.pairing_id)
    assert found is not None
    assert (found[0].state, found[1]) == (CodeState.USED, paired[0].phone)


async def test_revoking_removes_that_phones_push_registrations_only(db: Database) -> None:
    repo = PhonesRepo(db)
    for phone_id in ("p-a", "p-b"):
        await repo.add_phone(Phone(phone_id, phone_id, Scope.ANSWER, T0, "h-" + phone_id))

    def register(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO devices(id, provider, token, environment, key, registered_at, phone)"
            " VALUES (?, 'fcm', ?, 'production', NULL, 0, ?)",
            [("d-1", "t1", "p-a"), ("d-2", "t2", "p-b"), ("d-3", "t3", None)],
        )

    await db.run(register)
    assert await repo.revoke("p-a", T0) is True
    assert await repo.revoke("p-a", T0) is False
    left = await db.query(lambda c: c.execute("SELECT id FROM devices ORDER BY id").fetchall())
    assert left == [("d-2",), ("d-3",)]
    gone = await repo.phone("p-a")
    assert gone is not None
    assert (gone.name, gone.token_hash, gone.revoked_at) == ("p-a", "", T0)
    assert await repo.active_ids() == {"p-b"}


async def test_codes_a_day_past_their_time_are_forgotten(db: Database) -> None:
    repo = PhonesRepo(db)
    old = Pairing("k-old", code_hash("old"), Scope.ANSWER, T0, T0 + timedelta(minutes=5))
    await repo.add_pairing(old)
    later = T0 + timedelta(days=1, minutes=6)
    new = Pairing("k-new", code_hash("new"), Scope.READ, later, later + timedelta(minutes=5))
    await repo.add_pairing(new)
    assert await repo.pairing("k-old") is None
    found = await repo.pairing("k-new")
    assert found is not None
    assert found[0] == new


async def test_when_a_phone_was_last_seen_is_written_at_most_once_a_minute(
    db: Database,
) -> None:
    clock = Clock()
    phones = phones_of(db, clock)
    made = await phones.new_code()
    paired = await phones.pair(made.code, "Pixel", None, None, "10.0.0.1")
    assert isinstance(paired, Paired)
    assert await phones.caller(paired.token, "10.0.0.1") == paired.phone.caller
    await asyncio.sleep(0.05)  # the first sighting is written at once
    clock.now += timedelta(seconds=30)
    assert await phones.caller(paired.token, "10.0.0.2") is not None
    await asyncio.sleep(0.05)  # the second is not: within the minute
    stored = await phones.repo.phone(paired.phone.phone_id)
    assert stored is not None
    assert (stored.last_seen, stored.last_address) == (T0, "10.0.0.1")
    (shown,) = await phones.phones()  # what is not yet written shows too
    assert (shown.last_seen, shown.last_address) == (clock.now, "10.0.0.2")
    await phones.close()
    stored = await phones.repo.phone(paired.phone.phone_id)
    assert stored is not None
    assert (stored.last_seen, stored.last_address) == (clock.now, "10.0.0.2")
    assert await phones.caller("admin", None) is not None
    assert await phones.caller("collie.p-unknown.secret", None) is None
    assert await phones.caller("garbage", None) is None


async def test_wrong_codes_sent_at_once_from_one_address_get_ten_tries_not_one_each(
    db: Database,
) -> None:
    phones = phones_of(db, Clock())
    redeem = phones.repo.redeem

    async def busy_redeem(*args: Any) -> Any:  # a store busy with other writers: each waits
        await asyncio.sleep(0.01)
        return await redeem(*args)

    phones.repo.redeem = busy_redeem  # type: ignore[method-assign,assignment]
    made = await phones.new_code()
    # 40 wrong codes at once, each waiting for the store: the limit holds across them all.
    results = await asyncio.gather(
        *(phones.pair(f"wrong-{i}", "x", None, None, "198.51.100.7") for i in range(40))
    )
    looked_up = [r for r in results if isinstance(r, Refused) and r.retry_after is None]
    held = [r for r in results if isinstance(r, Refused) and r.retry_after is not None]
    assert (len(looked_up), len(held)) == (10, 30)
    # The right code from another address pairs, and a pairing takes back its own count.
    other = await phones.pair(made.code, "mine", None, None, "198.51.100.8")
    assert isinstance(other, Paired)
    assert phones.retry_after("198.51.100.8") is None
    second = await phones.new_code()
    for i in range(9):
        assert isinstance(await phones.pair(f"nope-{i}", "y", None, None, "198.51.100.8"), Refused)
    assert isinstance(await phones.pair(second.code, "again", None, None, "198.51.100.8"), Paired)
    assert phones.retry_after("198.51.100.8") is None  # 9 failures: the pairing did not count
