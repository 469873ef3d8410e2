"""One gateway's repositories on one backend: the SQLite file (the default) or PostgreSQL
(a ``postgresql://`` URL: several workers on one database)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from collie_gateway.store.crew import CrewRepo
from collie_gateway.store.database import Database
from collie_gateway.store.kv import KvRepo
from collie_gateway.store.ledger import LedgerRepo
from collie_gateway.store.mirrors import MirrorsRepo
from collie_gateway.store.notes import NotesRepo
from collie_gateway.store.notify import NotifyRepo
from collie_gateway.store.phones import PhonesRepo
from collie_gateway.store.protocols import (
    CrewStore,
    KvStore,
    LedgerStore,
    MirrorsStore,
    NotesStore,
    NotifyStore,
    PhonesStore,
    PushesStore,
)
from collie_gateway.store.pushes import PushesRepo

if TYPE_CHECKING:
    from collie_gateway.store.pg.database import PgDatabase

URL_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(value: str) -> bool:
    """Whether ``value`` names a PostgreSQL database rather than a SQLite file."""
    return value.startswith(URL_SCHEMES)


@dataclass(frozen=True, slots=True)
class Stores:
    """Every repository of one store, and how to close it."""

    backend: str  # "sqlite" or "postgresql"
    mirrors: MirrorsStore
    ledger: LedgerStore
    notes: NotesStore
    pushes: PushesStore
    kv: KvStore
    crew: CrewStore
    phones: PhonesStore
    notify: NotifyStore
    close: Callable[[], Awaitable[None]]
    pg: PgDatabase | None = None  # the PostgreSQL database (several workers), else None

    @property
    def shared(self) -> bool:
        """Whether other workers may write the same store (PostgreSQL)."""
        return self.backend == "postgresql"


async def open_stores(db_path: Path, url: str | None = None) -> Stores:
    """The repositories on PostgreSQL at ``url`` when given, else on the SQLite file
    ``db_path``; opened and migrated.

    Raises:
        StoreError: the store cannot be used (a newer schema, not a database, no server).
    """
    if url is not None:
        return await _open_pg(url)
    db = await Database.open(db_path)
    kv = KvRepo(db)
    repos = (MirrorsRepo(db), LedgerRepo(db), NotesRepo(db), PushesRepo(db))
    crew = CrewRepo(kv)
    return Stores("sqlite", *repos, kv, crew, PhonesRepo(db), NotifyRepo(db), db.close)


async def _open_pg(url: str) -> Stores:
    # Imported here: a SQLite gateway never loads psycopg.
    from collie_gateway.store.pg.database import PgDatabase
    from collie_gateway.store.pg.ledger import PgLedgerRepo
    from collie_gateway.store.pg.mirrors import PgMirrorsRepo
    from collie_gateway.store.pg.notify import PgNotifyRepo
    from collie_gateway.store.pg.phones import PgPhonesRepo
    from collie_gateway.store.pg.pushes import PgPushesRepo
    from collie_gateway.store.pg.small import PgKvRepo, PgNotesRepo

    db = await PgDatabase.open(url)
    kv = PgKvRepo(db)
    repos = (PgMirrorsRepo(db), PgLedgerRepo(db), PgNotesRepo(db), PgPushesRepo(db))
    phones, notify = PgPhonesRepo(db), PgNotifyRepo(db)
    return Stores("postgresql", *repos, kv, CrewRepo(kv), phones, notify, db.close, db)
