"""The phone's live stream: event ids, the ring, ``Last-Event-ID`` replay and reset."""

from __future__ import annotations

import asyncio
import json

import pytest

from collie_gateway.services.phonebus import PhoneBus, PhoneEvent


def publish(bus: PhoneBus, n: int) -> list[PhoneEvent]:
    return [bus.publish("tick", {"n": i}) for i in range(1, n + 1)]


def test_ids_are_boot_and_sequence() -> None:
    bus = PhoneBus()
    assert bus.last_id == f"{bus.boot}-0"
    first, second = publish(bus, 2)
    assert (first.id, second.id) == (f"{bus.boot}-1", f"{bus.boot}-2")
    assert bus.last_id == second.id
    assert (first.type, json.loads(first.data)) == ("tick", {"n": 1})


def test_each_gateway_start_is_another_boot() -> None:
    assert PhoneBus().boot != PhoneBus().boot


def test_fresh_phone_gets_nothing_to_replay() -> None:
    bus = PhoneBus()
    publish(bus, 3)
    sub, replay = bus.subscribe(None)
    assert replay == []
    assert sub.pending == 0
    assert bus.subscribers == 1


def test_replay_after_an_id() -> None:
    bus = PhoneBus()
    events = publish(bus, 5)
    assert bus.replay_after(events[1].id) == events[2:]


def test_replay_after_the_exact_last_id_is_empty() -> None:
    bus = PhoneBus()
    events = publish(bus, 3)
    assert bus.replay_after(events[-1].id) == []


def test_replay_after_zero_before_any_event() -> None:
    bus = PhoneBus()
    assert bus.replay_after(bus.last_id) == []
    later = publish(bus, 2)
    assert bus.replay_after(f"{bus.boot}-0") == later


def test_other_boot_resets() -> None:
    bus = PhoneBus()
    publish(bus, 3)
    before_restart = PhoneBus()
    assert bus.replay_after(f"{before_restart.boot}-2") is None


def test_future_id_resets() -> None:
    bus = PhoneBus()
    publish(bus, 3)
    assert bus.replay_after(f"{bus.boot}-4") is None


def test_too_old_resets() -> None:
    bus = PhoneBus(ring=3)
    events = publish(bus, 6)  # the ring keeps 4, 5, 6
    assert bus.replay_after(events[0].id) is None  # event 2 is gone
    assert bus.replay_after(events[1].id) is None  # event 3 is gone
    assert bus.replay_after(events[2].id) == events[3:]  # 4, 5, 6 are all kept
    assert bus.replay_after(events[4].id) == events[5:]


@pytest.mark.parametrize(
    "last_id",
    [
        "",
        "garbage",
        "-1",
        "{boot}",
        "{boot}-",
        "{boot}-x",
        "{boot}--1",
        "{boot}-1.0",
        "{boot}-\u0661",
        "{boot}-1-2",
    ],
)
def test_malformed_id_resets(last_id: str) -> None:
    bus = PhoneBus()
    publish(bus, 2)
    assert bus.replay_after(last_id.format(boot=bus.boot)) is None


def test_subscribe_returns_the_replay_or_none() -> None:
    bus = PhoneBus()
    events = publish(bus, 3)
    _, replay = bus.subscribe(events[0].id)
    assert replay == events[1:]
    _, reset = bus.subscribe("elsewhere-1")
    assert reset is None
    assert bus.subscribers == 2


def test_subscribers_get_new_events_and_leave() -> None:
    bus = PhoneBus()
    one, _ = bus.subscribe(None)
    two, _ = bus.subscribe(None)
    event = bus.publish("list.row", {"agent": "desk"})
    assert one.take(10) == [event.frame]
    assert two.take(10) == [event.frame]
    one.close()
    one.close()  # closing twice is harmless
    assert bus.subscribers == 1
    bus.publish("list.row", {})
    assert one.pending == 0
    assert two.pending == 1


def test_a_phone_too_far_behind_overflows() -> None:
    bus = PhoneBus(ring=2)
    sub, _ = bus.subscribe(None)
    events = publish(bus, 3)
    assert sub.overflowed
    assert sub.take(10) == [e.frame for e in events[:2]]
    assert sub.pending == 0


def test_a_reopened_bus_takes_streams_again_and_replays_the_same_boot() -> None:
    bus = PhoneBus()
    first = bus.publish("dashboard.row", {"n": 1})
    bus.close()  # the HTTP server stopped: every stream ends, later ones too
    ended, _ = bus.subscribe(first.id)
    assert ended.ended
    bus.publish("dashboard.row", {"n": 2})
    bus.reopen()  # served again by the same gateway
    sub, replay = bus.subscribe(first.id)
    assert not sub.ended
    assert replay is not None
    assert [json.loads(e.data)["n"] for e in replay] == [2]


def test_closing_ends_every_stream_after_what_it_queued() -> None:
    # Issue 10: a stopping gateway ends each live stream; events queued first still go out.
    bus = PhoneBus()
    sub, _ = bus.subscribe(None)
    (event,) = publish(bus, 1)
    bus.close()
    assert sub.ended
    assert sub.take(10) == [event.frame]
    assert sub.pending == 0
    assert sub.ready.is_set()  # the end still wakes its reader
    late, _ = bus.subscribe(None)  # a stream opened while stopping ends at once
    assert late.ended
    assert late.ready.is_set()


async def test_streams_are_woken_together_at_most_once_a_frame() -> None:
    # One clock for every phone — the first event after a quiet frame wakes the streams at
    # once (once what is queued on the loop ran: what the same turn publishes goes with it),
    # later ones wait for the frame's end and go out together.
    loop = asyncio.get_running_loop()
    bus = PhoneBus(frame=0.2)
    one, _ = bus.subscribe(None)
    two, _ = bus.subscribe(None)
    first = bus.publish("chat.delta", {"text": "a"})
    loop.call_soon(bus.publish, "chat.row", {"text": "a"})  # before the streams read
    await asyncio.sleep(0)
    assert one.ready.is_set()
    assert two.ready.is_set()
    row = bus.replay_after(first.id)
    assert row is not None
    assert one.take(10) == two.take(10) == [first.frame, row[0].frame]
    woken = loop.time()
    later = [bus.publish("chat.delta", {"text": t}) for t in "bc"]
    assert not one.ready.is_set()
    assert not two.ready.is_set()
    await asyncio.wait_for(asyncio.gather(one.ready.wait(), two.ready.wait()), 2.0)
    assert loop.time() - woken >= 0.19
    assert one.take(10) == two.take(10) == [e.frame for e in later]


async def test_an_ended_bus_wakes_its_streams_at_once() -> None:
    bus = PhoneBus(frame=10.0)
    sub, _ = bus.subscribe(None)
    bus.publish("chat.delta", {"text": "a"})
    sub.take(10)
    bus.publish("chat.delta", {"text": "b"})  # inside the frame: waits for its end
    assert not sub.ready.is_set()
    bus.close()
    assert sub.ready.is_set()
    assert len(sub.take(10)) == 1
