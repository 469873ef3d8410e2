"""Withdrawals and webhooks owed on PostgreSQL: the same rows as the SQLite file's
(store/notify.py). A withdrawal is marked pending per device in the transaction that reads
it, so each device is sent it once however many workers close the ask."""

from __future__ import annotations

from collie_gateway.store.notify import OwedWebhook, WithdrawalDue
from collie_gateway.store.pg.database import PgDatabase
from collie_gateway.store.pg.small import PgKvRepo
from collie_gateway.store.pushes import DEVICES, device_of


class PgNotifyRepo:
    """Withdrawals, webhooks owed, and the small state of notifications."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db
        self.kv = PgKvRepo(db)

    async def notified(self, since: float) -> set[str]:
        """Keys of asks pushed (sent to a device) since ``since`` and not yet withdrawn
        from every such device."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                "SELECT DISTINCT p.key FROM push_delivered p WHERE p.outcome = 'sent'"
                " AND p.at >= %s AND NOT EXISTS (SELECT 1 FROM push_withdrawn w"
                " WHERE w.key = p.key AND w.device = p.device)",
                (since,),
            )
            rows = await cur.fetchall()
        return {str(r[0]) for r in rows}

    async def due(self, key: str, at: float, device: str | None = None) -> WithdrawalDue | None:
        """The withdrawal of ``key`` to the devices sent its push (only ``device``, if
        given) that are still registered and have had none; marked pending in the same
        transaction (the ask's row held), so each device is sent it once."""
        async with self.db.transaction() as conn:
            cur = await conn.execute("SELECT note FROM push_once WHERE key = %s FOR UPDATE", (key,))
            row = await cur.fetchone()
            if row is None or row[0] is None:
                return None
            cur = await conn.execute(
                "SELECT device FROM push_delivered WHERE key = %s AND outcome = 'sent'"
                " AND device NOT IN (SELECT device FROM push_withdrawn WHERE key = %s)",
                (key, key),
            )
            sent = {str(r[0]) for r in await cur.fetchall()}
            if device is not None:
                sent &= {device}
            cur = await conn.execute(DEVICES + ", id")
            devices = tuple(d for d in map(device_of, await cur.fetchall()) if d.id in sent)
            async with conn.cursor() as many:
                await many.executemany(
                    "INSERT INTO push_withdrawn(key, device, outcome, at)"
                    " VALUES (%s, %s, 'pending', %s) ON CONFLICT DO NOTHING",
                    [(key, d.id, at) for d in devices],
                )
        return WithdrawalDue(bytes(row[0]), devices) if devices else None

    async def withdrawn(self, key: str, device: str, outcome: str, at: float) -> None:
        """Note how a device's withdrawal ended."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "UPDATE push_withdrawn SET outcome = %s, at = %s WHERE key = %s AND device = %s",
                (outcome, at, key, device),
            )

    async def owe_webhook(self, hook: OwedWebhook, at: float) -> None:
        """Keep a delivery until it is taken (or refused for good)."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO webhooks_owed(id, url, body, at) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (hook.id, hook.url, hook.body, at),
            )

    async def webhook_done(self, hook_id: str, url: str) -> None:
        """The delivery was taken, or refused for good: not sent again."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "DELETE FROM webhooks_owed WHERE id = %s AND url = %s", (hook_id, url)
            )

    async def owed_webhooks(self) -> list[OwedWebhook]:
        """Every delivery owed, oldest first."""
        async with self.db.reading() as conn:
            cur = await conn.execute("SELECT id, url, body FROM webhooks_owed ORDER BY at, id")
            rows = await cur.fetchall()
        return [OwedWebhook(str(r[0]), str(r[1]), bytes(r[2])) for r in rows]
