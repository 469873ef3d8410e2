"""Phones and pairing codes in SQLite: the SQL only. The decisions (a code's transitions,
token hashes) are :mod:`collie_gateway.core.phones`, run inside these transactions so a
decision and its write are one step. No token and no code is ever stored, only their hashes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final, Protocol, TypeVar

from collie_gateway.core.phones import (
    CodeState,
    Effect,
    Pairing,
    Phone,
    Scope,
    redeem,
)

T = TypeVar("T")

#: The schema step of phones (one entry of the database's migrations, after the others):
#: the phones, the pairing codes, and the phone of each answer and each push registration.
MIGRATION: Final = """
    CREATE TABLE phones (
        phone_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        scope TEXT NOT NULL,
        token_hash TEXT NOT NULL,
        public_key TEXT,
        paired_at TEXT NOT NULL,
        last_seen TEXT,
        last_address TEXT,
        revoked_at TEXT
    );
    CREATE TABLE pairings (
        pairing_id TEXT PRIMARY KEY,
        code_hash TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        state TEXT NOT NULL,
        phone_id TEXT,
        check_number TEXT
    ) WITHOUT ROWID;
    ALTER TABLE answers ADD COLUMN phone TEXT;
    ALTER TABLE devices ADD COLUMN phone TEXT;
    """

_PHONE_COLUMNS: Final = (
    "phone_id, name, scope, token_hash, paired_at, last_seen, last_address, revoked_at"
)
_PAIRING_COLUMNS: Final = "pairing_id, code_hash, scope, created_at, expires_at, state, phone_id"
# Pairing codes are kept this long after they expire or are used (the CLI reads the outcome).
KEEP_PAIRINGS: Final = timedelta(days=1)


class Runs(Protocol):
    """What the repository needs of the database: a quick write transaction and quick reads
    on the loop's connection (``Database.run`` and ``Database.query``)."""

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def query(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _phone(row: tuple[Any, ...]) -> Phone:
    phone_id, name, scope, hashed, paired, seen, address, revoked = row
    return Phone(
        phone_id=phone_id,
        name=name,
        scope=Scope(scope),
        paired_at=datetime.fromisoformat(paired),
        token_hash=hashed,
        last_seen=_time(seen),
        last_address=address,
        revoked_at=_time(revoked),
    )


def _pairing(row: tuple[Any, ...]) -> Pairing:
    pairing_id, hashed, scope, created, expires, state, phone_id = row
    return Pairing(
        pairing_id=pairing_id,
        code_hash=hashed,
        scope=Scope(scope),
        created_at=datetime.fromisoformat(created),
        expires_at=datetime.fromisoformat(expires),
        state=CodeState(state),
        phone_id=phone_id,
    )


class PhonesRepo:
    """Phones, their token hashes, and pairing codes."""

    def __init__(self, db: Runs) -> None:
        self.db = db

    async def add_pairing(self, pairing: Pairing) -> None:
        """Keep a new pairing code (its hash); codes long over are forgotten meanwhile."""
        # Times are kept as UTC ISO text: their order is the text's order.
        cutoff = (pairing.created_at - KEEP_PAIRINGS).isoformat()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM pairings WHERE expires_at < ?", (cutoff,))
            conn.execute(
                f"INSERT INTO pairings({_PAIRING_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                pairing_row(pairing),
            )

        await self.db.run(write)

    async def pairing(self, pairing_id: str) -> tuple[Pairing, Phone | None, str | None] | None:
        """A pairing code by id, the phone it paired and the check number both show."""

        def read(conn: sqlite3.Connection) -> tuple[Pairing, Phone | None, str | None] | None:
            row = conn.execute(
                f"SELECT {_PAIRING_COLUMNS}, check_number FROM pairings WHERE pairing_id = ?",
                (pairing_id,),
            ).fetchone()
            if row is None:
                return None
            pairing = _pairing(row[:-1])
            phone = _phone_sync(conn, pairing.phone_id) if pairing.phone_id else None
            return pairing, phone, row[-1]

        return await self.db.query(read)

    async def redeem(
        self,
        code_hash: str,
        now: datetime,
        make: Callable[[Pairing], tuple[Phone, str | None, str]],
    ) -> tuple[Effect, Phone | None]:
        """Decide a phone's code and, when it pairs, keep the phone ``make`` builds from the
        pairing (the phone, its public key, the check number): one transaction, so a code
        pairs one phone however many send it at once."""

        def decide(conn: sqlite3.Connection) -> tuple[Effect, Phone | None]:
            row = conn.execute(
                f"SELECT {_PAIRING_COLUMNS} FROM pairings WHERE code_hash = ?", (code_hash,)
            ).fetchone()
            pairing = _pairing(row) if row else None
            effect, state = redeem(pairing, now)
            if pairing is None or state is None:
                return effect, None
            if effect is not Effect.PAIR:
                if state is not pairing.state:
                    conn.execute(
                        "UPDATE pairings SET state = ? WHERE pairing_id = ?",
                        (state.value, pairing.pairing_id),
                    )
                return effect, None
            phone, public_key, check = make(pairing)
            _insert_phone_sync(conn, phone, public_key)
            conn.execute(
                "UPDATE pairings SET state = ?, phone_id = ?, check_number = ? "
                "WHERE pairing_id = ?",
                (state.value, phone.phone_id, check, pairing.pairing_id),
            )
            return effect, phone

        return await self.db.run(decide)

    async def add_phone(self, phone: Phone, public_key: str | None = None) -> None:
        """Keep a phone made without a code (tests, and a lead's token made on a member)."""
        await self.db.run(lambda conn: _insert_phone_sync(conn, phone, public_key))

    async def phone(self, phone_id: str) -> Phone | None:
        """A phone by id, revoked or not."""
        return await self.db.query(lambda conn: _phone_sync(conn, phone_id))

    async def phones(self) -> list[Phone]:
        """The phones not revoked, oldest pairing first."""

        def read(conn: sqlite3.Connection) -> list[Phone]:
            rows = conn.execute(
                f"SELECT {_PHONE_COLUMNS} FROM phones WHERE revoked_at IS NULL "
                "ORDER BY paired_at, rowid"
            ).fetchall()
            return [_phone(row) for row in rows]

        return await self.db.query(read)

    async def active_ids(self) -> set[str]:
        """The ids of the phones not revoked."""

        def read(conn: sqlite3.Connection) -> set[str]:
            rows = conn.execute("SELECT phone_id FROM phones WHERE revoked_at IS NULL")
            return {row[0] for row in rows}

        return await self.db.query(read)

    async def revoke(self, phone_id: str, now: datetime) -> bool:
        """Revoke a phone: its token hash is wiped and its push registrations removed, in
        one transaction; its name stays (the ledger names it). Whether it was a phone not
        yet revoked."""

        def write(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE phones SET revoked_at = ?, token_hash = '' "
                "WHERE phone_id = ? AND revoked_at IS NULL",
                (now.isoformat(), phone_id),
            )
            conn.execute("DELETE FROM devices WHERE phone = ?", (phone_id,))
            return cur.rowcount == 1

        return await self.db.run(write)

    async def data_version(self) -> int:
        """SQLite's count of commits made by other connections to the file (another
        process, e.g. the CLI): when it moves, phones may have changed."""
        return await self.db.query(
            lambda conn: int(conn.execute("PRAGMA data_version").fetchone()[0])
        )

    async def seen(self, seen: list[tuple[str, datetime, str | None]]) -> None:
        """Write when and from where phones were last seen: (phone id, when, address)."""
        rows = [(when.isoformat(), address, phone_id) for phone_id, when, address in seen]

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "UPDATE phones SET last_seen = ?, last_address = ? WHERE phone_id = ?", rows
            )

        await self.db.run(write)


def _phone_sync(conn: sqlite3.Connection, phone_id: str) -> Phone | None:
    row = conn.execute(
        f"SELECT {_PHONE_COLUMNS} FROM phones WHERE phone_id = ?", (phone_id,)
    ).fetchone()
    return _phone(row) if row else None


def _insert_phone_sync(conn: sqlite3.Connection, phone: Phone, public_key: str | None) -> None:
    conn.execute(
        f"INSERT INTO phones({_PHONE_COLUMNS}, public_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        phone_row(phone, public_key),
    )


def pairing_row(pairing: Pairing) -> tuple[object, ...]:
    """A new pairing code's row, in ``_PAIRING_COLUMNS``' order (both backends)."""
    p = pairing
    at = (p.created_at.isoformat(), p.expires_at.isoformat())
    return (p.pairing_id, p.code_hash, p.scope.value, *at, p.state.value, None)


def phone_row(phone: Phone, public_key: str | None) -> tuple[object, ...]:
    """A new phone's row: ``_PHONE_COLUMNS`` then ``public_key`` (both backends)."""
    p, unseen = phone, (None, None, None)  # last seen, from where, revoked
    return (
        p.phone_id,
        p.name,
        p.scope.value,
        p.token_hash,
        p.paired_at.isoformat(),
        *unseen,
        public_key,
    )
