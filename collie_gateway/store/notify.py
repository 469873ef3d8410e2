"""What notifications keep across a restart beside the pushes themselves: each ask push's
withdrawal and the devices it went to (once per device), webhooks owed, the VAPID key pair
and push health (in ``kv``). A withdrawal is marked pending per device in the transaction
that reads it (the ask's row held), so each device is sent it once however many workers
close the ask."""

from __future__ import annotations

from collie_gateway.store.engine import Db, Tx
from collie_gateway.store.kv import KvRepo
from collie_gateway.store.pushes import DEVICES, device_of
from collie_gateway.store.values import OwedWebhook, WithdrawalDue


class NotifyRepo:
    """Withdrawals, webhooks owed, and the small state of notifications."""

    def __init__(self, db: Db) -> None:
        self.db = db
        self.kv = KvRepo(db)

    # --- withdrawals ---------------------------------------------------------------------

    async def notified(self, since: float) -> set[str]:
        """Keys of asks pushed (sent to a device) since ``since`` and not yet withdrawn
        from every such device."""
        sql = (
            "SELECT DISTINCT p.key FROM push_delivered p WHERE p.outcome = 'sent'"
            " AND p.at >= ? AND NOT EXISTS (SELECT 1 FROM push_withdrawn w"
            " WHERE w.key = p.key AND w.device = p.device)"
        )
        return {str(r[0]) for r in await self.db.read(lambda tx: tx.all(sql, (since,)))}

    async def due(self, key: str, at: float, device: str | None = None) -> WithdrawalDue | None:
        """The withdrawal of ``key`` to the devices sent its push (only ``device``, if
        given) that are still registered and have had none; they are marked pending in the
        same transaction, so each device is sent it once."""

        async def write(tx: Tx) -> WithdrawalDue | None:
            row = await tx.one("SELECT note FROM push_once WHERE key = ? FOR UPDATE", (key,))
            if row is None or row[0] is None:
                return None
            rows = await tx.all(
                "SELECT device FROM push_delivered WHERE key = ? AND outcome = 'sent'"
                " AND device NOT IN (SELECT device FROM push_withdrawn WHERE key = ?)",
                (key, key),
            )
            sent = {str(r[0]) for r in rows}
            if device is not None:
                sent &= {device}
            devices = tuple(d for d in map(device_of, await tx.all(DEVICES)) if d.id in sent)
            await tx.many(
                "INSERT INTO push_withdrawn(key, device, outcome, at)"
                " VALUES (?, ?, 'pending', ?) ON CONFLICT DO NOTHING",
                [(key, d.id, at) for d in devices],
            )
            return WithdrawalDue(bytes(row[0]), devices) if devices else None

        return await self.db.write(write)

    async def withdrawn(self, key: str, device: str, outcome: str, at: float) -> None:
        """Note how a device's withdrawal ended."""
        sql = "UPDATE push_withdrawn SET outcome = ?, at = ? WHERE key = ? AND device = ?"
        await self.db.write(lambda tx: tx.run(sql, (outcome, at, key, device)))

    # --- webhooks owed -------------------------------------------------------------------

    async def owe_webhook(self, hook: OwedWebhook, at: float) -> None:
        """Keep a delivery until it is taken (or refused for good)."""
        sql = (
            "INSERT INTO webhooks_owed(id, url, body, at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING"
        )
        await self.db.write(lambda tx: tx.run(sql, (hook.id, hook.url, hook.body, at)))

    async def webhook_done(self, hook_id: str, url: str) -> None:
        """The delivery was taken, or refused for good: not sent again."""
        sql = "DELETE FROM webhooks_owed WHERE id = ? AND url = ?"
        await self.db.write(lambda tx: tx.run(sql, (hook_id, url)))

    async def owed_webhooks(self) -> list[OwedWebhook]:
        """Every delivery owed, oldest first."""
        rows = await self.db.read(
            lambda tx: tx.all("SELECT id, url, body FROM webhooks_owed ORDER BY at, id")
        )
        return [OwedWebhook(str(r[0]), str(r[1]), bytes(r[2])) for r in rows]
