"""The dispatcher: never raises into the caller, never makes it wait; and pushes held by one
service hold up nothing else (the loop's stalls are measured by bench/push_loop_bench.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp.test_utils import TestServer

from push import (
    ApnsClient,
    AskNotification,
    Content,
    Delivery,
    Device,
    Dispatcher,
    FcmClient,
    Message,
    Outcome,
    Provider,
    PushSender,
    ServiceAccount,
)
from push.sender import MAX_IN_FLIGHT
from tests.lost_cancel import Pool
from tests.push.conftest import KEY_ID, TEAM_ID, TOPIC, apns_device, fcm_device
from tests.push.fakes import FakeApns, FakeFcm, Tls, ask_note
from tests.timing import WAIT
from tests.wire.conftest import eventually

NOTE = AskNotification(
    machine="m1", agent="desk", conversation="c1", ask="a1", pane_key="p", pane="Pane"
)


class Gate:
    """A sender that waits for a gate to open, counting how many wait at once."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.waiting = 0
        self.most_waiting = 0

    async def send(self, device: Device, note: Message) -> Delivery:
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            await self.open.wait()
        finally:
            self.waiting -= 1
        return Delivery.of(device, Outcome.SENT, provider_id="id-" + device.id)

    async def aclose(self) -> None:
        return None


class Broken:
    async def send(self, device: Device, note: Message) -> Delivery:
        raise RuntimeError("bug")

    async def aclose(self) -> None:
        return None


def test_senders_fit_the_interface() -> None:
    senders: list[type[PushSender]] = [ApnsClient, FcmClient, Gate, Broken]
    assert senders


async def test_dispatch_returns_before_the_push_is_sent() -> None:
    gate, seen = Gate(), list[Delivery]()
    dispatcher = Dispatcher({Provider.APNS: gate}, seen.append)
    assert dispatcher.dispatch([apns_device("a"), apns_device("b")], NOTE) == 2
    await asyncio.sleep(0)
    assert seen == []
    assert dispatcher.pending == 2
    gate.open.set()
    await dispatcher.drain()
    assert sorted(d.provider_id or "" for d in seen) == ["id-a", "id-b"]
    assert dispatcher.pending == 0


async def test_an_async_callback_is_awaited() -> None:
    gate, seen = Gate(), list[Delivery]()
    gate.open.set()

    async def record(delivery: Delivery) -> None:
        await asyncio.sleep(0)
        seen.append(delivery)

    dispatcher = Dispatcher({Provider.APNS: gate}, record)
    dispatcher.dispatch([apns_device()], NOTE)
    await dispatcher.drain()
    assert [d.outcome for d in seen] == [Outcome.SENT]


async def test_a_sender_that_raises_is_a_failed_delivery(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[Delivery] = []
    dispatcher = Dispatcher({Provider.APNS: Broken()}, seen.append)
    with caplog.at_level(logging.ERROR, logger="push.sender"):
        dispatcher.dispatch([apns_device()], NOTE)
        await dispatcher.drain()
    assert [(d.outcome, d.reason) for d in seen] == [(Outcome.FAILED, "internal: RuntimeError")]
    assert "push sender raised" in caplog.text


async def test_a_callback_that_raises_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    gate = Gate()
    gate.open.set()

    def explode(delivery: Delivery) -> None:
        raise ValueError("store down")

    dispatcher = Dispatcher({Provider.APNS: gate}, explode)
    with caplog.at_level(logging.ERROR, logger="push.sender"):
        dispatcher.dispatch([apns_device()], NOTE)
        await dispatcher.drain()
    assert "on_delivery raised" in caplog.text


async def test_no_sender_for_the_provider() -> None:
    seen: list[Delivery] = []
    dispatcher = Dispatcher({Provider.APNS: Gate()}, seen.append)
    dispatcher.dispatch([fcm_device()], NOTE)
    await dispatcher.drain()
    assert seen[0].outcome is Outcome.FAILED
    assert seen[0].reason == "no sender for fcm"


async def test_a_backstop_deadline_and_a_bound_on_pushes_in_flight() -> None:
    gate, seen = Gate(), list[Delivery]()
    dispatcher = Dispatcher({Provider.APNS: gate}, seen.append, max_in_flight=2, deadline=0.05)
    dispatcher.dispatch([apns_device(str(i)) for i in range(5)], NOTE)
    await dispatcher.drain()
    assert gate.most_waiting == 2
    assert [d.reason for d in seen] == ["deadline"] * 5


async def test_aclose_cancels_what_is_late_and_reports_it() -> None:
    seen: list[Delivery] = []
    dispatcher = Dispatcher({Provider.APNS: Gate()}, seen.append)
    dispatcher.dispatch([apns_device()], NOTE)
    await asyncio.sleep(0)
    await dispatcher.aclose(grace=0.01)
    assert [d.reason for d in seen] == ["cancelled"]
    assert dispatcher.pending == 0
    await dispatcher.aclose()


async def test_aclose_ends_though_a_send_lost_the_cancel() -> None:
    """A sender that retries over a connection pool, whose wait loses the first cancel (Python
    3.11's ``asyncio.wait_for``): cancelled again, it is reported cancelled."""
    pool = Pool()

    class Pooled:
        async def send(self, device: Device, note: Message) -> Delivery:
            await pool.serve()  # each try waits for a connection; only a cancel ends it
            raise AssertionError("a pool's loop ends by a cancel only")

        async def aclose(self) -> None:
            return None

    seen: list[Delivery] = []
    dispatcher = Dispatcher({Provider.APNS: Pooled()}, seen.append, deadline=3600)
    dispatcher.dispatch([apns_device()], NOTE)
    await asyncio.wait_for(pool.waiting.wait(), WAIT)
    pool.arm()  # the connection comes with the close's cancel
    await asyncio.wait_for(dispatcher.aclose(grace=0.01), WAIT)
    assert (pool.lost, [d.reason for d in seen]) == (1, ["cancelled"])


def test_dispatch_outside_a_loop_does_not_raise(caplog: pytest.LogCaptureFixture) -> None:
    dispatcher = Dispatcher({}, lambda d: None)
    with caplog.at_level(logging.ERROR, logger="push.sender"):
        assert dispatcher.dispatch([apns_device()], NOTE) == 0
    assert "dispatch failed" in caplog.text


async def test_the_caller_never_waits_and_held_sends_hold_up_nothing_else(
    apns_server: FakeApns,
    sandbox_server: FakeApns,
    tls: Tls,
    apns_pem: bytes,
    content: Content,
    fcm_server: tuple[FakeFcm, TestServer],
    service_account: ServiceAccount,
) -> None:
    """What bench/push_loop_bench.py measures (the loop's stalls), as behaviour through the
    real clients: ``dispatch`` signs, fetches and sends nothing itself, and while FCM holds
    its pushes the APNs ones go out and the loop serves the test."""
    fake_fcm, fcm_http = fcm_server
    fake_fcm.hold = asyncio.Event()
    apns = ApnsClient(
        team_id=TEAM_ID,
        key_id=KEY_ID,
        signing_key=apns_pem,
        topic=TOPIC,
        content=content,
        production_url=apns_server.url,
        sandbox_url=sandbox_server.url,
        verify=tls.client,
    )
    fcm = FcmClient(service_account, content=content, base_url=str(fcm_http.make_url("/")))
    seen: list[Delivery] = []
    all_apns = asyncio.Event()
    held, sent_by_apns = MAX_IN_FLIGHT // 2, 200  # the held ones leave slots for the rest

    def record(delivery: Delivery) -> None:
        seen.append(delivery)
        if sum(d.device_id.startswith("i") for d in seen) == sent_by_apns:
            all_apns.set()

    dispatcher = Dispatcher({Provider.APNS: apns, Provider.FCM: fcm}, record)
    try:
        for i in range(held):
            assert dispatcher.dispatch([fcm_device(f"f{i}")], ask_note(i)) == 1
        for i in range(sent_by_apns):
            assert dispatcher.dispatch([apns_device(f"i{i}")], ask_note(i)) == 1
        # Nothing was signed, fetched or sent inside dispatch: the caller never waits on it.
        assert (apns.tokens_minted, fake_fcm.token_calls, len(apns_server.requests)) == (0, 0, 0)
        async with asyncio.timeout(60):  # a backstop for a broken build, not a measure
            await all_apns.wait()
        await eventually(lambda: fake_fcm.held == held, within=60)
        assert not [d for d in seen if d.device_id.startswith("f")]  # still held
        fake_fcm.hold.set()
        await dispatcher.drain()
    finally:
        await dispatcher.aclose()
        await apns.aclose()
        await fcm.aclose()
    assert len(seen) == held + sent_by_apns
    assert all(d.ok for d in seen), {d.reason for d in seen}
    assert len(apns_server.requests) == sent_by_apns
    assert len(fake_fcm.requests) == held
    assert apns.tokens_minted == 1  # signed once, not once a push
    assert fcm.tokens_fetched == 1
