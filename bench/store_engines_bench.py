"""The store's engine layer, measured: one transaction of ours on SQLite through each way of
writing it once for both engines.

The transaction is the ledger's record-a-tap (``LedgerRepo.take``): read the tap's record,
read the ask's claim, decide (``core.answers.on_tap``), write the record and the claim; each
run a new request id on a new ask, so every run writes. Three ways, taking turns in small
chunks on one SQLite file (WAL, ``synchronous=NORMAL``), each transaction ``BEGIN IMMEDIATE``
… ``COMMIT`` on the event loop's thread under the store's writer lock:

- hand-written ``sqlite3`` (the baseline: the SQLite-only ledger before one store);
- (b) the thin engine layer (``store/engine.py``: one SQL text per statement, the
  transaction an ``async`` function of a ``Tx``, driven to its end in one step on SQLite):
  the store's own ``LedgerRepo`` on its ``Database``;
- (a) SQLAlchemy Core 2 (``Table`` objects, ``select``/``insert`` constructs built once with
  bound parameters, its compiled cache; one sync connection kept, as the store runs SQLite's
  small transactions on the loop's own connection).

Prints µs per transaction (median of the chunks) and the ratios. SQLAlchemy is not a project
dependency: give a folder it is installed in (``pip install --target DIR sqlalchemy``) with
``--sqlalchemy DIR``, or it is left out.

    python bench/store_engines_bench.py [--chunks 40] [--size 100] [--sqlalchemy DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from collie_gateway.core.answers import Action, Outcome, Record, Tap, on_tap
from collie_gateway.store.database import Database
from collie_gateway.store.ledger import LedgerRepo

NOW = "2026-12-06T00:00:00+00:00"
_COLUMNS = "request_id, agent, ask_id, version, answer, attempts, settled, outcome, reason, phone"
Take = Callable[[Tap], Awaitable[object]]
BASELINE = "hand-written sqlite3 (baseline)"
ENGINE = "(b) engine layer"
SQLALCHEMY = "(a) SQLAlchemy Core"


def tap(n: int) -> Tap:
    """The n-th tap: a new request on a new ask."""
    return Tap(f"req-{n}", "desk", f"ask-{n}", 1, b'{"choice":"yes"}', "phone-1")


def _row(row: tuple[Any, ...]) -> Record:
    rid, agent, ask_id, version, answer, attempts, settled, outcome, reason, phone = row
    return Record(
        tap=Tap(rid, agent, ask_id, version, bytes(answer), phone),
        attempts=attempts,
        settled=bool(settled),
        outcome=Outcome(outcome) if outcome else None,
        reason=reason,
    )


def _args(rec: Record) -> tuple[object, ...]:
    t, outcome = rec.tap, rec.outcome.value if rec.outcome else None
    tapped = (t.request_id, t.agent, t.ask_id, t.version, t.answer)
    return (*tapped, rec.attempts, int(rec.settled), outcome, rec.reason, t.phone, NOW, NOW)


async def hand_written(db: Database) -> Take:
    """The SQLite-only ledger's take: ``sqlite3`` statements in a function of the connection."""
    insert = (
        f"INSERT INTO answers({_COLUMNS}, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def decide(conn: sqlite3.Connection, t: Tap) -> object:
        found = conn.execute(
            f"SELECT {_COLUMNS} FROM answers WHERE request_id = ?", (t.request_id,)
        ).fetchone()
        existing = _row(found) if found else None
        row = conn.execute(
            "SELECT request_id FROM claims WHERE agent = ? AND ask_id = ?", (t.agent, t.ask_id)
        ).fetchone()
        decision = on_tap(existing, str(row[0]) if row else None, t)
        if existing is None:
            conn.execute(insert, _args(decision.record))
        if decision.action is not Action.REPLY and decision.claim:
            conn.execute(
                "INSERT INTO claims(agent, ask_id, request_id) VALUES (?, ?, ?)",
                (t.agent, t.ask_id, t.request_id),
            )
        return decision

    async def take(t: Tap) -> object:
        return await db.run(lambda conn: decide(conn, t))

    return take


async def engine_layer(db: Database) -> Take:
    """(b): the store's ledger on the engine layer."""
    repo = LedgerRepo(db)
    return lambda t: repo.take(t, NOW)


def sqlalchemy_core(path: Path, db: Database) -> tuple[Take, Callable[[], None]]:
    """(a): the same transaction in SQLAlchemy Core, on a sync engine of its own on the
    same file, under the store's writer lock."""
    sa: Any = importlib.import_module("sqlalchemy")  # optional: not a project dependency

    meta = sa.MetaData()
    answers = sa.Table(
        "answers",
        meta,
        *(sa.Column(name) for name in _COLUMNS.split(", ")),
        sa.Column("created_at"),
        sa.Column("updated_at"),
    )
    claims = sa.Table(
        "claims", meta, sa.Column("agent"), sa.Column("ask_id"), sa.Column("request_id")
    )
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"isolation_level": None})

    def pragmas(conn: Any, _record: Any) -> None:
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")

    def begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    sa.event.listen(engine, "connect", pragmas)
    sa.event.listen(engine, "begin", begin)

    # Built once, with bound parameters (the quickest way to use it: each call looks up
    # the compiled statement in its cache).
    columns = [answers.c[name] for name in _COLUMNS.split(", ")]
    record = sa.select(*columns).where(answers.c.request_id == sa.bindparam("rid"))
    holder = sa.select(claims.c.request_id).where(
        claims.c.agent == sa.bindparam("a"), claims.c.ask_id == sa.bindparam("k")
    )
    names = [*_COLUMNS.split(", "), "created_at", "updated_at"]
    add_record, add_claim = sa.insert(answers), sa.insert(claims)
    conn = engine.connect()  # one connection kept, as the store keeps its own

    def decide(t: Tap) -> object:
        with conn.begin():
            found = conn.execute(record, {"rid": t.request_id}).first()
            existing = _row(tuple(found)) if found else None
            held = conn.execute(holder, {"a": t.agent, "k": t.ask_id}).first()
            decision = on_tap(existing, str(held[0]) if held else None, t)
            if existing is None:
                conn.execute(add_record, dict(zip(names, _args(decision.record), strict=True)))
            if decision.action is not Action.REPLY and decision.claim:
                row = {"agent": t.agent, "ask_id": t.ask_id, "request_id": t.request_id}
                conn.execute(add_claim, row)
            return decision

    async def take(t: Tap) -> object:
        async with db._lock:
            return decide(t)

    def dispose() -> None:
        conn.close()
        engine.dispose()

    return take, dispose


async def timed(take: Take, first: int, n: int) -> float:
    """µs per transaction over ``n`` taps from the ``first``-th."""
    start = time.perf_counter()
    for i in range(first, first + n):
        await take(tap(i))
    return (time.perf_counter() - start) / n * 1e6


async def main(chunks: int, size: int, with_sqlalchemy: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="store-engines-") as tmp:
        path = Path(tmp) / "gateway.db"
        db = await Database.open(path)
        ways: dict[str, Take] = {
            BASELINE: await hand_written(db),
            ENGINE: await engine_layer(db),
        }
        dispose: Callable[[], None] | None = None
        if with_sqlalchemy:
            ways[SQLALCHEMY], dispose = sqlalchemy_core(path, db)
        figures: dict[str, list[float]] = {name: [] for name in ways}
        n = 0
        for take in ways.values():  # warm up: caches, the first pages of the file
            n += 200
            await timed(take, n, 200)
        # Small chunks, the ways in turn on one file: the machine's noise, the WAL's growth
        # and its checkpoints fall on every way alike.
        for _ in range(chunks):
            for name, take in ways.items():
                n += size
                figures[name].append(await timed(take, n, size))
        if dispose is not None:
            dispose()
        await db.close()
    base = statistics.median(figures[BASELINE])
    print(f"ledger take (record a tap) on SQLite: {chunks} x {size} transactions per way,")
    print("median µs per transaction over the chunks")
    for name, samples in figures.items():
        us = statistics.median(samples)
        print(f"  {name:34} {us:7.1f} µs/op   {us / base:4.2f}x the baseline")
    if SQLALCHEMY in figures:
        a, b = statistics.median(figures[SQLALCHEMY]), statistics.median(figures[ENGINE])
        print(f"  (a) SQLAlchemy Core / (b) engine layer: {a / b:4.2f}")


def parse() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=40, help="turns of every way")
    parser.add_argument("--size", type=int, default=100, help="transactions per turn")
    parser.add_argument("--sqlalchemy", type=Path, help="a folder SQLAlchemy is installed in")
    return parser.parse_args()


if __name__ == "__main__":
    args = parse()
    if args.sqlalchemy is not None:
        sys.path.insert(0, str(args.sqlalchemy))
    try:
        importlib.import_module("sqlalchemy")
    except ImportError:
        print("(a) left out: SQLAlchemy is not importable (see --sqlalchemy)")
        has_sqlalchemy = False
    else:
        has_sqlalchemy = True
    asyncio.run(main(args.chunks, args.size, has_sqlalchemy))
