"""The dispatcher: never raises into the caller, never makes it wait; and the event loop
stays responsive while many pushes go out through the real clients."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

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
    Notification,
    Outcome,
    Provider,
    PushSender,
    ServiceAccount,
)
from tests.push.conftest import KEY_ID, T0, TEAM_ID, TOPIC, apns_device, fcm_device
from tests.push.fakes import FakeApns, FakeFcm, Tls

NOTE = AskNotification(
    machine="m1", agent="desk", conversation="c1", ask="a1", pane_key="p", pane="Pane"
)


class Gate:
    """A sender that waits for a gate to open, counting how many wait at once."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.waiting = 0
        self.most_waiting = 0

    async def send(self, device: Device, note: Notification) -> Delivery:
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
    async def send(self, device: Device, note: Notification) -> Delivery:
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


def test_dispatch_outside_a_loop_does_not_raise(caplog: pytest.LogCaptureFixture) -> None:
    dispatcher = Dispatcher({}, lambda d: None)
    with caplog.at_level(logging.ERROR, logger="push.sender"):
        assert dispatcher.dispatch([apns_device()], NOTE) == 0
    assert "dispatch failed" in caplog.text


async def test_the_loop_never_stalls_50ms_while_sending_many_pushes(
    apns_server: FakeApns,
    sandbox_server: FakeApns,
    tls: Tls,
    apns_pem: bytes,
    content: Content,
    fcm_server: tuple[FakeFcm, TestServer],
    service_account: ServiceAccount,
) -> None:
    fake_fcm, fcm_http = fcm_server
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
    dispatcher = Dispatcher({Provider.APNS: apns, Provider.FCM: fcm}, seen.append)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    gaps: list[float] = []

    async def ticker() -> None:
        last = loop.time()
        while not done.is_set():
            await asyncio.sleep(0.002)
            now = loop.time()
            gaps.append(now - last)
            last = now

    # A full collection of the heap the earlier tests built takes ~100 ms and is no part of
    # sending: collect and freeze it first, as a server does after start-up.
    gc.collect()
    gc.freeze()
    try:
        longest_dispatch, stall = await _send_many(dispatcher, ticker, done, gaps, count=400)
    finally:
        gc.unfreeze()
        await dispatcher.aclose()
        await apns.aclose()
        await fcm.aclose()
    assert len(seen) == 400
    assert all(d.ok for d in seen), {d.reason for d in seen}
    assert len(apns_server.requests) == 200
    assert len(fake_fcm.requests) == 200
    assert apns.tokens_minted == 1
    assert fcm.tokens_fetched == 1
    assert stall < 0.050, f"the loop stalled {stall * 1000:.1f} ms"
    assert longest_dispatch < 0.010


async def _send_many(
    dispatcher: Dispatcher,
    ticker: Callable[[], Coroutine[Any, Any, None]],
    done: asyncio.Event,
    gaps: list[float],
    *,
    count: int,
) -> tuple[float, float]:
    """Dispatch ``count`` pushes while ``ticker`` runs; the longest ``dispatch`` call and
    the loop's largest stall."""
    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    longest_dispatch = 0.0
    for i in range(count):
        device = apns_device(f"i{i}") if i % 2 else fcm_device(f"f{i}")
        note = AskNotification(
            machine="m1",
            agent="desk",
            conversation=f"c{i}",
            ask=f"a{i}",
            pane_key=f"p{i}",
            pane=f"Pane {i}",
            title="Run the tests?",
            line="pytest -q " + "x" * 100,
            deadline=T0 + 10**9,
        )
        started = time.perf_counter()
        dispatcher.dispatch([device], note)
        longest_dispatch = max(longest_dispatch, time.perf_counter() - started)
        if i % 50 == 0:
            await asyncio.sleep(0)
    await dispatcher.drain()
    done.set()
    await ticking
    return longest_dispatch, max(gaps) - 0.002
