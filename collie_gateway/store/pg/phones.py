"""Phones and pairing codes on PostgreSQL: the same rows and decisions as the SQLite file's
(store/phones.py); a code's decision and its write are one transaction holding the code's
row, so a code pairs one phone however many workers are sent it at once."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from collie_gateway.core.phones import Effect, Pairing, Phone, redeem
from collie_gateway.store.pg.database import Conn, PgDatabase
from collie_gateway.store.phones import (
    _PAIRING_COLUMNS,
    _PHONE_COLUMNS,
    KEEP_PAIRINGS,
    _pairing,
    _phone,
    pairing_row,
    phone_row,
)

# A fingerprint of what a running gateway caches of the phones: it moves when any worker
# (or the CLI) pairs or revokes one.
_VERSION = (
    "SELECT hashtext(coalesce(string_agg(phone_id || ':' || token_hash || ':' ||"
    " coalesce(revoked_at, ''), ',' ORDER BY phone_id), '')) FROM phones"
)


class PgPhonesRepo:
    """Phones, their token hashes, and pairing codes."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    async def add_pairing(self, pairing: Pairing) -> None:
        """Keep a new pairing code (its hash); codes long over are forgotten meanwhile."""
        cutoff = (pairing.created_at - KEEP_PAIRINGS).isoformat()
        async with self.db.transaction() as conn:
            await conn.execute("DELETE FROM pairings WHERE expires_at < %s", (cutoff,))
            await conn.execute(
                f"INSERT INTO pairings({_PAIRING_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                pairing_row(pairing),
            )

    async def pairing(self, pairing_id: str) -> tuple[Pairing, Phone | None, str | None] | None:
        """A pairing code by id, the phone it paired and the check number both show."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                f"SELECT {_PAIRING_COLUMNS}, check_number FROM pairings WHERE pairing_id = %s",
                (pairing_id,),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            pairing = _pairing(tuple(row[:-1]))
            phone = await _phone_of(conn, pairing.phone_id) if pairing.phone_id else None
        return pairing, phone, row[-1]

    async def redeem(
        self,
        code_hash: str,
        now: datetime,
        make: Callable[[Pairing], tuple[Phone, str | None, str]],
    ) -> tuple[Effect, Phone | None]:
        """Decide a phone's code and, when it pairs, keep the phone ``make`` builds from the
        pairing (the phone, its public key, the check number): one transaction holding the
        code's row."""
        async with self.db.transaction() as conn:
            cur = await conn.execute(
                f"SELECT {_PAIRING_COLUMNS} FROM pairings WHERE code_hash = %s FOR UPDATE",
                (code_hash,),
            )
            row = await cur.fetchone()
            pairing = _pairing(tuple(row)) if row else None
            effect, state = redeem(pairing, now)
            if pairing is None or state is None:
                return effect, None
            if effect is not Effect.PAIR:
                if state is not pairing.state:
                    await conn.execute(
                        "UPDATE pairings SET state = %s WHERE pairing_id = %s",
                        (state.value, pairing.pairing_id),
                    )
                return effect, None
            phone, public_key, check = make(pairing)
            await _insert_phone(conn, phone, public_key)
            await conn.execute(
                "UPDATE pairings SET state = %s, phone_id = %s, check_number = %s "
                "WHERE pairing_id = %s",
                (state.value, phone.phone_id, check, pairing.pairing_id),
            )
        return effect, phone

    async def add_phone(self, phone: Phone, public_key: str | None = None) -> None:
        """Keep a phone made without a code (tests, and a lead's token made on a member)."""
        async with self.db.transaction() as conn:
            await _insert_phone(conn, phone, public_key)

    async def phone(self, phone_id: str) -> Phone | None:
        """A phone by id, revoked or not."""
        async with self.db.reading() as conn:
            return await _phone_of(conn, phone_id)

    async def phones(self) -> list[Phone]:
        """The phones not revoked, oldest pairing first."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                f"SELECT {_PHONE_COLUMNS} FROM phones WHERE revoked_at IS NULL "
                "ORDER BY paired_at, n"
            )
            rows = await cur.fetchall()
        return [_phone(tuple(row)) for row in rows]

    async def active_ids(self) -> set[str]:
        """The ids of the phones not revoked."""
        async with self.db.reading() as conn:
            cur = await conn.execute("SELECT phone_id FROM phones WHERE revoked_at IS NULL")
            rows = await cur.fetchall()
        return {str(row[0]) for row in rows}

    async def revoke(self, phone_id: str, now: datetime) -> bool:
        """Revoke a phone: its token hash is wiped and its push registrations removed, in
        one transaction; its name stays. Whether it was a phone not yet revoked."""
        async with self.db.transaction() as conn:
            cur = await conn.execute(
                "UPDATE phones SET revoked_at = %s, token_hash = '' "
                "WHERE phone_id = %s AND revoked_at IS NULL",
                (now.isoformat(), phone_id),
            )
            await conn.execute("DELETE FROM devices WHERE phone = %s", (phone_id,))
            return cur.rowcount == 1

    async def data_version(self) -> int:
        """A fingerprint of the phones' ids, token hashes and revocations: when it moves,
        a worker or the CLI changed them."""
        async with self.db.reading() as conn:
            cur = await conn.execute(_VERSION)
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def seen(self, seen: list[tuple[str, datetime, str | None]]) -> None:
        """Write when and from where phones were last seen: (phone id, when, address)."""
        rows = [(when.isoformat(), address, phone_id) for phone_id, when, address in seen]
        async with self.db.transaction() as conn, conn.cursor() as cur:
            await cur.executemany(
                "UPDATE phones SET last_seen = %s, last_address = %s WHERE phone_id = %s", rows
            )


async def _phone_of(conn: Conn, phone_id: str) -> Phone | None:
    cur = await conn.execute(
        f"SELECT {_PHONE_COLUMNS} FROM phones WHERE phone_id = %s", (phone_id,)
    )
    row = await cur.fetchone()
    return _phone(tuple(row)) if row else None


async def _insert_phone(conn: Conn, phone: Phone, public_key: str | None) -> None:
    await conn.execute(
        f"INSERT INTO phones({_PHONE_COLUMNS}, public_key)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        phone_row(phone, public_key),
    )
