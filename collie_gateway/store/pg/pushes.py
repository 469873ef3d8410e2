"""Push state on PostgreSQL: devices, once per ask (P3), deliveries owed, the limiter, the
log; the same rows as the SQLite file's (``store/pushes.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from typing import Any

import psycopg

from collie_gateway.store.pg.database import Conn, PgDatabase, lock
from collie_gateway.store.pushes import (
    DEVICES,
    LIMITER_KEY,
    LOG_KEPT,
    NOT_DELIVERED,
    SENT,
    LimiterTurn,
    LogEntry,
    OnceFacts,
    Owe,
    device_of,
)
from push import Device, Environment, Provider, WebPushKeys

_PUT_KV = (
    "INSERT INTO kv(key, value) VALUES (%s, %s)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"
_LOG_COLUMNS = ("at", "agent", "conversation", "ask", "device", "outcome", "reason", "provider_id")


async def _one(conn: Conn, sql: str, args: tuple[object, ...]) -> tuple[Any, ...] | None:
    cur = await conn.execute(sql, args)
    return await cur.fetchone()


async def _finish(conn: Conn, key: str) -> bool:
    """Mark the key done unless a registered device still waits for its push (P3); whether
    it is done."""
    waiting = await _one(
        conn,
        "SELECT 1 FROM push_delivered p JOIN devices d ON d.id = p.device"
        " WHERE p.key = %s AND p.outcome = 'pending' LIMIT 1",
        (key,),
    )
    if waiting is not None:
        return False
    sent = await _one(
        conn, "SELECT 1 FROM push_delivered WHERE key = %s AND outcome = 'sent' LIMIT 1", (key,)
    )
    await conn.execute(
        "UPDATE push_once SET state = 'done', reason = %s WHERE key = %s AND state = 'owed'",
        (SENT if sent else NOT_DELIVERED, key),
    )
    return True


async def _owe(conn: Conn, owe: Owe) -> None:
    await conn.execute(
        "INSERT INTO push_once(key, at, state, note) VALUES (%s, %s, 'owed', %s)"
        " ON CONFLICT (key) DO UPDATE SET note = coalesce(excluded.note, push_once.note)",
        (owe.key, owe.at, owe.note),
    )
    async with conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO push_delivered(key, device, outcome, at) VALUES (%s, %s, 'pending', %s)"
            " ON CONFLICT DO NOTHING",
            [(owe.key, d, owe.at) for d in owe.devices],
        )
    await conn.execute(_PUT_KV, (LIMITER_KEY, owe.limiter_state))


class PgPushesRepo:
    """Devices and the push state of every ask, shared by every worker.

    A worker deciding or sending an ask's push holds a session advisory lock named by its
    once-key, on a connection of its own (``claim``): other workers pass the ask over while it
    is held, and it goes with the worker's connection if the worker dies.
    """

    def __init__(self, db: PgDatabase) -> None:
        self.db = db
        self._claims: Conn | None = None  # the connection holding this worker's claims
        self._claims_lock = asyncio.Lock()
        self._turns = asyncio.Lock()  # one limiter turn of this worker waits on the database
        db.on_close(self._close_claims)

    async def _claims_conn(self) -> Conn:
        if self._claims is None or self._claims.closed:
            # Named by the process, so pg_locks says which worker holds which claim.
            name = f"collie-gateway {os.getpid()}"
            self._claims = await psycopg.AsyncConnection.connect(
                self.db.url, autocommit=True, application_name=name
            )
        return self._claims

    async def claim(self, key: str) -> bool:
        """Take the right to decide and send ``key``'s push; False while another worker
        holds it. A lost connection is made again once (its claims went with it)."""
        async with self._claims_lock:
            for attempt in (1, 2):
                conn = await self._claims_conn()
                try:
                    row = await _one(conn, _TRY_LOCK, ("push\x1f" + key,))
                    return bool(row and row[0])
                except psycopg.OperationalError:
                    await conn.close()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    async def release(self, key: str) -> None:
        """Give back the claim on ``key`` (gone anyway if its connection was lost)."""
        async with self._claims_lock:
            if self._claims is None or self._claims.closed:
                return
            try:
                await self._claims.execute(_UNLOCK, ("push\x1f" + key,))
            except psycopg.OperationalError:
                await self._claims.close()  # the server dropped it: its locks are gone

    async def _close_claims(self) -> None:
        if self._claims is not None:
            await self._claims.close()
            self._claims = None

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
        p256dh, auth = (webpush.p256dh, webpush.auth) if webpush else (None, None)
        new_id, device = "d-" + secrets.token_hex(8), (phone, p256dh, auth)
        async with self.db.transaction() as conn:
            row = await _one(
                conn,
                "INSERT INTO devices(id, provider, token, environment, key, registered_at, lang,"
                " phone, p256dh, auth) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (provider, token) DO UPDATE SET"
                " environment = excluded.environment, key = excluded.key,"
                " registered_at = excluded.registered_at, lang = excluded.lang,"
                " phone = excluded.phone, p256dh = excluded.p256dh, auth = excluded.auth"
                " RETURNING id",
                (new_id, provider.value, token, environment.value, key, now, lang, *device),
            )
        assert row is not None  # RETURNING always gives the row
        return str(row[0])

    async def remove(self, device_id: str, registered_at: float | None = None) -> bool:
        """Forget a device; whether it was registered. With ``registered_at``: only if it did
        not register again since then."""
        sql = "DELETE FROM devices WHERE id = %s"
        args: tuple[object, ...] = (device_id,)
        if registered_at is not None:
            sql, args = sql + " AND registered_at <= %s", (device_id, registered_at)
        async with self.db.transaction() as conn:
            cur = await conn.execute(sql, args)
            return cur.rowcount > 0

    async def devices(self) -> list[Device]:
        """Every registered device."""
        async with self.db.reading() as conn:
            cur = await conn.execute(DEVICES + ", id")
            rows = await cur.fetchall()
        return [device_of(r) for r in rows]

    async def owed(self) -> set[str]:
        """Every once-key whose push is owed."""
        async with self.db.reading() as conn:
            cur = await conn.execute("SELECT key FROM push_once WHERE state = 'owed'")
            return {str(r[0]) for r in await cur.fetchall()}

    @contextlib.asynccontextmanager
    async def limiter_turn(self) -> AsyncIterator[LimiterTurn]:
        """One decision at a time across workers (an advisory lock held by a transaction),
        reading the limiter as stored and storing it as kept."""
        async with self._turns, self.db.transaction() as conn:
            await lock(conn, "push limiter")
            row = await _one(conn, "SELECT value FROM kv WHERE key = %s", (LIMITER_KEY,))
            turn = LimiterTurn(True, bytes(row[0]) if row is not None else None)
            yield turn
            if turn.kept is not None:
                await conn.execute(_PUT_KV, (LIMITER_KEY, turn.kept))

    async def limiter_state(self) -> bytes | None:
        """The limiter's stored state."""
        async with self.db.reading() as conn:
            row = await _one(conn, "SELECT value FROM kv WHERE key = %s", (LIMITER_KEY,))
        return bytes(row[0]) if row is not None else None

    async def facts(self, key: str) -> OnceFacts:
        """What is known of ``key``."""
        async with self.db.transaction() as conn:
            row = await _one(conn, "SELECT state, reason FROM push_once WHERE key = %s", (key,))
            if row is not None and row[0] == "done":
                return OnceFacts("done", row[1], frozenset(), ())
            cur = await conn.execute(
                "SELECT device FROM push_delivered WHERE key = %s AND outcome = 'pending'", (key,)
            )
            pending = frozenset(str(r[0]) for r in await cur.fetchall())
            cur = await conn.execute(DEVICES + ", id")
            devices = tuple(device_of(r) for r in await cur.fetchall())
        return OnceFacts(str(row[0]) if row else None, None, pending, devices)

    async def finish(self, key: str) -> bool:
        """Mark ``key`` done unless a registered device still waits; whether it is done."""
        async with self.db.transaction() as conn:
            return await _finish(conn, key)

    async def delivered(self, key: str, device_id: str, outcome: str, at: float) -> bool:
        """Note a device's lasting outcome; whether the key is now done."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "UPDATE push_delivered SET outcome = %s, at = %s WHERE key = %s AND device = %s",
                (outcome, at, key, device_id),
            )
            return await _finish(conn, key)

    async def resolved(self, key: str, reason: str) -> bool:
        """An owed key whose ask closed: done, with ``reason``; whether it was owed."""
        async with self.db.transaction() as conn:
            cur = await conn.execute(
                "UPDATE push_once SET state = 'done', reason = %s"
                " WHERE key = %s AND state = 'owed'",
                (reason, key),
            )
            return cur.rowcount > 0

    async def log(
        self,
        entry: LogEntry,
        *,
        settle: tuple[str, float, str] | None = None,
        owe: Owe | None = None,
    ) -> None:
        """Append to the delivery log; in the same transaction, store a lasting decision
        (``settle``: key, time, reason) or a push owed (``owe``)."""
        row = tuple(getattr(entry, name) for name in _LOG_COLUMNS)
        async with self.db.transaction() as conn:
            if settle is not None:
                await conn.execute(
                    "INSERT INTO push_once(key, at, state, reason) VALUES (%s, %s, 'done', %s)"
                    " ON CONFLICT (key) DO UPDATE SET state = 'done', reason = excluded.reason",
                    settle,
                )
            if owe is not None:
                await _owe(conn, owe)
            added = await _one(
                conn,
                f"INSERT INTO push_log({', '.join(_LOG_COLUMNS)})"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                row,
            )
            if added is not None and int(added[0]) % 1000 == 0:
                await conn.execute(
                    "DELETE FROM push_log WHERE id <= %s", (int(added[0]) - LOG_KEPT,)
                )

    async def recent(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest entries of the delivery log, newest first."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                f"SELECT {', '.join(_LOG_COLUMNS)} FROM push_log ORDER BY id DESC LIMIT %s",
                (limit,),
            )
            rows = await cur.fetchall()
        return [dict(zip(_LOG_COLUMNS, row, strict=True)) for row in rows]
