"""One gateway's repositories on one backend: the SQLite file (the default) or PostgreSQL
(a ``postgresql://`` URL: several workers on one database)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from collie_gateway.store.crew import CrewRepo
from collie_gateway.store.database import Database
from collie_gateway.store.engine import Db
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
    SharedStore,
)
from collie_gateway.store.pushes import PushesRepo

URL_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(value: str) -> bool:
    """Whether ``value`` names a PostgreSQL database rather than a SQLite file."""
    return value.startswith(URL_SCHEMES)


def shown_url(url: str) -> str:
    """A database ``url`` without its password, for messages."""
    from collie_gateway.store.pg.database import shown  # psycopg: only on PostgreSQL

    return shown(url)


def check_store(db_path: Path, url: str | None = None) -> None:
    """Refuse a store this gateway cannot use, before a line says it serves; a SQLite file
    is read without writing anything.

    Raises:
        StoreError: one line naming the store and what is wrong with it.
    """
    if url is None:
        Database.check(db_path)
    else:
        from collie_gateway.store.pg.database import check

        asyncio.run(check(url))


@asynccontextmanager
async def phones_of_file(db_path: Path) -> AsyncIterator[PhonesStore]:
    """The phones of the SQLite file ``db_path`` (the command line's ``pair`` and ``phones``)."""
    db = await Database.open(db_path)
    try:
        yield PhonesRepo(db)
    finally:
        await db.close()


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
    cluster: SharedStore | None = None  # what several workers share (PostgreSQL), else None

    @property
    def shared(self) -> bool:
        """Whether other workers may write the same store (PostgreSQL)."""
        return self.cluster is not None


async def open_stores(db_path: Path, url: str | None = None) -> Stores:
    """The repositories on PostgreSQL at ``url`` when given, else on the SQLite file
    ``db_path``; opened and migrated.

    Raises:
        StoreError: the store cannot be used (a newer schema, not a database, no server).
    """
    if url is None:
        return _stores("sqlite", await Database.open(db_path))
    # Imported here: a SQLite gateway never loads psycopg.
    from collie_gateway.store.pg.shared import PgShared

    shared = await PgShared.open(url)
    return _stores("postgresql", shared.db, shared)


def _stores(backend: str, db: Db, cluster: SharedStore | None = None) -> Stores:
    """Every repository on ``db``."""
    kv = KvRepo(db)
    repos = (MirrorsRepo(db), LedgerRepo(db), NotesRepo(db), PushesRepo(db))
    crew, phones, notify = CrewRepo(kv), PhonesRepo(db), NotifyRepo(db)
    return Stores(backend, *repos, kv, crew, phones, notify, db.close, cluster)
