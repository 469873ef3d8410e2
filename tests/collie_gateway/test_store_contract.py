"""The store's contract, on both backends (issue 23): the same calls through the repository
protocols (``store/protocols.py``) give the same results on the SQLite file and on
PostgreSQL. Each test opens its store as a run does (``open_stores``), on a real file or a
real server (its own database), and where it matters opens it twice, as two workers would.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from collie_gateway.core.answers import Action, Outcome, Record, Tap, TapDecision, on_result
from collie_gateway.core.mirror import LinkState
from collie_gateway.core.notes import Note
from collie_gateway.core.phones import CodeState, Effect, Pairing, Phone, Scope, code_hash
from collie_gateway.errors import StoreError
from collie_gateway.store.pg.database import check
from collie_gateway.store.schema import DELTAS as PG_MIGRATIONS
from collie_gateway.store.stores import Stores, open_stores
from collie_gateway.store.values import (
    NOT_DELIVERED,
    SENT,
    Decision,
    LogEntry,
    OnceFacts,
    Owe,
    OwedWebhook,
)
from push import Environment, Provider, WebPushKeys
from wire.messages import Conversation

NOW = "2026-12-04T12:00:00+00:00"
Open = Callable[[], Awaitable[Stores]]


@pytest.fixture(params=["sqlite", "postgresql"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Open:
    """Opens the test's store (the same file or database each time), as a run does."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None

    def opener() -> Awaitable[Stores]:
        return open_stores(tmp_path / "gateway.db", url)

    return opener


@contextlib.asynccontextmanager
async def opened(open_store: Open) -> AsyncIterator[Stores]:
    stores = await open_store()
    try:
        yield stores
    finally:
        await stores.close()


def tap(request_id: str, ask: str = "a1", answer: bytes = b'{"option":"allow"}') -> Tap:
    return Tap(request_id, "desk", ask, 1, answer)


async def test_T1_a_tap_claims_its_ask_and_a_second_tap_is_told_answered(open_store: Open) -> None:
    async with opened(open_store) as store:
        first, before = await store.ledger.take(tap("r1"), NOW)
        assert (first.action, first.claim, before) == (Action.SEND, True, None)
        second, _ = await store.ledger.take(tap("r2"), NOW)
        assert (second.action, second.record.outcome) == (Action.REPLY, Outcome.ANSWERED)
        again, before = await store.ledger.take(tap("r1"), NOW)
        assert (again.action, again.record.attempts) == (Action.SEND, 2)
        assert before is not None
        assert before.attempts == 1
        other, _ = await store.ledger.take(tap("r1", answer=b'{"option":"deny"}'), NOW)
        assert (other.action, other.conflict) == (Action.REPLY, True)
        assert await store.ledger.unsettled() == {"r1": ("desk", "a1")}
        assert [r.tap.request_id for r in await store.ledger.pending("desk")] == ["r1"]
        assert await store.ledger.tapped("desk", "a1")
        assert not await store.ledger.tapped("desk", "a2")


async def test_T1_a_settled_tap_releases_the_claim_and_survives_a_restart(
    open_store: Open,
) -> None:
    async with opened(open_store) as store:
        decision, _ = await store.ledger.take(tap("r1"), NOW)
        await store.ledger.settle(on_result(decision.record, "expired"), NOW)
        fresh, _ = await store.ledger.take(tap("r2"), NOW)
        assert (fresh.action, fresh.claim) == (Action.SEND, True)
    async with opened(open_store) as store:
        rec = await store.ledger.record("r1")
        assert rec is not None
        assert (rec.settled, rec.outcome) == (True, Outcome.EXPIRED)
        assert await store.ledger.unsettled() == {"r2": ("desk", "a1")}
        accepted = await store.ledger.accept("desk", "a1", "r2", NOW)
        assert accepted is not None
        assert accepted.outcome is Outcome.ACCEPTED
        assert await store.ledger.accept("desk", "a1", "r2", NOW) is None
        refused = await store.ledger.refuse(tap("r3", ask="a9"), "too late", NOW)
        assert (refused.outcome, refused.reason) == (Outcome.REFUSED, "too late")
        kept = await store.ledger.refuse(tap("r2"), "ignored", NOW)
        assert kept.outcome is Outcome.ACCEPTED
        assert await store.ledger.unsettled() == {}


async def test_T1_two_workers_racing_taps_on_one_ask_send_exactly_one(open_store: Open) -> None:
    async with opened(open_store) as one, opened(open_store) as two:
        taps = [tap(f"r{i}") for i in range(12)]
        results = await asyncio.gather(
            *((one if i % 2 else two).ledger.take(t, NOW) for i, t in enumerate(taps))
        )
        sends = [d.record.tap.request_id for d, _ in results if d.action is Action.SEND]
        assert len(sends) == 1
        assert await one.ledger.unsettled() == {sends[0]: ("desk", "a1")}
        assert await two.ledger.unsettled() == {sends[0]: ("desk", "a1")}


async def taken_together(store: Stores, *taps: Tap) -> list[tuple[TapDecision, Record | None]]:
    """``taps`` taken at once, after a first tap that goes alone (on PostgreSQL they wait for
    it and go as one batch, in this order; on SQLite one after another)."""
    results = await asyncio.gather(
        store.ledger.take(tap("first", ask="a0"), NOW), *(store.ledger.take(t, NOW) for t in taps)
    )
    return results[1:]


async def test_T1_a_batch_with_one_request_id_twice_sends_it_again_as_alone(
    open_store: Open,
) -> None:
    async with opened(open_store) as store:
        (one, before), (two, seen) = await taken_together(store, tap("r1"), tap("r1"))
        assert (one.action, one.claim, one.record.attempts, before) == (Action.SEND, True, 1, None)
        assert (two.action, two.record.attempts) == (Action.SEND, 2)
        assert seen is not None
        assert seen.attempts == 1
        # Its two settlements at once: applied in order (the second, the agent's word, last).
        await asyncio.gather(
            store.ledger.settle(on_result(one.record, None), NOW),
            store.ledger.settle(on_result(two.record, "accepted"), NOW),
        )
        rec = await store.ledger.record("r1")
        assert rec is not None
        assert (rec.settled, rec.outcome, rec.attempts) == (True, Outcome.ACCEPTED, 2)
        assert set(await store.ledger.unsettled()) == {"first"}


async def test_T1_a_batch_where_one_answer_conflicts_keeps_the_others_decisions(
    open_store: Open,
) -> None:
    async with opened(open_store) as store:
        results = await taken_together(
            store, tap("r1"), tap("r1", answer=b'{"option":"deny"}'), tap("r2"), tap("r3", ask="a2")
        )
        (sent, _), (conflict, kept), (lost, _), (other, _) = results
        assert (sent.action, sent.claim) == (Action.SEND, True)
        assert (conflict.action, conflict.conflict, conflict.record.outcome) == (
            Action.REPLY,
            True,
            Outcome.REFUSED,
        )
        assert conflict.record.tap.answer == b'{"option":"allow"}'  # the kept answer
        assert kept is not None
        assert kept.attempts == 1
        assert (lost.action, lost.record.outcome) == (Action.REPLY, Outcome.ANSWERED)
        assert (other.action, other.claim) == (Action.SEND, True)
        assert await store.ledger.unsettled() == {
            "first": ("desk", "a0"),
            "r1": ("desk", "a1"),
            "r3": ("desk", "a2"),
        }
        r2 = await store.ledger.record("r2")
        assert r2 is not None
        assert (r2.settled, r2.outcome) == (True, Outcome.ANSWERED)


async def test_T1_a_batch_across_two_agents_claims_each_agents_ask(open_store: Open) -> None:
    async with opened(open_store) as store:
        other = Tap("r2", "shed", "a1", 1, b'{"option":"allow"}')
        (desk, _), (shed, _), (late, _) = await taken_together(store, tap("r1"), other, tap("r3"))
        assert [(d.action, d.claim) for d in (desk, shed)] == [(Action.SEND, True)] * 2
        assert (late.action, late.record.outcome) == (Action.REPLY, Outcome.ANSWERED)
        assert await store.ledger.unsettled() == {
            "first": ("desk", "a0"),
            "r1": ("desk", "a1"),
            "r2": ("shed", "a1"),
        }
        await asyncio.gather(
            store.ledger.settle(on_result(desk.record, "expired"), NOW),
            store.ledger.settle(on_result(shed.record, "accepted"), NOW),
        )
        assert set(await store.ledger.unsettled()) == {"first"}
        (again, _), (still, _) = await taken_together(
            store, tap("r4"), Tap("r5", "shed", "a1", 1, b"{}")
        )
        assert (again.action, again.claim) == (Action.SEND, True)  # desk's claim was released
        assert (still.action, still.record.outcome) == (Action.REPLY, Outcome.ANSWERED)


async def test_T1_a_settlement_and_a_tap_of_its_ask_waiting_together(open_store: Open) -> None:
    async with opened(open_store) as store:
        decision, _ = await store.ledger.take(tap("r1"), NOW)
        # On PostgreSQL the settlement and the tap go in one statement after the first tap.
        _, _, (fresh, _) = await asyncio.gather(
            store.ledger.take(tap("first", ask="a0"), NOW),
            store.ledger.settle(on_result(decision.record, "expired"), NOW),
            store.ledger.take(tap("r2"), NOW),
        )
        assert (fresh.action, fresh.claim) == (Action.SEND, True)  # the claim was released
        rec = await store.ledger.record("r1")
        assert rec is not None
        assert (rec.settled, rec.outcome) == (True, Outcome.EXPIRED)
        assert await store.ledger.unsettled() == {"first": ("desk", "a0"), "r2": ("desk", "a1")}


async def test_mirrors_flushed_are_what_the_next_run_loads(open_store: Open) -> None:
    at = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    async with opened(open_store) as store:
        mirrors = await store.mirrors.load_mirrors(["desk", "pi"])
        assert mirrors["desk"].conversations == {}
        desk = mirrors["desk"]
        desk.state, desk.wire, desk.last_event_id = LinkState.READY, 1, "e-41"
        for cid in ("c1", "c2", "c3"):
            desk.put(Conversation(id=cid, title=f"t {cid}", updated_at=at))
        store.mirrors.mark_all("desk")
        await store.mirrors.flush()
        del desk.conversations["c2"]
        store.mirrors.mark("desk", "c2")
        await store.mirrors.flush()
    async with opened(open_store) as store:
        again = await store.mirrors.load_mirrors(["desk", "pi"])
        assert (again["desk"].wire, again["desk"].last_event_id) == (1, "e-41")
        assert sorted(again["desk"].conversations) == ["c1", "c3"]
        assert again["desk"].conversations["c3"].title == "t c3"
        assert again["pi"].conversations == {}


async def test_R3_notes_once_per_key_in_order(open_store: Open) -> None:
    first = Note("receipt", "Expired", datetime(2026, 12, 4, 12, 0, tzinfo=UTC), "i3")
    later = Note("stopped", "Stopped", datetime(2026, 12, 4, 12, 5, tzinfo=UTC), None)
    async with opened(open_store) as store:
        await store.notes.save("desk", "c1", "k2", later)
        await store.notes.save("desk", "c1", "k1", first)
        await store.notes.save("desk", "c1", "k1", later)  # the same key: ignored
        assert await store.notes.load("desk", "c1") == [first, later]
        assert await store.notes.load("desk", "c2") == []


async def test_W1_kv_and_crew_rows(open_store: Open) -> None:
    async with opened(open_store) as store:
        assert await store.kv.get("x") is None
        await store.kv.put("x", b"1")
        await store.kv.put("x", b"2")
        await store.crew.save_rows("laptop", b"[1]")
        await store.crew.save_rows("tower", b"[2]")
        assert await store.kv.get("x") == b"2"
        assert await store.crew.saved_rows() == {"laptop": b"[1]", "tower": b"[2]"}


async def test_P3_devices_owed_pushes_and_the_log(open_store: Open) -> None:
    async with opened(open_store) as store:
        push = store.pushes
        phone = await push.register(Provider.APNS, "tok-1", Environment.SANDBOX, None, 10.0)
        assert await push.register(Provider.APNS, "tok-1", Environment.PRODUCTION, None, 11.0) == (
            phone
        )
        tablet = await push.register(Provider.FCM, "tok-2", Environment.PRODUCTION, b"k" * 32, 12.0)
        assert [(d.id, d.environment, d.registered_at) for d in await push.devices()] == [
            (phone, Environment.PRODUCTION, 11.0),
            (tablet, Environment.PRODUCTION, 12.0),
        ]
        assert (await push.facts("desk/a1")).state is None
        entry = LogEntry(NOW, "desk", "c1", "a1", None, "decided", None)
        await push.log(entry, owe=Owe("desk/a1", 20.0, (phone, tablet), b"limits"))
        facts = await push.facts("desk/a1")
        assert (facts.state, facts.pending) == ("owed", frozenset({phone, tablet}))
        assert await push.limiter_state() == b"limits"
        assert not await push.delivered("desk/a1", phone, "sent", 21.0)
        assert not await push.remove(tablet, registered_at=11.0)  # registered again since
        assert await push.remove(tablet)
        assert await push.finish("desk/a1")
        assert await push.facts("desk/a1") == type(facts)("done", SENT, frozenset(), ())
        await push.log(entry, settle=("desk/a2", 30.0, "muted"))
        assert (await push.facts("desk/a2")).reason == "muted"
        await push.log(entry, owe=Owe("desk/a3", 40.0, (), b"limits"))
        assert await push.resolved("desk/a3", "closed")
        assert not await push.resolved("desk/a3", "closed")
        await push.log(entry, owe=Owe("desk/a4", 50.0, (), b"limits"))
        assert await push.finish("desk/a4")
        assert (await push.facts("desk/a4")).reason == NOT_DELIVERED
        recent = await push.recent(2)
        assert [r["outcome"] for r in recent] == ["decided", "decided"]
        assert len(await push.recent()) == 4


async def test_P3_a_push_decided_with_its_facts_in_one_transaction(open_store: Open) -> None:
    async with opened(open_store) as store:
        push = store.pushes
        phone = await push.register(Provider.APNS, "tok-1", Environment.SANDBOX, None, 10.0)
        seen: list[OnceFacts] = []
        entry = LogEntry(NOW, "desk", "c1", "a1", None, "dispatched", None)

        def owe(facts: OnceFacts) -> Decision:
            seen.append(facts)
            return Decision(entry, owe=Owe("desk/a1", 20.0, (phone,), b"limits"))

        assert not await push.decide("desk/a1", owe)
        assert (seen[0].state, [d.id for d in seen[0].devices]) == (None, [phone])
        assert (await push.facts("desk/a1")).pending == frozenset({phone})
        assert await push.limiter_state() == b"limits"
        # Asked to finish while the device still waits: not finished, nothing logged.
        assert not await push.decide("desk/a1", lambda facts: Decision(finish=True))
        assert await push.delivered("desk/a1", phone, "sent", 21.0)
        muted = LogEntry(NOW, "desk", "c1", "a2", None, "suppressed", "muted")
        assert not await push.decide("desk/a2", lambda f: Decision(muted, ("desk/a2", 30.0, "m")))
        done = await push.facts("desk/a2")
        assert (done.state, done.reason) == ("done", "m")
        seen.clear()

        def nothing(facts: OnceFacts) -> Decision:
            seen.append(facts)
            return Decision()

        assert not await push.decide("desk/a2", nothing)
        assert (seen[0].state, seen[0].devices) == ("done", ())
        assert [r["outcome"] for r in await push.recent()] == ["suppressed", "dispatched"]


async def test_postgres_migrations_once_with_three_workers_starting_together(
    pg_url: str,
) -> None:
    stores = await asyncio.gather(*(open_stores(Path("unused.db"), pg_url) for _ in range(3)))
    for store in stores:
        await store.close()
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute("SELECT version FROM collie_schema")
        assert await cur.fetchall() == [(len(PG_MIGRATIONS),)]


async def test_postgres_a_newer_schema_is_refused_unchanged(pg_url: str) -> None:
    await (await open_stores(Path("unused.db"), pg_url)).close()
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("UPDATE collie_schema SET version = 99")
    expected = f"schema version 99 is newer than this gateway knows ({len(PG_MIGRATIONS)})"
    with pytest.raises(StoreError, match=re.escape(expected)):
        await check(pg_url)
    with pytest.raises(StoreError, match=re.escape(expected)):
        await open_stores(Path("unused.db"), pg_url)
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute("SELECT version FROM collie_schema")
        assert await cur.fetchall() == [(99,)]


async def test_postgres_a_server_not_there_is_one_clear_error(tmp_path: Path) -> None:
    url = f"postgresql://collie@/none?host={tmp_path}"
    with pytest.raises(StoreError, match="cannot reach the database"):
        await check(url)


async def test_P3_a_claim_is_held_by_one_postgres_worker_and_goes_with_it(pg_url: str) -> None:
    one = await open_stores(Path("unused.db"), pg_url)
    two = await open_stores(Path("unused.db"), pg_url)
    try:
        assert await one.pushes.claim("desk/a1")
        assert not await two.pushes.claim("desk/a1")
        assert await two.pushes.claim("desk/a2")
        await one.pushes.release("desk/a1")
        assert await two.pushes.claim("desk/a1")
        assert not await one.pushes.claim("desk/a2")
    finally:
        await one.close()
    three = await open_stores(Path("unused.db"), pg_url)
    try:
        await two.close()  # a worker gone: its claims are free
        assert await three.pushes.claim("desk/a1")
        assert await three.pushes.claim("desk/a2")
    finally:
        await three.close()


async def test_P3_a_claims_connection_the_server_dropped_is_made_again(pg_url: str) -> None:
    one = await open_stores(Path("unused.db"), pg_url)
    two = await open_stores(Path("unused.db"), pg_url)
    try:
        assert await one.pushes.claim("desk/a1")
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks"
                " WHERE locktype = 'advisory' AND pid <> pg_backend_pid()"  # this test's database:
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        await one.pushes.release("desk/a1")  # its connection is gone: nothing to give back
        assert await two.pushes.claim("desk/a1")  # the lock went with the connection
        assert not await one.pushes.claim("desk/a1")  # a new connection, the lock is taken
        assert await one.pushes.claim("desk/a2")
    finally:
        await one.close()
        await two.close()


async def test_P3_owed_keys_are_listed_until_done(open_store: Open) -> None:
    async with opened(open_store) as store:
        entry = LogEntry(NOW, "desk", "c1", "a1", None, "decided", None)
        await store.pushes.log(entry, owe=Owe("desk/a1", 1.0, ("d-1",), b"limits"))
        await store.pushes.log(entry, owe=Owe("desk/a2", 2.0, (), b"limits"))
        await store.pushes.log(entry, settle=("desk/a3", 3.0, "muted"))
        assert await store.pushes.owed() == {"desk/a1", "desk/a2"}
        assert await store.pushes.finish("desk/a2")
        assert await store.pushes.owed() == {"desk/a1"}


async def test_P3_keys_with_no_decision_stored_are_undecided(open_store: Open) -> None:
    async with opened(open_store) as store:
        entry = LogEntry(NOW, "desk", "c1", "a1", None, "decided", None)
        await store.pushes.log(entry, owe=Owe("desk/a1", 1.0, ("d-1",), b"limits"))
        await store.pushes.log(entry, settle=("desk/a2", 2.0, "muted"))
        keys = ["desk/a1", "desk/a2", "desk/a3", "desk/a4"]
        assert await store.pushes.undecided(keys) == {"desk/a3", "desk/a4"}
        assert await store.pushes.undecided([]) == set()


async def test_P1_the_limiter_turn_is_shared_only_on_postgres(open_store: Open) -> None:
    async with opened(open_store) as store:
        async with store.pushes.limiter_turn() as turn:
            assert turn.state is None
            turn.keep(b"state-1")
        async with store.pushes.limiter_turn() as turn:
            if store.shared:  # read as the last turn stored it, one worker at a time
                assert (turn.shared, turn.state) == (True, b"state-1")
            else:  # one process: its limiter in memory is the truth
                assert (turn.shared, turn.state) == (False, None)


T0 = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)


def made(pairing: Pairing, name: str) -> tuple[Phone, str | None, str]:
    """What the Phones service makes of a code that pairs: the phone, its key, the check."""
    return Phone("p-" + name, name, pairing.scope, T0, "h-" + name), None, "123456"


async def test_a_code_sent_at_once_to_two_workers_pairs_one_phone(open_store: Open) -> None:
    async with opened(open_store) as one, opened(open_store) as two:
        pairing = Pairing("k-1", code_hash("abcd"), Scope.READ, T0, T0 + timedelta(minutes=5))
        await one.phones.add_pairing(pairing)
        results = await asyncio.gather(
            *(
                (one, two)[i % 2].phones.redeem(
                    code_hash("abcd"), T0, functools.partial(made, name=f"phone{i}")
                )
                for i in range(20)
            )
        )
        paired = [phone for effect, phone in results if effect is Effect.PAIR]
        assert len(paired) == 1
        assert paired[0] is not None
        assert sorted({e for e, _ in results}) == sorted({Effect.PAIR, Effect.REFUSE_USED})
        found = await two.phones.pairing("k-1")
        assert found is not None
        assert (found[0].state, found[1], found[2]) == (CodeState.USED, paired[0], "123456")
        assert await two.phones.phones() == paired
        nope = functools.partial(made, name="nope")
        assert await one.phones.redeem(code_hash("nope"), T0, nope) == (Effect.NOTHING, None)


async def test_revoking_on_one_worker_removes_the_phones_devices_and_moves_the_version(
    open_store: Open,
) -> None:
    async with opened(open_store) as one, opened(open_store) as two:
        for name in ("b", "a"):
            await one.phones.add_phone(Phone("p-" + name, name, Scope.ANSWER, T0, "h-" + name))
        keys = WebPushKeys(p256dh=b"\x04" + b"p" * 64, auth=b"a" * 16)
        env = Environment.PRODUCTION
        mine = await one.pushes.register(
            Provider.WEBPUSH, "https://e/1", env, None, 1.0, "it", "p-a", keys
        )
        other = await one.pushes.register(Provider.FCM, "t2", env, None, 2.0, None, "p-b")
        shown = [(d.id, d.lang, d.webpush) for d in await two.pushes.devices()]
        assert shown == [(mine, "it", keys), (other, None, None)]
        version = await two.phones.data_version()
        assert await one.phones.revoke("p-a", T0) is True
        assert await one.phones.revoke("p-a", T0) is False
        assert await two.phones.data_version() != version
        assert await two.phones.active_ids() == {"p-b"}
        assert [d.id for d in await two.pushes.devices()] == [other]
        gone = await two.phones.phone("p-a")
        assert gone is not None
        assert (gone.name, gone.token_hash, gone.revoked_at) == ("a", "", T0)
        await one.phones.seen([("p-b", T0, "10.0.0.9")])
        assert [(p.name, p.last_seen, p.last_address) for p in await two.phones.phones()] == [
            ("b", T0, "10.0.0.9")
        ]


async def test_a_withdrawal_goes_to_each_device_once_across_workers(open_store: Open) -> None:
    async with opened(open_store) as one, opened(open_store) as two:
        args = (Environment.PRODUCTION, None, 1.0)
        phone = await one.pushes.register(Provider.APNS, "t1", *args)
        tablet = await one.pushes.register(Provider.FCM, "t2", *args)
        entry = LogEntry(NOW, "desk", "c1", "a1", None, "decided", None)
        note = b'{"withdraw":"a1"}'
        await one.pushes.log(entry, owe=Owe("desk/a1", 20.0, (phone, tablet), b"l", note))
        await one.pushes.delivered("desk/a1", phone, "sent", 21.0)
        assert await two.notify.notified(0.0) == {"desk/a1"}
        dues = await asyncio.gather(
            one.notify.due("desk/a1", 30.0), two.notify.due("desk/a1", 30.0)
        )
        taken = [d for d in dues if d is not None]
        assert [(d.note, [x.id for x in d.devices]) for d in taken] == [(note, [phone])]
        await two.notify.withdrawn("desk/a1", phone, "sent", 31.0)
        assert await one.notify.notified(0.0) == set()
        assert await one.notify.due("desk/a1", 32.0) is None


async def test_webhooks_owed_until_done_and_the_answers_phone_kept(open_store: Open) -> None:
    async with opened(open_store) as one, opened(open_store) as two:
        await one.notify.owe_webhook(OwedWebhook("h2", "https://hook/b", b"{2}"), 2.0)
        await one.notify.owe_webhook(OwedWebhook("h1", "https://hook/a", b"{1}"), 1.0)
        await one.notify.owe_webhook(OwedWebhook("h1", "https://hook/a", b"{again}"), 3.0)
        assert [h.id for h in await two.notify.owed_webhooks()] == ["h1", "h2"]
        await two.notify.webhook_done("h1", "https://hook/a")
        assert await one.notify.owed_webhooks() == [OwedWebhook("h2", "https://hook/b", b"{2}")]
        await one.notify.kv.put("vapid_key", b"pem")
        assert await two.notify.kv.get("vapid_key") == b"pem"
        taken = Tap("r9", "desk", "a9", 1, b"{}", "p-a")
        await one.ledger.take(taken, NOW)
        assert [r.tap.phone for r in await two.ledger.pending("desk")] == ["p-a"]
        words = Note("receipt", "Deploy?", T0, None, words="receipt_decided")
        await one.notes.save("desk", "c1", "k1", words)
        assert await two.notes.load("desk", "c1") == [words]
