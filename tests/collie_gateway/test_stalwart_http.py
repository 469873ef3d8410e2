"""Stalwart-style agents on the phone (people-in-the-loop S1–S7), end to end: the reference
server of ``fixtures/stalwart`` (two workers on one SQLite run store), the bridge
``bridges/stalwart.py`` (an SDK agent on a real Unix socket), and the gateway's phone API.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from aiohttp.typedefs import Handler

from bridges.stalwart import SIGNATURE, Bridge, Ledger, StalwartConfig
from collie_gateway.core.mirror import LinkState
from collie_gateway.errors import SourcesError
from collie_gateway.gateway import Gateway
from collie_gateway.sources import Source, parse_sources
from fixtures.agents.harness import REPO
from fixtures.stalwart.server import Webhook, Worker, sign
from fixtures.stalwart.store import Pause, Plan, RunStore
from tests.collie_gateway.conftest import Rig, eventually, get_json, post_json
from tests.collie_gateway.push_fixtures import Services, services
from tests.collie_gateway.test_push_http import asks_of
from wire.messages import MAX_EVENT

HOOK_SECRET = b"hook-secret"
ALREADY = "Already answered. This card goes away on the next refresh."
CHANGED = "This ask changed. Read it again, then tap an answer."
MAYBE = "Your answer may already have been applied. Check the chat."


@dataclass
class Shop:
    """Two workers on one run store, the bridge following worker ``a``, a gateway on it."""

    rig: Rig
    store: RunStore
    a: Worker
    b: Worker
    url_a: str
    url_b: str
    bridge: Bridge
    hook_url: str
    client: TestClient[Any, Any]
    gw: Gateway

    async def thread(self, thread: str) -> None:
        await self.bridge.thread(thread, title=f"Thread {thread}")
        await eventually(lambda: thread in self.gw.mirrors["shop"].conversations)

    async def say(self, thread: str, text: str, request_id: str) -> dict[str, Any]:
        body = {"request_id": request_id, "text": text}
        path = f"/api/v1/agents/shop/conversations/{thread}/messages"
        result: dict[str, Any] = await post_json(self.client, path, body)
        return result

    async def chat(self, thread: str) -> dict[str, Any]:
        path = f"/api/v1/agents/shop/conversations/{thread}?all_cards=true"
        chat: dict[str, Any] = await get_json(self.client, path)
        return chat

    async def cards(self, thread: str, n: int | None = None) -> list[dict[str, Any]]:
        """The thread's cards, once there are ``n`` of them (or at least one)."""
        found: list[dict[str, Any]] = []

        async def ready() -> bool:
            nonlocal found
            found = (await self.chat(thread))["cards"]["cards"]
            return len(found) == n if n is not None else bool(found)

        await eventually(ready)
        return found

    async def answer(
        self, ask: str, request_id: str, body: dict[str, Any], version: int = 1
    ) -> dict[str, Any]:
        payload = {"request_id": request_id, "version": version, "answer": body}
        result: dict[str, Any] = await post_json(
            self.client, f"/api/v1/agents/shop/asks/{ask}/answer", payload
        )
        return result

    async def lines(self, thread: str, kind: str) -> list[str]:
        return [
            str(line["text"])
            for line in (await self.chat(thread))["lines"]
            if line["kind"] == kind and line.get("text")
        ]

    async def line(self, thread: str, kind: str, text: str) -> None:
        """Wait until the chat shows a ``kind`` line reading ``text``."""

        async def shown() -> bool:
            return text in await self.lines(thread, kind)

        await eventually(shown)


async def start_bridge(
    rig: Rig, url: str, *, name: str = "shop", secret: bytes | None = None
) -> Bridge:
    """A bridge to ``url`` with its state in ``rig.tmp`` (the same file on every start)."""
    config = StalwartConfig(url=url, secret=secret, webhook_secret=HOOK_SECRET)
    bridge = Bridge(
        config,
        state_path=rig.tmp / f"{name}.bridge.db",
        agent_options={"now": rig.clock, "ping_interval": 0.2},
    )
    await bridge.start()
    return bridge


@asynccontextmanager
async def open_shop(
    rig: Rig, worker_a: type[Worker] = Worker, **settings: Any
) -> AsyncIterator[Shop]:
    """Workers ``a`` (a ``worker_a``) and ``b`` on one store, webhooks to the bridge, a
    gateway on the bridge."""
    async with AsyncExitStack() as stack:
        store = RunStore(rig.tmp / "runs.db")
        a = worker_a(store, name="a", operator_token="op-token")
        b = Worker(store, name="b", operator_token="op-token")
        url_a = await stack.enter_async_context(a.serve())
        url_b = await stack.enter_async_context(b.serve())
        bridge = await start_bridge(rig, url_a)
        hook = web.AppRunner(bridge.webhook_app())
        await hook.setup()
        site = web.TCPSite(hook, "127.0.0.1", 0)
        await site.start()
        stack.push_async_callback(hook.cleanup)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        hook_url = f"http://127.0.0.1:{port}/webhook"
        a.webhook = b.webhook = Webhook(hook_url, HOOK_SECRET)
        sock = await rig.serve("shop", bridge.agent)
        client, gw = await rig.gateway([Source(name="shop", socket=sock)], **settings)
        await eventually(lambda: gw.mirrors["shop"].state is LinkState.READY)
        shop = Shop(rig, store, a, b, url_a, url_b, bridge, hook_url, client, gw)
        stack.push_async_callback(lambda: stop_bridge(rig, shop.bridge))
        yield shop


@pytest.fixture
async def shop(rig: Rig) -> AsyncIterator[Shop]:
    async with open_shop(rig) as found:
        yield found


async def stop_bridge(rig: Rig, bridge: Bridge, name: str = "shop") -> None:
    await rig.stop(name)
    await bridge.close()


async def resume_direct(
    url: str, thread: str, interrupt: str, decision: str, token: str
) -> tuple[int, dict[str, Any]]:
    """Another channel answering on a worker directly (S6: a queue, an email…)."""
    body = {"interrupt_id": interrupt, "decision": decision, "token": token}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/threads/{thread}/resume", json=body) as answer,
    ):
        return answer.status, await answer.json()


def pause_of(store: RunStore, thread: str, n: int = 0) -> dict[str, Any]:
    return store.open_interrupts(thread)[n]


# --- S1, S2: every kind, as cards in S8's words -----------------------------------------------


async def test_S1_S2_confirm_is_a_permission_card_with_origins_reasons_and_the_warning(
    shop: Shop,
) -> None:
    await shop.thread("t1")
    sent = await shop.say("t1", "charge 40 for order 4411", "m1")
    assert sent["outcome"] == "accepted"
    [card] = await shop.cards("t1")
    pause = pause_of(shop.store, "t1")
    assert card["ask_id"] == pause["id"]  # S3: the pause's own stable id
    assert card["kind"] == "permission"
    assert card["title"] == "Confirm charge_card?"
    assert card["text"] == "Run charge_card?"
    buttons = card["body"]["buttons"]
    assert [(b["label"], b["secondary"]) for b in buttons] == [
        ("Allow", "Approve"),
        ("Deny", "Skip this step"),
        ("Cancel", "Cancel everything"),
    ]  # no "Always allow": stalwart has no such reply
    call = card["call"]
    assert call["arguments_title"] == "What it will use"
    assert [(a["name"], a["value"], a["origin_label"]) for a in call["arguments"]] == [
        ("amount", "40", "you typed it"),
        ("order_id", "4411", "you typed it"),
        ("card", "visa-0019", "from your account"),
    ]
    assert call["reasons_title"] == "Why this needs you"
    assert call["reasons"] == ["write", "argument_origin: amount"]
    assert call["irreversible"] == "Nothing can undo this step once it runs."
    result = await shop.answer(card["ask_id"], "r1", {"option": "approve"})
    assert result["outcome"] == "accepted"
    await shop.line("t1", "reply", "Done: charge_card ran.")
    assert shop.store.open_interrupts("t1") == []
    assert shop.a.resumes == [(pause["id"], 200)]


@pytest.mark.parametrize(
    ("text", "kind", "title", "rows", "pick", "said"),
    [
        (
            "what is the status of the payment",
            "choice",
            "Did charge_card take effect?",
            ["Yes, it happened", "No, it did not"],
            "did_not_happen",
            "Recorded: charge_card did not take effect.",
        ),
        (
            "undo the reservation",
            "choice",
            "Undoing reserve_stock failed. What should happen?",
            ["Try again", "I undid it myself", "Leave it"],
            "done_by_hand",
            "Noted: you undid reserve_stock yourself.",
        ),
    ],
    ids=["outcome_unknown", "saga_stuck"],
)
async def test_S2_outcome_unknown_and_saga_stuck_are_choices(
    shop: Shop, text: str, kind: str, title: str, rows: list[str], pick: str, said: str
) -> None:
    await shop.thread("t1")
    await shop.say("t1", text, "m1")
    [card] = await shop.cards("t1")
    assert (card["kind"], card["title"]) == (kind, title)
    assert [r["label"] for r in card["body"]["rows"]] == rows
    assert (await shop.answer(card["ask_id"], "r1", {"option": pick}))["outcome"] == "accepted"
    await shop.line("t1", "reply", said)


async def test_S2_ask_is_a_text_card_and_the_typed_answer_reaches_the_run(shop: Shop) -> None:
    await shop.thread("t1")
    await shop.say("t1", "refund please", "m1")
    [card] = await shop.cards("t1")
    assert (card["kind"], card["title"]) == ("text", "Which order should I refund?")
    assert (await shop.answer(card["ask_id"], "r1", {"text": "4411"}))["outcome"] == "accepted"
    await shop.line("t1", "reply", "Thanks, I'll use: 4411")


async def test_S0_S2_delegate_is_a_permission_in_S8s_words(shop: Shop) -> None:
    await shop.thread("t1")
    await shop.say("t1", "pt: cobrar o pedido, obrigado", "m1")
    [card] = await shop.cards("t1")
    assert card["kind"] == "permission"
    assert card["title"] == "I couldn't work that out. Shall I pass it to the assistant?"
    assert card["text"] == "pt: cobrar o pedido, obrigado"
    buttons = card["body"]["buttons"]
    assert [(b["label"], b["secondary"]) for b in buttons] == [
        ("Allow", "Yes, pass it on"),
        ("Deny", "No"),
    ]
    assert (await shop.answer(card["ask_id"], "r1", {"option": "decline"}))["outcome"] == (
        "accepted"
    )
    await shop.line("t1", "reply", "Left it.")


async def test_S2_cancel_all_closes_every_pause_of_the_run(shop: Shop) -> None:
    await shop.thread("t1")
    await shop.say("t1", "charge 40 for 4411 and 25 for 4412", "m1")
    first, second = await shop.cards("t1", 2)
    assert (await shop.answer(first["ask_id"], "r1", {"option": "cancel_all"}))["outcome"] == (
        "accepted"
    )
    await shop.line("t1", "reply", "Cancelled everything.")
    await eventually(lambda: shop.gw.agents.find_ask("shop", second["ask_id"]) is None)
    late = await shop.answer(second["ask_id"], "r2", {"option": "approve"})
    assert late["outcome"] != "accepted"
    assert shop.store.open_interrupts("t1") == []


# --- S4: several pending at once, each by its id ---------------------------------------------


async def test_S4_several_pauses_answered_by_id_in_reverse_order(shop: Shop) -> None:
    await shop.thread("t1")
    await shop.say("t1", "charge 40 for 4411 and 25 for 4412 and 7 for 4413", "m1")
    cards = await shop.cards("t1", 3)
    amounts = [c["call"]["arguments"][0]["value"] for c in cards]
    assert amounts == ["40", "25", "7"]
    assert (await shop.answer(cards[2]["ask_id"], "r3", {"option": "approve"}))["outcome"] == (
        "accepted"
    )
    assert (await shop.answer(cards[0]["ask_id"], "r1", {"option": "skip"}))["outcome"] == (
        "accepted"
    )
    # The middle one stays open, on the server and on the phone.
    [left] = shop.store.open_interrupts("t1")
    assert left["id"] == cards[1]["ask_id"]
    [still] = await shop.cards("t1", 1)
    assert still["ask_id"] == cards[1]["ask_id"]
    await shop.line("t1", "reply", "Skipped charge_card.")


# --- S5: a stale resume -----------------------------------------------------------------------


async def test_S5_two_resumes_racing_on_two_workers_exactly_one_is_accepted(shop: Shop) -> None:
    await shop.thread("t1")
    await shop.say("t1", "charge 40 for order 4411", "m1")
    [card] = await shop.cards("t1")
    pause = pause_of(shop.store, "t1")
    phone, other = await asyncio.gather(
        shop.answer(card["ask_id"], "r1", {"option": "approve"}),
        resume_direct(shop.url_b, "t1", pause["id"], "skip", pause["token"]),
    )
    statuses = sorted(status for _, status in shop.a.resumes + shop.b.resumes)
    assert statuses == [200, 409]  # one claim; the other interrupt_stale
    if other[0] == 200:
        assert phone["outcome"] == "answered"
        assert phone["card"]["line"] == ALREADY
    else:
        assert other[1]["error"] == "interrupt_stale"
        assert phone["outcome"] == "accepted"
    # Either way the run went on once: one answer in the chat, whichever won.
    won = "Done: charge_card ran." if phone["outcome"] == "accepted" else "Skipped charge_card."
    await shop.line("t1", "reply", won)
    steps = await asyncio.to_thread(shop.store.steps_after, "t1", 0)
    assert [s["decision"] for _, s in steps if s["type"] == "resumed"] in (["approve"], ["skip"])


async def test_S5_answered_on_another_worker_first_the_phone_says_already_answered(
    shop: Shop,
) -> None:
    await shop.thread("t1")
    await shop.say("t1", "charge 40 for order 4411", "m1")
    [card] = await shop.cards("t1")
    pause = pause_of(shop.store, "t1")
    status, _ = await resume_direct(shop.url_b, "t1", pause["id"], "skip", pause["token"])
    assert status == 200
    result = await shop.answer(card["ask_id"], "r1", {"option": "approve"})
    assert result["outcome"] == "answered"
    assert result["card"]["line"] == ALREADY
    await shop.line("t1", "reply", "Skipped charge_card.")
    assert "Done: charge_card ran." not in await shop.lines("t1", "reply")


async def test_S2_S5_a_stale_token_is_this_ask_changed(shop: Shop) -> None:
    await shop.thread("t1")
    await shop.say("t1", "charge 40 for order 4411", "m1")
    [card] = await shop.cards("t1")
    # The model changes the amount while the card is on the phone: same id, a new token.
    new = [{"name": "amount", "value": 4000, "origin": "model"}]
    await asyncio.to_thread(shop.store.change_arguments, card["ask_id"], new)
    result = await shop.answer(card["ask_id"], "r1", {"option": "approve"})
    assert result["outcome"] == "changed"
    assert result["card"]["line"] == CHANGED
    assert shop.store.open_interrupts("t1")[0]["arguments"] == new  # nothing was applied

    async def bumped() -> bool:
        [c] = await shop.cards("t1", 1)
        return bool(c["version"] == 2)

    await eventually(bumped)
    [again] = await shop.cards("t1", 1)
    assert again["ask_id"] == card["ask_id"]
    assert [(a["value"], a["origin_label"]) for a in again["call"]["arguments"]] == [
        ("4000", "the assistant wrote it")
    ]
    result = await shop.answer(card["ask_id"], "r2", {"option": "skip"}, version=2)
    assert result["outcome"] == "accepted"
    await shop.line("t1", "reply", "Skipped charge_card.")


class HeldWorker(Worker):
    """A worker whose answer to ``POST /messages`` is held until ``release`` is set: the turn
    is stored and its webhook delivered (the bridge has synced), only the answer is late."""

    def __init__(self, store: RunStore, **options: Any) -> None:
        super().__init__(store, **options)
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    def app(self) -> web.Application:
        app = super().app()

        @web.middleware
        async def hold(request: web.Request, handler: Handler) -> web.StreamResponse:
            response = await handler(request)
            if request.method == "POST" and request.path.endswith("/messages"):
                self.held.set()
                await self.release.wait()
            return response

        app.middlewares.append(hold)
        return app


async def test_S2_S5_a_late_turn_answer_never_changes_a_changed_ask_back(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order the stale-token test's flake came from, set with events rather than load:
    the webhook's sync shows the pause, the model changes it (version 2), and only then does
    the turn's answer, listing the pause with its old question and token, reach the bridge."""
    handled = asyncio.Event()
    on_message = Bridge._on_message

    async def on_message_then_tell(self: Bridge, conv: Any, msg: Any) -> None:
        try:
            await on_message(self, conv, msg)
        finally:
            handled.set()

    monkeypatch.setattr(Bridge, "_on_message", on_message_then_tell)
    async with open_shop(rig, worker_a=HeldWorker) as shop:
        assert isinstance(shop.a, HeldWorker)
        await shop.thread("t1")
        await shop.say("t1", "charge 40 for order 4411", "m1")
        [card] = await shop.cards("t1")
        await shop.a.held.wait()
        new = [{"name": "amount", "value": 4000, "origin": "model"}]
        await asyncio.to_thread(shop.store.change_arguments, card["ask_id"], new)

        async def bumped() -> bool:
            [c] = await shop.cards("t1", 1)
            return bool(c["version"] == 2)

        await eventually(bumped)
        shop.a.release.set()
        await handled.wait()
        # The card stays on the changed question, and an answer to it is applied.
        [again] = await shop.cards("t1", 1)
        assert (again["ask_id"], again["version"]) == (card["ask_id"], 2)
        assert [a["value"] for a in again["call"]["arguments"]] == ["4000"]
        result = await shop.answer(card["ask_id"], "r1", {"option": "skip"}, version=2)
        assert result["outcome"] == "accepted"
        await shop.line("t1", "reply", "Skipped charge_card.")
        assert shop.a.resumes == [(card["ask_id"], 200)]


async def test_S5_a_retry_after_an_unknown_resume_never_applies_twice(shop: Shop) -> None:
    await shop.thread("t1")
    await shop.say("t1", "charge 40 for order 4411", "m1")
    [card] = await shop.cards("t1")
    pause = pause_of(shop.store, "t1")
    # The first resume reached the server but its answer was lost: same token, same decision.
    status, _ = await resume_direct(shop.url_a, "t1", pause["id"], "approve", pause["token"])
    assert status == 200
    result = await shop.answer(card["ask_id"], "r1", {"option": "approve"})
    assert result["outcome"] == "answered"
    steps = await asyncio.to_thread(shop.store.steps_after, "t1", 0)
    assert [s["decision"] for _, s in steps if s["type"] == "resumed"] == ["approve"]


# --- S7: refusal and rollback as chat notices ---------------------------------------------------


async def test_S7_a_refusal_with_its_rule_is_a_notice(shop: Shop) -> None:
    await shop.thread("t1")
    await shop.say("t1", "delete customer c-208", "m1")
    await shop.line(
        "t1", "notice", "Not done: Deleting customers is not allowed.\nRule: no_customer_deletes"
    )


async def test_S7_an_operator_rollback_report_is_a_notice_and_closes_the_pauses(
    shop: Shop,
) -> None:
    await shop.thread("t1")
    await shop.say("t1", "charge 40 for 4411 and 25 for 4412", "m1")
    first, second = await shop.cards("t1", 2)
    await shop.answer(first["ask_id"], "r1", {"option": "approve"})
    await shop.line("t1", "reply", "Done: charge_card ran.")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{shop.url_b}/threads/t1/rollback") as refused:
            assert refused.status == 401
        headers = {"Authorization": "Bearer op-token"}
        async with http.post(f"{shop.url_b}/threads/t1/rollback", headers=headers) as answer:
            assert answer.status == 200
            report = (await answer.json())["rollback"]
    assert report == {"undone": [], "not_undone": ["charge_card"]}  # charge_card: irreversible
    await shop.line("t1", "notice", "Undoing what this run did\nCould not be undone: charge_card")
    await eventually(lambda: shop.gw.agents.find_ask("shop", second["ask_id"]) is None)


async def test_S7_rollback_without_an_operator_token_is_403(rig: Rig) -> None:
    store = RunStore(rig.tmp / "runs.db")
    async with Worker(store).serve() as url, aiohttp.ClientSession() as http:
        async with http.post(f"{url}/threads/t1/rollback") as answer:
            assert answer.status == 403
            assert "operator" in (await answer.json())["message"]
        async with http.get(f"{url}/healthz") as health:
            assert health.status == 200
        async with http.get(f"{url}/config.json") as config:
            assert (await config.json())["name"] == "shop"


# --- S6: webhooks in, signed resumes out ------------------------------------------------------


async def deliver(shop: Shop, body: bytes, t: int, *, signature: str | None = None) -> int:
    headers = {SIGNATURE: signature or sign(HOOK_SECRET, t, body)}
    async with (
        aiohttp.ClientSession() as http,
        http.post(shop.hook_url, data=body, headers=headers) as answer,
    ):
        return answer.status


async def test_S6_a_pause_raised_elsewhere_reaches_the_phone_by_webhook(shop: Shop) -> None:
    # A turn on worker b (another channel): the bridge learns of the thread only by webhook.
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{shop.url_b}/threads/t9/messages", json={"text": "refund"}) as r,
    ):
        assert (await r.json())["not_notified"] == []
    [card] = await shop.cards("t9")
    assert card["title"] == "Which order should I refund?"


@pytest.mark.parametrize(("skew", "status"), [(-300, 200), (300, 200), (-301, 401), (301, 401)])
async def test_S6_webhook_within_five_minutes_only(shop: Shop, skew: int, status: int) -> None:
    now = 1_800_000_000
    shop.bridge.clock = lambda: float(now)
    await asyncio.to_thread(shop.store.message, "t5", "refund")
    body = json.dumps({"thread": "t5", "interrupt": pause_of(shop.store, "t5")}).encode()
    assert await deliver(shop, body, now + skew) == status
    if status == 200:
        await shop.cards("t5", 1)
    else:
        assert "t5" not in shop.gw.mirrors["shop"].conversations


async def test_S6_webhook_tampered_or_replayed_is_refused(shop: Shop) -> None:
    now = int(time.time())
    await asyncio.to_thread(shop.store.message, "t5", "refund")
    body = json.dumps({"thread": "t5", "interrupt": pause_of(shop.store, "t5")}).encode()
    signature = sign(HOOK_SECRET, now, body)
    tampered = body.replace(b'"t5"', b'"t6"', 1)
    assert await deliver(shop, tampered, now, signature=signature) == 401
    assert await deliver(shop, body, now, signature=sign(b"wrong", now, body)) == 401
    assert await deliver(shop, body, now, signature="t=abc,v1=00") == 401
    assert await deliver(shop, body, now, signature=signature) == 200
    assert await deliver(shop, body, now, signature=signature) == 401  # replayed
    assert "t6" not in shop.gw.mirrors["shop"].conversations


async def test_S6_a_server_with_a_secret_refuses_an_unsigned_resume_and_takes_the_bridges(
    rig: Rig,
) -> None:
    store = RunStore(rig.tmp / "runs.db")
    worker = Worker(store, secret=b"resume-secret")
    async with worker.serve() as url:
        turn = await asyncio.to_thread(store.message, "t1", "charge 40 for 4411")
        pause = turn.interrupts[0]
        status, body = await resume_direct(url, "t1", pause["id"], "approve", pause["token"])
        assert (status, body["error"]) == (401, "bad_signature")
        assert store.open_interrupts("t1") != []  # nothing changed
        bridge = await start_bridge(rig, url, secret=b"resume-secret")
        try:
            await bridge.thread("t1")
            sock = await rig.serve("shop", bridge.agent)
            client, gw = await rig.gateway([Source(name="shop", socket=sock)])
            await eventually(lambda: gw.agents.find_ask("shop", pause["id"]) is not None)
            payload = {"request_id": "r1", "version": 1, "answer": {"option": "approve"}}
            result = await post_json(
                client, f"/api/v1/agents/shop/asks/{pause['id']}/answer", payload
            )
            assert result["outcome"] == "accepted"
            assert store.open_interrupts("t1") == []
        finally:
            await rig.stop("shop")
            await bridge.close()


# --- P3: the bridge restarted mid-pause -------------------------------------------------------


@pytest.fixture
async def svc(rig: Rig) -> AsyncIterator[Services]:
    async with services(rig.tmp, lambda: rig.clock().timestamp()) as found:
        yield found


async def test_S3_P3_bridge_restarted_mid_pause_raises_again_under_the_same_ids_pushed_once(
    rig: Rig, svc: Services
) -> None:
    async with open_shop(rig, push_targets=svc.targets, machine="shop-mac") as shop:
        body = {"provider": "apns", "token": "a1" * 32}
        await post_json(shop.client, "/api/v1/devices", body)
        await shop.thread("t1")
        await shop.say("t1", "charge 40 for 4411 and 25 for 4412", "m1")
        before = await shop.cards("t1", 2)
        await eventually(lambda: len(svc.apns.requests) == 2)

        await stop_bridge(rig, shop.bridge)
        await eventually(lambda: shop.gw.mirrors["shop"].state is not LinkState.READY)
        # Meanwhile the first pause is answered on another worker.
        first = pause_of(shop.store, "t1", 0)
        status, _ = await resume_direct(shop.url_b, "t1", first["id"], "skip", first["token"])
        assert status == 200
        shop.bridge = await start_bridge(rig, shop.url_a)
        await rig.serve("shop", shop.bridge.agent)
        await eventually(lambda: shop.gw.mirrors["shop"].state is LinkState.READY)
        after = await shop.cards("t1", 1)
        assert [c["ask_id"] for c in after] == [before[1]["ask_id"]]  # under the same id
        assert after[0]["version"] == before[1]["version"]  # the same ask: not changed
        ids = sorted(c["ask_id"] for c in before)
        assert sorted(asks_of(svc.apns.requests)) == ids  # each pushed once, before and after

        async def suppressed() -> bool:
            log = (await get_json(shop.client, "/api/v1/pushes?limit=100"))["pushes"]
            return any(
                e["ask"] == before[1]["ask_id"]
                and e["reason"] == "already pushed for this ask (P3)"
                for e in log
            )

        await eventually(suppressed)
        result = await shop.answer(after[0]["ask_id"], "r2", {"option": "approve"})
        assert result["outcome"] == "accepted"
        await shop.line("t1", "reply", "Done: charge_card ran.")
        # Pushed once each; the answered ask's notification is withdrawn (issue 22), no more.
        await eventually(lambda: len(svc.apns.requests) >= 3)
        await asyncio.sleep(0.2)  # nothing more comes
        kinds = [r.json["collie"]["type"] for r in svc.apns.requests]  # type: ignore[index]
        assert sorted(asks_of(svc.apns.requests)) == sorted([*ids, after[0]["ask_id"]])
        assert sorted(kinds) == ["ask", "ask", "withdraw"]


# --- S5 through two bridges: the same pause answered on two workers at once ------------------


async def test_S5_two_phones_racing_on_two_workers_one_accepted_one_already_answered(
    rig: Rig,
) -> None:
    store = RunStore(rig.tmp / "runs.db")
    a, b = Worker(store, name="a"), Worker(store, name="b")
    async with a.serve() as url_a, b.serve() as url_b:
        bridges = [
            await start_bridge(rig, url_a, name="shop-a"),
            await start_bridge(rig, url_b, name="shop-b"),
        ]
        try:
            sources = []
            for name, bridge in zip(["shop-a", "shop-b"], bridges, strict=True):
                await bridge.thread("t1")
                sources.append(Source(name=name, socket=await rig.serve(name, bridge.agent)))
            client, gw = await rig.gateway(sources)
            await asyncio.to_thread(store.message, "t1", "charge 40 for order 4411")
            pause = pause_of(store, "t1")
            for bridge in bridges:
                await bridge.sync("t1")
            await eventually(
                lambda: all(
                    gw.agents.find_ask(n, pause["id"]) is not None for n in ("shop-a", "shop-b")
                )
            )
            payload = {"version": 1, "answer": {"option": "approve"}}
            one, two = await asyncio.gather(
                *(
                    post_json(
                        client,
                        f"/api/v1/agents/{name}/asks/{pause['id']}/answer",
                        {"request_id": f"r-{name}", **payload},
                    )
                    for name in ("shop-a", "shop-b")
                )
            )
            assert sorted([one["outcome"], two["outcome"]]) == ["accepted", "answered"]
            loser = one if one["outcome"] == "answered" else two
            assert loser["card"]["line"] == ALREADY
            assert sorted(s for _, s in a.resumes + b.resumes) == [200, 409]
            steps = await asyncio.to_thread(store.steps_after, "t1", 0)
            assert len([s for _, s in steps if s["type"] == "resumed"]) == 1
        finally:
            for name, bridge in zip(["shop-a", "shop-b"], bridges, strict=True):
                await stop_bridge(rig, bridge, name)


# --- /messages takes no request id: recorded first, never sent again by the bridge ------------


class Flaky:
    """A stalwart-style server whose ``/messages`` runs the turn and then drops the
    connection (``drop``) or never answers (``hang``); it counts the turns it ran."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.turns = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/config.json", self._config)
        app.router.add_get("/healthz", self._config)
        app.router.add_get("/threads/{id}/interrupts", self._interrupts)
        app.router.add_get("/threads/{id}/stream", self._stream)
        app.router.add_post("/threads/{id}/messages", self._messages)
        return app

    async def _config(self, request: web.Request) -> web.Response:
        return web.json_response({"name": "shop"})

    async def _interrupts(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"interrupts": []})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.Event().wait()
        return response

    async def _messages(self, request: web.Request) -> web.Response:
        self.turns += 1
        if self.mode == "hang":
            await asyncio.Event().wait()
        assert request.transport is not None
        request.transport.close()  # the turn ran; its answer is lost
        return web.json_response({})


async def serve_app(stack: AsyncExitStack, app: web.Application) -> str:
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    stack.push_async_callback(runner.cleanup)
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return f"http://127.0.0.1:{port}"


NOT_SURE = (
    "This message may not have reached shop, and it was not sent again. "
    "Send it again if it is not answered."
)


async def chat_notices(client: TestClient[Any, Any], thread: str) -> list[str]:
    chat = await get_json(client, f"/api/v1/agents/shop/conversations/{thread}")
    return [str(line["text"]) for line in chat["lines"] if line["kind"] == "notice"]


async def follow_t1(
    rig: Rig, stack: AsyncExitStack, url: str
) -> tuple[TestClient[Any, Any], Gateway]:
    """A bridge to the stalwart-style server at ``url`` following its thread ``t1``, and a
    gateway on the bridge, Ready; the bridge is stopped with ``stack``."""
    bridge = await start_bridge(rig, url)
    stack.push_async_callback(lambda: stop_bridge(rig, bridge))
    await bridge.thread("t1")
    sock = await rig.serve("shop", bridge.agent)
    client, gw = await rig.gateway([Source(name="shop", socket=sock)])
    await eventually(lambda: gw.mirrors["shop"].state is LinkState.READY)
    return client, gw


async def test_C4_S7_a_message_whose_answer_was_lost_is_never_sent_again(rig: Rig) -> None:
    flaky = Flaky("drop")
    async with AsyncExitStack() as stack:
        client, _gw = await follow_t1(rig, stack, await serve_app(stack, flaky.app()))
        body = {"request_id": "m1", "text": "charge 40 for 4411"}
        path = "/api/v1/agents/shop/conversations/t1/messages"
        assert (await post_json(client, path, body))["outcome"] == "accepted"

        async def noticed() -> bool:
            return NOT_SURE in await chat_notices(client, "t1")

        await eventually(noticed)
        # The phone retries the same request id: the first result, and no second turn.
        assert (await post_json(client, path, body))["outcome"] == "accepted"
        await asyncio.sleep(0.1)
        assert flaky.turns == 1
        assert (await chat_notices(client, "t1")).count(NOT_SURE) == 1


async def test_C4_S7_a_message_in_flight_when_the_bridge_stopped_is_not_sent_again(
    rig: Rig,
) -> None:
    flaky = Flaky("hang")
    async with AsyncExitStack() as stack:
        url = await serve_app(stack, flaky.app())
        bridge = await start_bridge(rig, url)
        await bridge.thread("t1")
        sock = await rig.serve("shop", bridge.agent)
        client, gw = await rig.gateway([Source(name="shop", socket=sock)])
        await eventually(lambda: gw.mirrors["shop"].state is LinkState.READY)
        body = {"request_id": "m1", "text": "charge 40 for 4411"}
        path = "/api/v1/agents/shop/conversations/t1/messages"
        assert (await post_json(client, path, body))["outcome"] == "accepted"
        await eventually(lambda: flaky.turns == 1)
        await stop_bridge(rig, bridge)  # the call never ended
        bridge = await start_bridge(rig, url)
        stack.push_async_callback(lambda: stop_bridge(rig, bridge))
        await rig.serve("shop", bridge.agent)

        async def noticed() -> bool:
            return NOT_SURE in await chat_notices(client, "t1")

        await eventually(noticed)
        assert flaky.turns == 1


async def test_N2_a_new_conversation_from_the_phone_is_a_new_thread(shop: Shop) -> None:
    new = await get_json(shop.client, "/api/v1/agents/shop/new")
    assert [s["label"] for s in new["starters"]] == ["New conversation"]
    started = await post_json(
        shop.client,
        "/api/v1/agents/shop/conversations",
        {"request_id": "s1", "starter": new["starters"][0]["id"]},
    )
    thread = started["conversation_id"]
    await eventually(lambda: thread in shop.gw.mirrors["shop"].conversations)
    await shop.say(thread, "refund", "m1")
    [card] = await shop.cards(thread)
    assert card["title"] == "Which order should I refund?"
    assert pause_of(shop.store, thread)["id"] == card["ask_id"]


# --- a server's odd pauses: shown whole or not answerable, never a crash (A7) -----------------


def odd_reader(text: str) -> Plan:
    """A reader whose pauses a bridge cannot fully show."""
    return Plan(
        pauses=(
            Pause(kind="escalate", question="Escalate to a manager?"),
            Pause(kind="ask", question="x" * 3000),  # over a wire Label: left out, logged
            Pause(kind="ask", question="Which order?"),
        )
    )


class Rude(Flaky):
    """A stalwart-style server of the tests' own that sends what S7's server never would:
    pauses that are not objects or have fields of the wrong types, steps that are not JSON or
    not steps, and a line over the wire's event limit that cuts the first stream; on the next
    stream (from the last step applied) one good step."""

    def __init__(self) -> None:
        super().__init__("answer")
        self.resumed_from: list[str | None] = []

    async def _interrupts(self, request: web.Request) -> web.Response:
        odd = {
            "id": "p1",
            "token": "t1",
            "kind": "confirm",
            "tool": 5,
            "arguments": "all",
            "reasons": 7,
            "irreversible": "yes",
            "question": {"not": "text"},
        }
        fine = {"id": "p2", "token": "t2", "kind": "ask", "question": "Which order?"}
        body = {"interrupts": [5, "p0", None, {"id": 7, "token": "t"}, {"id": "p9"}, odd, fine]}
        return web.json_response(body)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        self.resumed_from.append(request.headers.get("Last-Event-ID"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if len(self.resumed_from) == 1:
            steps: list[bytes] = [
                b"not json",
                b"[1, 2, 3]",
                b'{"type": 5}',
                b'{"type": "answer", "text": 7}',
                b'{"type": "rollback", "undone": "everything"}',
                b'{"type": "interrupt"}',
            ]
            for n, data in enumerate(steps, start=1):
                await response.write(b"id: %d\ndata: %s\n\n" % (n, data))
            await response.write(b"id: 7\ndata: " + b"x" * (MAX_EVENT + 1024) + b"\n\n")
        else:
            await response.write(b'id: 8\ndata: {"type": "answer", "text": "still here"}\n\n')
        await asyncio.Event().wait()
        return response


async def test_S7_a_rude_server_loses_nothing_and_the_thread_goes_on(rig: Rig) -> None:
    rude = Rude()
    async with AsyncExitStack() as stack:
        client, gw = await follow_t1(rig, stack, await serve_app(stack, rude.app()))

        async def settled() -> bool:
            chat = await get_json(client, "/api/v1/agents/shop/conversations/t1")
            replies = [line["text"] for line in chat["lines"] if line["kind"] == "reply"]
            cards = [(c["ask_id"], c["kind"]) for c in chat["cards"]["cards"]]
            return replies == ["still here"] and cards == [("p1", "permission"), ("p2", "text")]

        await eventually(settled, within=15)
        # The cut stream is read again from the last whole step, not from the start.
        assert rude.resumed_from[:2] == ["0", "6"]
        answer = {"request_id": "r1", "version": 1, "answer": {"text": "4411"}}
        result = await post_json(client, "/api/v1/agents/shop/asks/p2/answer", answer)
        # This server has no resume route: a clear refusal, never "accepted".
        assert result["outcome"] == "not_open", result
        assert gw.mirrors["shop"].state is LinkState.READY


class Bloated(Flaky):
    """A stalwart-style server of the tests' own whose first list of pauses never ends
    (megabytes of padding for as long as it is read); then a list of one pause. Its stream
    says a pause waits, on every connection."""

    def __init__(self) -> None:
        super().__init__("answer")
        self.reads = 0
        self.written = 0  # bytes of the endless answer the bridge took

    async def _interrupts(self, request: web.Request) -> web.StreamResponse:
        self.reads += 1
        if self.reads > 1:
            fine = {"id": "p2", "token": "t2", "kind": "ask", "question": "Which order?"}
            return web.json_response({"interrupts": [fine]})
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"interrupts": [], "pad": "')
        mib = b"x" * (1 << 20)
        with contextlib.suppress(ConnectionError):
            while self.written < 256 * len(mib):
                await response.write(mib)
                self.written += len(mib)
        return response

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'id: 1\ndata: {"type": "interrupt"}\n\n')
        await asyncio.Event().wait()
        return response


async def test_S7_an_answer_over_the_limit_is_not_read_on_and_nothing_is_lost(rig: Rig) -> None:
    bloated = Bloated()
    async with AsyncExitStack() as stack:
        client, _gw = await follow_t1(rig, stack, await serve_app(stack, bloated.app()))

        async def shown() -> bool:
            chat = await get_json(client, "/api/v1/agents/shop/conversations/t1")
            return [c["ask_id"] for c in chat["cards"]["cards"]] == ["p2"]

        await eventually(shown, within=15)
        # The bridge stopped reading past its limit (16 MiB, and what the sockets held).
        assert bloated.written < 64 << 20


async def test_A7_S2_an_unknown_pause_kind_is_shown_unanswerable_and_odd_data_is_contained(
    rig: Rig,
) -> None:
    store = RunStore(rig.tmp / "runs.db", reader=odd_reader)
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(Worker(store).serve())
        client, _gw = await follow_t1(rig, stack, url)
        path = "/api/v1/agents/shop/conversations/t1/messages"
        await post_json(client, path, {"request_id": "m1", "text": "go"})
        found: list[dict[str, Any]] = []

        async def two() -> bool:
            nonlocal found
            chat = await get_json(client, "/api/v1/agents/shop/conversations/t1")
            found = chat["cards"]["cards"]
            return len(found) == 2

        await eventually(two)
        odd, fine = found
        assert odd["title"] == "Escalate to a manager?"
        assert odd["answerable"] is False
        assert odd["notices"] == ["This ask cannot be answered from the phone."]
        assert (fine["kind"], fine["title"]) == ("text", "Which order?")
        answer = {"request_id": "r1", "version": 1, "answer": {"text": "4411"}}
        result = await post_json(
            client, f"/api/v1/agents/shop/asks/{fine['ask_id']}/answer", answer
        )
        assert result["outcome"] == "accepted"
        assert len(store.open_interrupts("t1")) == 2  # the escalation and the long one wait


# --- the bridge and the server as processes, as a person runs them ----------------------------


async def test_S7_the_bridge_and_the_server_run_as_processes(rig: Rig) -> None:
    async with AsyncExitStack() as stack:
        server = await stack.enter_async_context(
            Process(["-m", "fixtures.stalwart", "--db", str(rig.tmp / "runs.db"), "--port", "0"])
        )
        url = server.ready[0]
        sock = rig.tmp / "shop.sock"
        await stack.enter_async_context(
            Process(
                [
                    "-m",
                    "bridges.stalwart",
                    "--url",
                    url,
                    "--socket",
                    str(sock),
                    "--state",
                    str(rig.tmp / "shop.db"),
                ]
            )
        )
        client, gw = await rig.gateway([Source(name="shop", socket=sock)])
        await eventually(lambda: gw.mirrors["shop"].state is LinkState.READY)
        home = await get_json(client, "/api/v1/dashboard")
        assert "shop" in json.dumps(home)
        started = await post_json(
            client, "/api/v1/agents/shop/conversations", {"request_id": "s1", "starter": "new"}
        )
        thread = started["conversation_id"]
        await eventually(lambda: thread in gw.mirrors["shop"].conversations)
        path = f"/api/v1/agents/shop/conversations/{thread}/messages"
        await post_json(client, path, {"request_id": "m1", "text": "charge 40 for 4411"})
        await eventually(lambda: bool(gw.mirrors["shop"].conversations[thread].asks))
        ask = gw.mirrors["shop"].conversations[thread].asks[0]
        answer = {"request_id": "r1", "version": 1, "answer": {"option": "approve"}}
        result = await post_json(client, f"/api/v1/agents/shop/asks/{ask.id}/answer", answer)
        assert result["outcome"] == "accepted"


class Process:
    """``python ARGS`` from the repo, until it prints ``ready …``; SIGTERM on exit."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.ready: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Process:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, *self.args, cwd=REPO, stdout=asyncio.subprocess.PIPE
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 20)
        words = line.decode().split()
        assert words[:1] == ["ready"], line
        self.ready = words[1:]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.terminate()
        await asyncio.wait_for(self.proc.wait(), 10)


async def test_S2_S3_a_call_changed_while_the_bridge_was_down_asks_again(shop: Shop) -> None:
    await shop.thread("t1")
    await shop.say("t1", "charge 40 for order 4411", "m1")
    [card] = await shop.cards("t1")
    await stop_bridge(shop.rig, shop.bridge)
    new = [{"name": "amount", "value": 4000, "origin": "model"}]
    await asyncio.to_thread(shop.store.change_arguments, card["ask_id"], new)
    shop.bridge = await start_bridge(shop.rig, shop.url_a)
    await shop.rig.serve("shop", shop.bridge.agent)

    async def changed() -> bool:
        found = await shop.cards("t1", 1)
        return bool(found[0]["version"] > card["version"])

    await eventually(changed)
    [again] = await shop.cards("t1", 1)
    assert again["ask_id"] == card["ask_id"]
    assert [(a["value"], a["origin_label"]) for a in again["call"]["arguments"]] == [
        ("4000", "the assistant wrote it")
    ]
    old = await shop.answer(card["ask_id"], "r1", {"option": "approve"}, version=card["version"])
    assert old["card"]["line"] == CHANGED
    assert shop.store.open_interrupts("t1")[0]["arguments"] == new


async def test_S7_many_followed_threads_never_starve_answers(shop: Shop) -> None:
    """Each followed thread holds a stream open; past aiohttp's 100 pooled connections a turn
    and an answer must still go through."""
    for n in range(110):
        await shop.bridge.thread(f"busy-{n}")
    await shop.thread("t1")
    await shop.say("t1", "charge 40 for order 4411", "m1")
    [card] = await shop.cards("t1")
    result = await shop.answer(card["ask_id"], "r1", {"option": "approve"})
    assert result["outcome"] == "accepted"
    await shop.line("t1", "reply", "Done: charge_card ran.")


async def test_S7_steps_replayed_after_a_restart_show_once(shop: Shop) -> None:
    await shop.thread("t1")
    await shop.say("t1", "delete customer c-208", "m1")
    await shop.say("t1", "hello", "m2")
    await shop.line("t1", "reply", "Noted: hello")
    await stop_bridge(shop.rig, shop.bridge)
    # As if the bridge had stopped before it recorded how far it had read.
    ledger = Ledger(shop.rig.tmp / "shop.bridge.db.stalwart")
    ledger.move("t1", 0)
    ledger.close()
    shop.bridge = await start_bridge(shop.rig, shop.url_a)
    await shop.rig.serve("shop", shop.bridge.agent)
    await shop.say("t1", "bye", "m3")
    await shop.line("t1", "reply", "Noted: bye")
    assert await shop.lines("t1", "reply") == ["Noted: hello", "Noted: bye"]
    notices = await shop.lines("t1", "notice")
    assert len([n for n in notices if n.startswith("Not done")]) == 1


async def test_C1_S7_a_message_typed_in_another_channel_shows_ours_once(shop: Shop) -> None:
    await shop.thread("t1")
    await shop.say("t1", "hello", "m1")
    await shop.line("t1", "reply", "Noted: hello")
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{shop.url_b}/threads/t1/messages", json={"text": "hello"}) as answer,
    ):
        assert answer.status == 200

    async def both() -> bool:
        return await shop.lines("t1", "reply") == ["Noted: hello", "Noted: hello"]

    await eventually(both)
    assert await shop.lines("t1", "user") == ["hello", "hello"]  # ours once, the other once


# --- sources.json: the gateway runs the bridge itself ------------------------------------------


def test_S7_sources_stalwart_entry(rig: Rig) -> None:
    data = {
        "durable_agents": [
            {
                "name": "shop",
                "stalwart": {
                    "url": "http://127.0.0.1:8700",
                    "token_env": "SHOP_TOKEN",
                    "socket": str(rig.tmp / "shop.sock"),
                    "state": str(rig.tmp / "shop.db"),
                },
            }
        ]
    }
    [source] = parse_sources(data, "sources.json", {"SHOP_TOKEN": "t"})
    assert source.socket == rig.tmp / "shop.sock"
    assert source.bridge is not None
    argv = source.bridge.argv
    assert argv[1:5] == ("-m", "bridges.stalwart", "--url", "http://127.0.0.1:8700")
    assert argv[argv.index("--token-env") : argv.index("--token-env") + 2] == (
        "--token-env",
        "SHOP_TOKEN",
    )
    for bad, said in (
        ({"url": "ftp://x"}, "http://"),
        ({"url": "http://127.0.0.1:8700", "token_env": ""}, "name of a variable"),
        ({"url": "http://127.0.0.1:8700", "colour": 1}, "unknown key 'colour'"),
    ):
        entry = {"durable_agents": [{"name": "shop", "stalwart": bad}]}
        with pytest.raises(SourcesError, match=said):
            parse_sources(entry, "sources.json", {})
    both = {"durable_agents": [{"name": "shop", "socket": "/x", "stalwart": {"url": "http://a"}}]}
    with pytest.raises(SourcesError, match="alone"):
        parse_sources(both, "sources.json", {})


async def test_S7_the_gateway_runs_and_restarts_the_bridge_from_sources(rig: Rig) -> None:
    async with AsyncExitStack() as stack:
        server = await stack.enter_async_context(
            Process(["-m", "fixtures.stalwart", "--db", str(rig.tmp / "runs.db"), "--port", "0"])
        )
        entry = {
            "name": "shop",
            "stalwart": {
                "url": server.ready[0],
                "socket": str(rig.tmp / "shop.sock"),
                "state": str(rig.tmp / "shop.db"),
            },
        }
        sources = parse_sources({"durable_agents": [entry]}, "sources.json", {})
        client, gw = await rig.gateway(sources)
        await eventually(lambda: gw.mirrors["shop"].state is LinkState.READY, within=30)
        child = gw.supervisor.children["shop"]
        assert child.starts == 1
        assert child.process is not None
        child.process.kill()  # the bridge dies: the gateway starts it again
        await eventually(lambda: child.starts == 2, within=30)
        await eventually(lambda: gw.mirrors["shop"].state is LinkState.READY, within=30)
        started = await post_json(
            client, "/api/v1/agents/shop/conversations", {"request_id": "s1", "starter": "new"}
        )
        assert started["outcome"] == "accepted"
