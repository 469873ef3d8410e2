"""Push state in SQLite: devices, once per ask (P3), deliveries owed, the limiter, the log.

``push_once`` holds one row per once-key: ``owed`` (decided, not yet delivered to every
device) or ``done`` (delivered, or a lasting decision not to push, with its ``reason``).
``push_delivered`` holds each device's outcome for a key; ``pending`` until it lasts.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from collie_gateway.store.database import Database
from push import Device, Environment, Provider, WebPushKeys

LOG_KEPT: Final = 10_000  # ours: delivery log rows kept
LIMITER_KEY: Final = "push_limiter"  # kv key of the limiter's state (P1 survives a restart)
SENT: Final = "sent"
NOT_DELIVERED: Final = "no device took it (gone or refused)"

DEVICES = (
    "SELECT id, provider, token, environment, key, registered_at, lang, p256dh, auth"
    " FROM devices"
    " ORDER BY registered_at"
)


@dataclass(frozen=True, slots=True)
class OnceFacts:
    """What the store knows of one once-key, read in one round trip."""

    state: str | None  # None (never decided), "owed" or "done"
    reason: str | None  # why it is done, when it is
    pending: frozenset[str]  # devices still owed the push
    devices: tuple[Device, ...]  # every registered device (empty when done)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One line of the delivery log."""

    at: str
    agent: str | None
    conversation: str | None
    ask: str | None
    device: str | None
    outcome: str
    reason: str | None
    provider_id: str | None = None


@dataclass(slots=True)
class LimiterTurn:
    """One push decision's turn at the limiter: its stored state (None when this process's
    own limiter is the truth), and the state to store when the turn ends."""

    shared: bool = False  # other workers decide too: read and store the limiter each turn
    state: bytes | None = None
    kept: bytes | None = None

    def keep(self, state: bytes) -> None:
        """Store ``state`` when the turn ends (where the store shares the limiter)."""
        self.kept = state


@dataclass(frozen=True, slots=True)
class Owe:
    """A push decided: owed to ``devices`` until each has a lasting outcome."""

    key: str
    at: float
    devices: tuple[str, ...]
    limiter_state: bytes
    note: bytes | None = None  # the ask push's withdrawal (JSON), kept for when it closes


def device_of(row: Sequence[Any]) -> Device:
    keys = WebPushKeys(p256dh=bytes(row[7]), auth=bytes(row[8])) if row[7] is not None else None
    return Device(
        id=str(row[0]),
        provider=Provider(str(row[1])),
        token=str(row[2]),
        environment=Environment(str(row[3])),
        key=bytes(row[4]) if row[4] is not None else None,
        registered_at=float(row[5]),
        lang=str(row[6]) if row[6] is not None else None,
        webpush=keys,
    )


def _finish(conn: sqlite3.Connection, key: str) -> bool:
    """Mark the key done unless a registered device still waits for its push (P3); whether
    it is done."""
    waiting = conn.execute(
        "SELECT 1 FROM push_delivered p JOIN devices d ON d.id = p.device"
        " WHERE p.key = ? AND p.outcome = 'pending' LIMIT 1",
        (key,),
    ).fetchone()
    if waiting is not None:
        return False
    sent = conn.execute(
        "SELECT 1 FROM push_delivered WHERE key = ? AND outcome = 'sent' LIMIT 1", (key,)
    ).fetchone()
    conn.execute(
        "UPDATE push_once SET state = 'done', reason = ? WHERE key = ? AND state = 'owed'",
        (SENT if sent else NOT_DELIVERED, key),
    )
    return True


class PushesRepo:
    """Devices and the push state of every ask."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # --- devices -------------------------------------------------------------------------

    async def register(
        self,
        provider: Provider,
        token: str,
        environment: Environment,
        key: bytes | None,
        now: float,
        lang: str | None = None,
        phone: str | None = None,
        webpush: WebPushKeys | None = None,
    ) -> str:
        """Register or refresh a token of ``phone`` (a Web Push endpoint with its ``webpush``
        keys); the device id (the same for the same token); its pushes are worded in ``lang``
        (None: the default language)."""
        async with self.db.transaction() as db:
            async with db.execute(
                "SELECT id FROM devices WHERE provider = ? AND token = ?", (provider.value, token)
            ) as cur:
                row = await cur.fetchone()
            device_id = str(row[0]) if row else "d-" + secrets.token_hex(8)
            p256dh, auth = (webpush.p256dh, webpush.auth) if webpush else (None, None)
            await db.execute(
                "INSERT INTO devices(id, provider, token, environment, key, registered_at, lang,"
                " phone, p256dh, auth) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET"
                " environment=excluded.environment, key=excluded.key,"
                " registered_at=excluded.registered_at, lang=excluded.lang, phone=excluded.phone,"
                " p256dh=excluded.p256dh, auth=excluded.auth",
                (
                    device_id,
                    provider.value,
                    token,
                    environment.value,
                    key,
                    now,
                    lang,
                    phone,
                    p256dh,
                    auth,
                ),
            )
        return device_id

    async def remove(self, device_id: str, registered_at: float | None = None) -> bool:
        """Forget a device; whether it was registered. With ``registered_at``: only if it did
        not register again since then (a token reported gone after a new registration)."""
        sql = "DELETE FROM devices WHERE id = ?"
        args: tuple[object, ...] = (device_id,)
        if registered_at is not None:
            sql, args = sql + " AND registered_at <= ?", (device_id, registered_at)
        async with self.db.transaction() as db:
            cur = await db.execute(sql, args)
            removed = cur.rowcount > 0
            await cur.close()
        return removed

    async def devices(self) -> list[Device]:
        """Every registered device."""
        async with self.db.db.execute(DEVICES) as cur:
            rows = await cur.fetchall()
        return [device_of(r) for r in rows]

    # --- once per ask (P3) and the limiter (P1) ------------------------------------------

    async def claim(self, key: str) -> bool:
        """One process owns the file: its own run keeps a key from being decided twice."""
        return True

    async def release(self, key: str) -> None:
        """Nothing is held in the file."""

    async def owed(self) -> set[str]:
        """Every once-key whose push is owed."""
        sql = "SELECT key FROM push_once WHERE state = 'owed'"
        rows = await self.db.query(lambda conn: conn.execute(sql).fetchall())
        return {str(r[0]) for r in rows}

    @contextlib.asynccontextmanager
    async def limiter_turn(self) -> AsyncIterator[LimiterTurn]:
        """One process owns the file: its limiter in memory is the truth (saved with each
        push owed)."""
        yield LimiterTurn()

    async def limiter_state(self) -> bytes | None:
        """The limiter's stored state."""
        async with self.db.db.execute("SELECT value FROM kv WHERE key = ?", (LIMITER_KEY,)) as cur:
            row = await cur.fetchone()
        return bytes(row[0]) if row is not None else None

    async def facts(self, key: str) -> OnceFacts:
        """What is known of ``key``: one round trip (it runs for every ask raised)."""

        def read(conn: sqlite3.Connection) -> OnceFacts:
            row = conn.execute(
                "SELECT state, reason FROM push_once WHERE key = ?", (key,)
            ).fetchone()
            if row is not None and row[0] == "done":
                return OnceFacts("done", row[1], frozenset(), ())
            pending = frozenset(
                str(r[0])
                for r in conn.execute(
                    "SELECT device FROM push_delivered WHERE key = ? AND outcome = 'pending'",
                    (key,),
                )
            )
            devices = tuple(device_of(r) for r in conn.execute(DEVICES))
            return OnceFacts(str(row[0]) if row else None, None, pending, devices)

        return await self.db.run(read)

    async def finish(self, key: str) -> bool:
        """Mark ``key`` done unless a registered device still waits; whether it is done."""
        return await self.db.run(lambda conn: _finish(conn, key))

    async def delivered(self, key: str, device_id: str, outcome: str, at: float) -> bool:
        """Note a device's lasting outcome; whether the key is now done."""

        def write(conn: sqlite3.Connection) -> bool:
            conn.execute(
                "UPDATE push_delivered SET outcome = ?, at = ? WHERE key = ? AND device = ?",
                (outcome, at, key, device_id),
            )
            return _finish(conn, key)

        return await self.db.run(write)

    async def resolved(self, key: str, reason: str) -> bool:
        """An owed key whose ask closed: done, with ``reason``; whether it was owed."""

        def write(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE push_once SET state = 'done', reason = ? WHERE key = ? AND state = 'owed'",
                (reason, key),
            )
            return cur.rowcount > 0

        return await self.db.run(write)

    # --- the delivery log ----------------------------------------------------------------

    async def log(
        self,
        entry: LogEntry,
        *,
        settle: tuple[str, float, str] | None = None,
        owe: Owe | None = None,
    ) -> None:
        """Append to the delivery log; in the same transaction, store a lasting decision
        (``settle``: key, time, reason) or a push owed (``owe``)."""
        row = (
            entry.at,
            entry.agent,
            entry.conversation,
            entry.ask,
            entry.device,
            entry.outcome,
            entry.reason,
            entry.provider_id,
        )

        def write(conn: sqlite3.Connection) -> None:
            if settle is not None:
                conn.execute(
                    "INSERT INTO push_once(key, at, state, reason) VALUES (?, ?, 'done', ?)"
                    " ON CONFLICT(key) DO UPDATE SET state = 'done', reason = excluded.reason",
                    settle,
                )
            if owe is not None:
                _owe(conn, owe)
            cur = conn.execute(
                "INSERT INTO push_log(at, agent, conversation, ask, device, outcome, reason,"
                " provider_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            if cur.lastrowid is not None and cur.lastrowid % 1000 == 0:
                conn.execute("DELETE FROM push_log WHERE id <= ?", (cur.lastrowid - LOG_KEPT,))

        await self.db.run(write)

    async def recent(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest entries of the delivery log, newest first."""
        async with self.db.db.execute(
            "SELECT at, agent, conversation, ask, device, outcome, reason, provider_id"
            " FROM push_log ORDER BY id DESC LIMIT ?",
            (limit,),
        ) as cur:
            rows = await cur.fetchall()
        names = ("at", "agent", "conversation", "ask", "device", "outcome", "reason", "provider_id")
        return [dict(zip(names, row, strict=True)) for row in rows]


def _owe(conn: sqlite3.Connection, owe: Owe) -> None:
    conn.execute(
        "INSERT INTO push_once(key, at, state, note) VALUES (?, ?, 'owed', ?)"
        " ON CONFLICT(key) DO UPDATE SET note = coalesce(excluded.note, note)",
        (owe.key, owe.at, owe.note),
    )
    conn.executemany(
        "INSERT OR IGNORE INTO push_delivered(key, device, outcome, at)"
        " VALUES (?, ?, 'pending', ?)",
        [(owe.key, d, owe.at) for d in owe.devices],
    )
    conn.execute(
        "INSERT OR REPLACE INTO kv(key, value) VALUES (?, ?)", (LIMITER_KEY, owe.limiter_state)
    )
