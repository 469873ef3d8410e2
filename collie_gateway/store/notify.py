"""What notifications keep across a restart beside the pushes themselves: each ask push's
withdrawal and the devices it went to (once per device), webhooks owed, the VAPID key pair
and push health (in ``kv``)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Final

from collie_gateway.store.database import Database
from collie_gateway.store.kv import KvRepo
from collie_gateway.store.pushes import DEVICES, device_of
from push import Device

VAPID_KEY: Final = "vapid_key"  # kv: the gateway's VAPID private key (PEM), made once
HEALTH_KEY: Final = "push_health"  # kv: PushHealth's state


@dataclass(frozen=True, slots=True)
class WithdrawalDue:
    """An ask push to take back: its stored withdrawal (JSON) and the devices that were sent
    the push and have not been sent its withdrawal."""

    note: bytes
    devices: tuple[Device, ...]


@dataclass(frozen=True, slots=True)
class OwedWebhook:
    """A webhook delivery not yet taken: sent again by the next run under the same id."""

    id: str
    url: str
    body: bytes


class NotifyRepo:
    """Withdrawals, webhooks owed, and the small state of notifications."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.kv = KvRepo(db)

    # --- withdrawals ---------------------------------------------------------------------

    async def notified(self, since: float) -> set[str]:
        """Keys of asks pushed (sent to a device) since ``since`` and not yet withdrawn
        from every such device."""

        def read(conn: sqlite3.Connection) -> set[str]:
            rows = conn.execute(
                "SELECT DISTINCT p.key FROM push_delivered p WHERE p.outcome = 'sent'"
                " AND p.at >= ? AND NOT EXISTS (SELECT 1 FROM push_withdrawn w"
                " WHERE w.key = p.key AND w.device = p.device)",
                (since,),
            )
            return {str(r[0]) for r in rows}

        return await self.db.query(read)

    async def due(self, key: str, at: float, device: str | None = None) -> WithdrawalDue | None:
        """The withdrawal of ``key`` to the devices sent its push (only ``device``, if
        given) that are still registered and have had none; they are marked pending in the
        same transaction, so each device is sent it once."""

        def write(conn: sqlite3.Connection) -> WithdrawalDue | None:
            row = conn.execute("SELECT note FROM push_once WHERE key = ?", (key,)).fetchone()
            if row is None or row[0] is None:
                return None
            sent = {
                str(r[0])
                for r in conn.execute(
                    "SELECT device FROM push_delivered WHERE key = ? AND outcome = 'sent'"
                    " AND device NOT IN (SELECT device FROM push_withdrawn WHERE key = ?)",
                    (key, key),
                )
            }
            if device is not None:
                sent &= {device}
            devices = tuple(d for d in map(device_of, conn.execute(DEVICES)) if d.id in sent)
            conn.executemany(
                "INSERT OR IGNORE INTO push_withdrawn(key, device, outcome, at)"
                " VALUES (?, ?, 'pending', ?)",
                [(key, d.id, at) for d in devices],
            )
            return WithdrawalDue(bytes(row[0]), devices) if devices else None

        return await self.db.run(write)

    async def withdrawn(self, key: str, device: str, outcome: str, at: float) -> None:
        """Note how a device's withdrawal ended."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE push_withdrawn SET outcome = ?, at = ? WHERE key = ? AND device = ?",
                (outcome, at, key, device),
            )

        await self.db.run(write)

    # --- webhooks owed -------------------------------------------------------------------

    async def owe_webhook(self, hook: OwedWebhook, at: float) -> None:
        """Keep a delivery until it is taken (or refused for good)."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO webhooks_owed(id, url, body, at) VALUES (?, ?, ?, ?)",
                (hook.id, hook.url, hook.body, at),
            )

        await self.db.run(write)

    async def webhook_done(self, hook_id: str, url: str) -> None:
        """The delivery was taken, or refused for good: not sent again."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM webhooks_owed WHERE id = ? AND url = ?", (hook_id, url))

        await self.db.run(write)

    async def owed_webhooks(self) -> list[OwedWebhook]:
        """Every delivery owed, oldest first."""

        def read(conn: sqlite3.Connection) -> list[OwedWebhook]:
            rows = conn.execute("SELECT id, url, body FROM webhooks_owed ORDER BY at, id")
            return [OwedWebhook(str(r[0]), str(r[1]), bytes(r[2])) for r in rows]

        return await self.db.query(read)
