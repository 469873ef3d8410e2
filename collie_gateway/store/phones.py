"""Phones and pairing codes: the SQL only. The decisions (a code's transitions, token hashes)
are :mod:`collie_gateway.core.phones`, run inside these transactions so a decision and its
write are one step: a code's decision holds the code's row, so a code pairs one phone however
many send it at once (on any worker). No token and no code is ever stored, only their hashes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final

from collie_gateway.core.phones import (
    CodeState,
    Effect,
    Pairing,
    Phone,
    Scope,
    redeem,
)
from collie_gateway.store.engine import POSTGRESQL, SQLITE, Db, Tx

_PHONE_COLUMNS: Final = (
    "phone_id, name, scope, token_hash, paired_at, last_seen, last_address, revoked_at"
)
_PAIRING_COLUMNS: Final = "pairing_id, code_hash, scope, created_at, expires_at, state, phone_id"
# Pairing codes are kept this long after they expire or are used (the CLI reads the outcome).
KEEP_PAIRINGS: Final = timedelta(days=1)
# A number that moves when another process changed the phones: SQLite's count of commits by
# other connections to the file; on PostgreSQL a fingerprint of the phones' ids, token hashes
# and revocations (any worker or the CLI pairing or revoking one moves it).
_VERSION: Final = {
    SQLITE: "PRAGMA data_version",
    POSTGRESQL: "SELECT hashtext(coalesce(string_agg(phone_id || ':' || token_hash || ':' ||"
    " coalesce(revoked_at, ''), ',' ORDER BY phone_id), '')) FROM phones",
}


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

    def __init__(self, db: Db) -> None:
        self.db = db

    async def add_pairing(self, pairing: Pairing) -> None:
        """Keep a new pairing code (its hash); codes long over are forgotten meanwhile."""
        # Times are kept as UTC ISO text: their order is the text's order.
        cutoff = (pairing.created_at - KEEP_PAIRINGS).isoformat()

        async def write(tx: Tx) -> None:
            await tx.run("DELETE FROM pairings WHERE expires_at < ?", (cutoff,))
            await tx.run(
                f"INSERT INTO pairings({_PAIRING_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                _pairing_row(pairing),
            )

        await self.db.write(write)

    async def pairing(self, pairing_id: str) -> tuple[Pairing, Phone | None, str | None] | None:
        """A pairing code by id, the phone it paired and the check number both show."""

        async def read(tx: Tx) -> tuple[Pairing, Phone | None, str | None] | None:
            row = await tx.one(
                f"SELECT {_PAIRING_COLUMNS}, check_number FROM pairings WHERE pairing_id = ?",
                (pairing_id,),
            )
            if row is None:
                return None
            pairing = _pairing(tuple(row[:-1]))
            phone = await _phone_of(tx, pairing.phone_id) if pairing.phone_id else None
            return pairing, phone, row[-1]

        return await self.db.read(read)

    async def redeem(
        self,
        code_hash: str,
        now: datetime,
        make: Callable[[Pairing], tuple[Phone, str | None, str]],
    ) -> tuple[Effect, Phone | None]:
        """Decide a phone's code and, when it pairs, keep the phone ``make`` builds from the
        pairing (the phone, its public key, the check number): one transaction, so a code
        pairs one phone however many send it at once."""

        async def decide(tx: Tx) -> tuple[Effect, Phone | None]:
            row = await tx.one(
                f"SELECT {_PAIRING_COLUMNS} FROM pairings WHERE code_hash = ? FOR UPDATE",
                (code_hash,),
            )
            pairing = _pairing(tuple(row)) if row else None
            effect, state = redeem(pairing, now)
            if pairing is None or state is None:
                return effect, None
            if effect is not Effect.PAIR:
                if state is not pairing.state:
                    await tx.run(
                        "UPDATE pairings SET state = ? WHERE pairing_id = ?",
                        (state.value, pairing.pairing_id),
                    )
                return effect, None
            phone, public_key, check = make(pairing)
            await _insert_phone(tx, phone, public_key)
            await tx.run(
                "UPDATE pairings SET state = ?, phone_id = ?, check_number = ? "
                "WHERE pairing_id = ?",
                (state.value, phone.phone_id, check, pairing.pairing_id),
            )
            return effect, phone

        return await self.db.write(decide)

    async def add_phone(self, phone: Phone, public_key: str | None = None) -> None:
        """Keep a phone made without a code (tests, and a lead's token made on a member)."""
        await self.db.write(lambda tx: _insert_phone(tx, phone, public_key))

    async def phone(self, phone_id: str) -> Phone | None:
        """A phone by id, revoked or not."""
        return await self.db.read(lambda tx: _phone_of(tx, phone_id))

    async def phones(self) -> list[Phone]:
        """The phones not revoked, oldest pairing first."""

        async def read(tx: Tx) -> list[Phone]:
            rows = await tx.all(
                f"SELECT {_PHONE_COLUMNS} FROM phones WHERE revoked_at IS NULL "
                f"ORDER BY paired_at, {tx.insert_order}"
            )
            return [_phone(tuple(row)) for row in rows]

        return await self.db.read(read)

    async def active_ids(self) -> set[str]:
        """The ids of the phones not revoked."""
        sql = "SELECT phone_id FROM phones WHERE revoked_at IS NULL"
        return {str(row[0]) for row in await self.db.read(lambda tx: tx.all(sql))}

    async def revoke(self, phone_id: str, now: datetime) -> bool:
        """Revoke a phone: its token hash is wiped and its push registrations removed, in
        one transaction; its name stays (the ledger names it). Whether it was a phone not
        yet revoked."""

        async def write(tx: Tx) -> bool:
            changed = await tx.run(
                "UPDATE phones SET revoked_at = ?, token_hash = '' "
                "WHERE phone_id = ? AND revoked_at IS NULL",
                (now.isoformat(), phone_id),
            )
            await tx.run("DELETE FROM devices WHERE phone = ?", (phone_id,))
            return changed == 1

        return await self.db.write(write)

    async def data_version(self) -> int:
        """A number that moves when another process (another worker, the CLI) changed the
        phones."""
        row = await self.db.read(lambda tx: tx.one(_VERSION[tx.engine]))
        return int(row[0]) if row else 0

    async def seen(self, seen: list[tuple[str, datetime, str | None]]) -> None:
        """Write when and from where phones were last seen: (phone id, when, address)."""
        rows = [(when.isoformat(), address, phone_id) for phone_id, when, address in seen]
        sql = "UPDATE phones SET last_seen = ?, last_address = ? WHERE phone_id = ?"
        await self.db.write(lambda tx: tx.many(sql, rows))


async def _phone_of(tx: Tx, phone_id: str) -> Phone | None:
    row = await tx.one(f"SELECT {_PHONE_COLUMNS} FROM phones WHERE phone_id = ?", (phone_id,))
    return _phone(tuple(row)) if row else None


async def _insert_phone(tx: Tx, phone: Phone, public_key: str | None) -> None:
    p, unseen = phone, (None, None, None)  # last seen, from where, revoked
    row = (p.phone_id, p.name, p.scope.value, p.token_hash, p.paired_at.isoformat())
    await tx.run(
        f"INSERT INTO phones({_PHONE_COLUMNS}, public_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*row, *unseen, public_key),
    )


def _pairing_row(pairing: Pairing) -> tuple[object, ...]:
    p = pairing
    at = (p.created_at.isoformat(), p.expires_at.isoformat())
    return (p.pairing_id, p.code_hash, p.scope.value, *at, p.state.value, None)
