"""The relay's SQLite file: subscriptions (provider token, public parts, bound VAPID key,
state) and each subscription's count of alerting pushes per UTC day."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import aiosqlite

from push.models import Environment, Provider
from push.relay.states import State

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS subscriptions(
    id TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    token TEXT NOT NULL,
    environment TEXT NOT NULL,
    p256dh TEXT,
    vapid TEXT,
    secret_hash BLOB NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS quota(
    sub TEXT NOT NULL,
    day INTEGER NOT NULL,
    alerts INTEGER NOT NULL,
    PRIMARY KEY (sub, day)
);
"""
ID_BYTES: Final = 24  # 32 base64url characters: an endpoint nobody guesses
SECRET_BYTES: Final = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    """One registration of an app's provider token."""

    id: str
    provider: Provider
    token: str
    environment: Environment
    p256dh: str | None
    vapid: str | None
    state: State
    created_at: float


def _hash(secret: str) -> bytes:
    return hashlib.sha256(b"collie-relay\0" + secret.encode()).digest()


class RelayStore:
    """The relay's state; one connection, each write its own transaction."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    @classmethod
    async def open(cls, path: Path | str) -> RelayStore:
        """Open (or create) the file."""
        db = await aiosqlite.connect(path, isolation_level=None)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.executescript(SCHEMA)
        return cls(db)

    async def close(self) -> None:
        """Close the file."""
        await self._db.close()

    async def create(
        self,
        *,
        provider: Provider,
        token: str,
        environment: Environment,
        p256dh: str | None,
        vapid: str | None,
        now: float,
    ) -> tuple[Subscription, str]:
        """A new subscription, and the secret the app deletes it with (only its hash is
        kept)."""
        sub = Subscription(
            id=secrets.token_urlsafe(ID_BYTES),
            provider=provider,
            token=token,
            environment=environment,
            p256dh=p256dh,
            vapid=vapid,
            state=State.BOUND if vapid else State.UNBOUND,
            created_at=now,
        )
        secret = secrets.token_urlsafe(SECRET_BYTES)
        await self._db.execute(
            "INSERT INTO subscriptions(id, provider, token, environment, p256dh, vapid,"
            " secret_hash, state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                sub.id,
                provider.value,
                token,
                environment.value,
                p256dh,
                vapid,
                _hash(secret),
                sub.state.value,
                now,
            ),
        )
        return sub, secret

    async def get(self, sub_id: str) -> Subscription | None:
        """The subscription, or None."""
        async with self._db.execute(
            "SELECT id, provider, token, environment, p256dh, vapid, state, created_at"
            " FROM subscriptions WHERE id = ?",
            (sub_id,),
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        return Subscription(
            id=str(row[0]),
            provider=Provider(row[1]),
            token=str(row[2]),
            environment=Environment(row[3]),
            p256dh=row[4],
            vapid=row[5],
            state=State(row[6]),
            created_at=float(row[7]),
        )

    async def secret_matches(self, sub_id: str, secret: str) -> bool:
        """Whether ``secret`` is the subscription's (compared in constant time)."""
        async with self._db.execute(
            "SELECT secret_hash FROM subscriptions WHERE id = ?", (sub_id,)
        ) as cur:
            row = await cur.fetchone()
        return row is not None and hmac.compare_digest(bytes(row[0]), _hash(secret))

    async def bind(self, sub_id: str, key: str) -> str | None:
        """Bind an unbound subscription to ``key``; the key it is bound to after (another
        push may have bound it first)."""
        await self._db.execute(
            "UPDATE subscriptions SET vapid = ?, state = ? WHERE id = ? AND vapid IS NULL"
            " AND state = ?",
            (key, State.BOUND.value, sub_id, State.UNBOUND.value),
        )
        sub = await self.get(sub_id)
        return sub.vapid if sub is not None else None

    async def set_state(self, sub_id: str, state: State, reason: str | None = None) -> None:
        """Record the subscription's next state (and why)."""
        await self._db.execute(
            "UPDATE subscriptions SET state = ?, reason = ? WHERE id = ?",
            (state.value, reason, sub_id),
        )

    async def take(self, sub_id: str, day: int, limit: int) -> bool:
        """Count one alerting push on ``day`` unless ``limit`` are counted; whether it was."""
        await self._db.execute(
            "INSERT INTO quota(sub, day, alerts) VALUES (?, ?, 0) ON CONFLICT DO NOTHING",
            (sub_id, day),
        )
        cur = await self._db.execute(
            "UPDATE quota SET alerts = alerts + 1 WHERE sub = ? AND day = ? AND alerts < ?",
            (sub_id, day, limit),
        )
        taken = cur.rowcount > 0
        await cur.close()
        await self._db.execute("DELETE FROM quota WHERE sub = ? AND day < ?", (sub_id, day - 1))
        return taken

    async def give_back(self, sub_id: str, day: int) -> None:
        """Uncount a push the provider did not take."""
        await self._db.execute(
            "UPDATE quota SET alerts = alerts - 1 WHERE sub = ? AND day = ? AND alerts > 0",
            (sub_id, day),
        )
