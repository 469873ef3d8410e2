"""Push state: devices, once per ask (P3), deliveries owed, the limiter, the log.

``push_once`` holds one row per once-key: ``owed`` (decided, not yet delivered to every
device) or ``done`` (delivered, or a lasting decision not to push, with its ``reason``).
``push_delivered`` holds each device's outcome for a key; ``pending`` until it lasts.

With several workers, a worker deciding or sending an ask's push holds a lock named by its
once-key (``claim``: the engine's ``try_hold``, which goes with the worker if it dies), and
push decisions take turns at the limiter stored in ``kv`` (``limiter_turn``).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from typing import Any, Final

from collie_gateway.store.engine import Db, SharedDb, Tx
from collie_gateway.store.kv import GET, PUT
from collie_gateway.store.values import (
    NOT_DELIVERED,
    SENT,
    Decision,
    LimiterTurn,
    LogEntry,
    OnceFacts,
    Owe,
)
from push import Device, Environment, Provider, WebPushKeys

LOG_KEPT: Final = 10_000  # ours: delivery log rows kept
LIMITER_KEY: Final = "push_limiter"  # kv key of the limiter's state (P1 survives a restart)

DEVICES: Final = (
    "SELECT id, provider, token, environment, key, registered_at, lang, p256dh, auth"
    " FROM devices ORDER BY registered_at, id"
)
_LOG_COLUMNS: Final = (
    "at",
    "agent",
    "conversation",
    "ask",
    "device",
    "outcome",
    "reason",
    "provider_id",
)
_REGISTER: Final = (
    "INSERT INTO devices(id, provider, token, environment, key, registered_at, lang,"
    " phone, p256dh, auth) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (provider, token) DO UPDATE SET"
    " environment = excluded.environment, key = excluded.key,"
    " registered_at = excluded.registered_at, lang = excluded.lang,"
    " phone = excluded.phone, p256dh = excluded.p256dh, auth = excluded.auth"
    " RETURNING id"
)
_DONE: Final = "UPDATE push_once SET state = 'done', reason = ? WHERE key = ? AND state = 'owed'"


def device_of(row: Sequence[Any]) -> Device:
    """A device from a row of ``DEVICES``."""
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


async def _finish(tx: Tx, key: str) -> bool:
    """Mark the key done unless a registered device still waits for its push (P3); whether
    it is done."""
    waiting = await tx.one(
        "SELECT 1 FROM push_delivered p JOIN devices d ON d.id = p.device"
        " WHERE p.key = ? AND p.outcome = 'pending' LIMIT 1",
        (key,),
    )
    if waiting is not None:
        return False
    sent = await tx.one(
        "SELECT 1 FROM push_delivered WHERE key = ? AND outcome = 'sent' LIMIT 1", (key,)
    )
    await tx.run(_DONE, (SENT if sent else NOT_DELIVERED, key))
    return True


async def _owe(tx: Tx, owe: Owe) -> None:
    await tx.run(
        "INSERT INTO push_once(key, at, state, note) VALUES (?, ?, 'owed', ?)"
        " ON CONFLICT (key) DO UPDATE SET note = coalesce(excluded.note, push_once.note)",
        (owe.key, owe.at, owe.note),
    )
    await tx.many(
        "INSERT INTO push_delivered(key, device, outcome, at) VALUES (?, ?, 'pending', ?)"
        " ON CONFLICT DO NOTHING",
        [(owe.key, d, owe.at) for d in owe.devices],
    )
    await tx.run(PUT, (LIMITER_KEY, owe.limiter_state))


async def _facts(tx: Tx, key: str) -> OnceFacts:
    """What is known of ``key``: its state, the devices still owed its push, every device."""
    row = await tx.one("SELECT state, reason FROM push_once WHERE key = ?", (key,))
    if row is not None and row[0] == "done":
        return OnceFacts("done", row[1], frozenset(), ())
    devices = tuple(device_of(r) for r in await tx.all(DEVICES))
    if row is None:  # never decided: no device is owed it (owing writes the key's row)
        return OnceFacts(None, None, frozenset(), devices)
    pending = await tx.all(
        "SELECT device FROM push_delivered WHERE key = ? AND outcome = 'pending'", (key,)
    )
    return OnceFacts(str(row[0]), None, frozenset(str(r[0]) for r in pending), devices)


async def _log(
    tx: Tx, entry: LogEntry, settle: tuple[str, float, str] | None, owe: Owe | None
) -> None:
    """Append to the delivery log; store a lasting decision or a push owed with it."""
    if settle is not None:
        await tx.run(
            "INSERT INTO push_once(key, at, state, reason) VALUES (?, ?, 'done', ?)"
            " ON CONFLICT (key) DO UPDATE SET state = 'done', reason = excluded.reason",
            settle,
        )
    if owe is not None:
        await _owe(tx, owe)
    added = await tx.one(
        f"INSERT INTO push_log({', '.join(_LOG_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        " RETURNING id",
        tuple(getattr(entry, name) for name in _LOG_COLUMNS),
    )
    if added is not None and int(added[0]) % 1000 == 0:
        await tx.run("DELETE FROM push_log WHERE id <= ?", (int(added[0]) - LOG_KEPT,))


class PushesRepo:
    """Devices and the push state of every ask."""

    def __init__(self, db: Db) -> None:
        self.db = db
        self._turns = asyncio.Lock()  # one limiter turn of this worker waits on the database
        # Decided once: a runtime-checked Protocol costs ~19 µs a check, twice an ask.
        self._shared: SharedDb | None = db if isinstance(db, SharedDb) else None

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
        p256dh, auth = (webpush.p256dh, webpush.auth) if webpush else (None, None)
        new_id, device = "d-" + secrets.token_hex(8), (phone, p256dh, auth)
        args = (new_id, provider.value, token, environment.value, key, now, lang, *device)
        row = await self.db.write(lambda tx: tx.one(_REGISTER, args))
        assert row is not None  # RETURNING always gives the row
        return str(row[0])

    async def remove(self, device_id: str, registered_at: float | None = None) -> bool:
        """Forget a device; whether it was registered. With ``registered_at``: only if it did
        not register again since then (a token reported gone after a new registration)."""
        sql = "DELETE FROM devices WHERE id = ?"
        args: tuple[object, ...] = (device_id,)
        if registered_at is not None:
            sql, args = sql + " AND registered_at <= ?", (device_id, registered_at)
        return await self.db.write(lambda tx: tx.run(sql, args)) > 0

    async def devices(self) -> list[Device]:
        """Every registered device."""
        rows = await self.db.read(lambda tx: tx.all(DEVICES), long=True)
        return [device_of(r) for r in rows]

    # --- once per ask (P3) and the limiter (P1) ------------------------------------------

    async def claim(self, key: str) -> bool:
        """Take the right to decide and send ``key``'s push; False while another worker
        holds it (one process owning the file always has it)."""
        return await self.db.try_hold("push\x1f" + key)

    async def release(self, key: str) -> None:
        """Give back the claim on ``key``."""
        await self.db.let_go("push\x1f" + key)

    async def owed(self) -> set[str]:
        """Every once-key whose push is owed."""
        sql = "SELECT key FROM push_once WHERE state = 'owed'"
        return {str(r[0]) for r in await self.db.read(lambda tx: tx.all(sql))}

    async def undecided(self, keys: Collection[str]) -> set[str]:
        """Those of ``keys`` with no push decision stored (neither owed nor done)."""
        wanted = list(keys)
        if not wanted:
            return set()
        marks = ", ".join("?" * len(wanted))
        sql = f"SELECT key FROM push_once WHERE key IN ({marks})"
        stored = {str(r[0]) for r in await self.db.read(lambda tx: tx.all(sql, wanted))}
        return set(wanted) - stored

    @contextlib.asynccontextmanager
    async def limiter_turn(self) -> AsyncIterator[LimiterTurn]:
        """One decision at a time across workers (a lock held by a transaction), reading the
        limiter as stored and storing it as kept. One process owning the file: its limiter
        in memory is the truth (saved with each push owed)."""
        shared = self._shared
        if shared is None:
            yield LimiterTurn()
            return
        async with self._turns, shared.turn("push limiter") as tx:
            row = await tx.one(GET, (LIMITER_KEY,))
            turn = LimiterTurn(True, bytes(row[0]) if row is not None else None)
            yield turn
            if turn.kept is not None:
                await tx.run(PUT, (LIMITER_KEY, turn.kept))

    async def limiter_state(self) -> bytes | None:
        """The limiter's stored state."""
        row = await self.db.read(lambda tx: tx.one(GET, (LIMITER_KEY,)), long=True)
        return bytes(row[0]) if row is not None else None

    async def facts(self, key: str) -> OnceFacts:
        """What is known of ``key``."""
        return await self.db.write(lambda tx: _facts(tx, key))

    async def decide(self, key: str, decide: Callable[[OnceFacts], Decision]) -> bool:
        """Read what is known of ``key``, ``decide`` with it and store the decision, in one
        transaction (it runs for every ask raised); whether the decision's ``finish`` finished
        the key. ``decide`` must not wait (it runs inside the transaction)."""

        async def write(tx: Tx) -> bool:
            decision = decide(await _facts(tx, key))
            if decision.entry is not None:
                await _log(tx, decision.entry, decision.settle, decision.owe)
            return await _finish(tx, key) if decision.finish else False

        return await self.db.write(write)

    async def finish(self, key: str) -> bool:
        """Mark ``key`` done unless a registered device still waits; whether it is done."""
        return await self.db.write(lambda tx: _finish(tx, key))

    async def delivered(self, key: str, device_id: str, outcome: str, at: float) -> bool:
        """Note a device's lasting outcome; whether the key is now done."""

        async def write(tx: Tx) -> bool:
            await tx.run(
                "UPDATE push_delivered SET outcome = ?, at = ? WHERE key = ? AND device = ?",
                (outcome, at, key, device_id),
            )
            return await _finish(tx, key)

        return await self.db.write(write)

    async def resolved(self, key: str, reason: str) -> bool:
        """An owed key whose ask closed: done, with ``reason``; whether it was owed."""
        return await self.db.write(lambda tx: tx.run(_DONE, (reason, key))) > 0

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
        await self.db.write(lambda tx: _log(tx, entry, settle, owe))

    async def recent(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest entries of the delivery log, newest first."""
        sql = f"SELECT {', '.join(_LOG_COLUMNS)} FROM push_log ORDER BY id DESC LIMIT ?"
        rows = await self.db.read(lambda tx: tx.all(sql, (limit,)), long=True)
        return [dict(zip(_LOG_COLUMNS, row, strict=True)) for row in rows]
