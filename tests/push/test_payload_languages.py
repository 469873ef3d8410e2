"""A push is worded in the language of the device it goes to (spec P1, P2; issue 26)."""

from __future__ import annotations

import dataclasses
import json

from collie_gateway.strings import Catalogues
from push import AskNotification, Content, ManyAsksNotification, apns_request, fcm_message
from tests.push.conftest import T0, apns_device, fcm_device

CATS = Catalogues.load()
CONTENT = Content(strings=CATS.default, languages={lang: CATS.get(lang) for lang in CATS.languages})
ASK = AskNotification(
    machine="m1",
    agent="desk",
    conversation="c1",
    ask="a1",
    pane_key="m1/desk/c1",
    pane="Refactor parser",
    title="Run the tests?",
    line="pytest -q",
)


def _apns_alert(lang: str | None, note: AskNotification | ManyAsksNotification) -> object:
    device = dataclasses.replace(apns_device(), lang=lang)
    return json.loads(apns_request(device, note, topic="t", content=CONTENT, now=T0).body)["aps"][
        "alert"
    ]


def test_P2_one_ask_pushed_to_an_italian_and_an_english_device() -> None:
    # the agent's own words (title, line, pane) pass untouched; only Collie's are translated
    assert _apns_alert("it", ASK) == {
        "title": "Autorizzazione richiesta in Refactor parser",
        "subtitle": "Run the tests?",
        "body": "pytest -q",
    }
    assert _apns_alert("en", ASK) == {
        "title": "Permission needed in Refactor parser",
        "subtitle": "Run the tests?",
        "body": "pytest -q",
    }
    fcm_it = fcm_message(
        dataclasses.replace(fcm_device(), lang="pt-BR"), ASK, content=CONTENT, now=T0
    )
    assert fcm_it["message"]["notification"] == {  # type: ignore[index]
        "title": "Permissão necessária em Refactor parser",
        "body": "Run the tests?\npytest -q",
    }


def test_P2_a_device_without_a_language_or_with_an_unknown_one_reads_the_default() -> None:
    english = {
        "title": "Permission needed in Refactor parser",
        "subtitle": "Run the tests?",
        "body": "pytest -q",
    }
    assert _apns_alert(None, ASK) == english
    assert _apns_alert("fr", ASK) == english
    italian_default = Content(strings=CATS.get("it"), languages=CONTENT.languages)
    device = apns_device()
    body = apns_request(device, ASK, topic="t", content=italian_default, now=T0).body
    assert (
        json.loads(body)["aps"]["alert"]["title"] == "Autorizzazione richiesta in Refactor parser"
    )


def test_P1_many_asks_and_the_private_title_in_the_devices_language() -> None:
    many = ManyAsksNotification(machine="m1", agent="desk", host="studio")
    assert _apns_alert("it", many) == {
        "title": "Un agente durevole su studio sta ponendo molte domande"
    }
    private = dataclasses.replace(apns_device("d", key=b"\x04" * 32), lang="pt-BR")
    body = apns_request(private, ASK, topic="t", content=CONTENT, now=T0).body
    assert json.loads(body)["aps"]["alert"] == {
        "title": "Um agente durável precisa da sua resposta"
    }
