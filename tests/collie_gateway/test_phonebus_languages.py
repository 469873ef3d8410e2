"""The live stream in each phone's language (issue 26): an event is worded once per language
in use, every phone of that language gets the same frame, and the numbering is shared."""

from __future__ import annotations

import json
from collections.abc import Callable

from collie_gateway.services.phonebus import PhoneBus


def _data(frame: bytes) -> object:
    return json.loads(frame.split(b"data: ", 1)[1])


def test_an_event_is_worded_once_per_language_in_use() -> None:
    bus = PhoneBus()
    english, _ = bus.subscribe(None)
    italian, _ = bus.subscribe(None, "it")
    also_italian, _ = bus.subscribe(None, "it")
    asked: list[str] = []

    def localize(lang: str) -> object:
        asked.append(lang)
        return {"title": {"it": "Agenti durevoli"}[lang]}

    event = bus.publish("dashboard.row", {"title": "Durable agents"}, localize)
    assert asked == ["it"]  # once, for two Italian phones; never for the default language
    [en_frame] = english.take(10)
    [it_frame] = italian.take(10)
    assert also_italian.take(10) == [it_frame]
    assert _data(en_frame) == {"title": "Durable agents"}
    assert _data(it_frame) == {"title": "Agenti durevoli"}
    assert en_frame.startswith(b"id: %s\n" % event.id.encode())
    assert it_frame.startswith(b"id: %s\n" % event.id.encode())


def _recorder(calls: list[str]) -> Callable[[str], object]:
    def localize(lang: str) -> object:
        calls.append(lang)
        return {}

    return localize


def test_no_phone_in_another_language_no_wording() -> None:
    bus = PhoneBus()
    bus.subscribe(None)
    calls: list[str] = []
    bus.publish("list.row", {"row": 1}, _recorder(calls))
    assert calls == []


def test_a_closed_stream_stops_its_languages_wording() -> None:
    bus = PhoneBus()
    sub, _ = bus.subscribe(None, "pt-BR")
    sub.close()
    sub.close()  # twice: nothing more
    calls: list[str] = []
    bus.publish("list.row", {"row": 1}, _recorder(calls))
    assert calls == []
    assert bus.subscribers == 0


def test_replay_in_a_language_and_the_default_for_one_not_worded() -> None:
    bus = PhoneBus()
    first, _ = bus.subscribe(None, "it")
    start = bus.last_id
    bus.publish("chat.note", {"text": "stopped"}, lambda lang: {"text": "interrotto"})
    first.close()
    again, replay = bus.subscribe(start, "it")
    assert replay is not None
    assert [_data(e.frame_in(again.lang)) for e in replay] == [{"text": "interrotto"}]
    # a language no phone used when it was published reads the default language's words
    assert [_data(e.frame_in("pt-BR")) for e in replay] == [{"text": "stopped"}]
