"""Each phone request answered in its language (issue 26), against an SDK agent on a real
socket and a real gateway: the same dashboard, list and chat read with ``Accept-Language: it``,
``pt-BR``, ``fr`` (falls back to English) and none. The agent's own words pass untouched.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from collie_gateway.core.mirror import LinkState
from collie_gateway.gateway import Gateway
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import Rig, eventually
from tests.collie_gateway.test_phone_stream import Phone
from wire.agent import Option, ToolRef

PERMISSION = [
    Option(id="allow", label="Yes, run it", role="allow"),
    Option(id="always", label="Always for ls", role="always"),
    Option(id="deny", label="No", role="deny"),
]
TOOL = ToolRef(call_id="t1", name="shell")

# What each language reads on the same screens (the catalogue files' words).
WORDS: dict[str, dict[str, Any]] = {
    "en": {
        "section": "Durable agents",
        "badge": "Experimental",
        "line2": "desk, local",
        "caption": "Needs your answer · desk",
        "buttons": ["Allow", "Always allow", "Deny"],
        "deadline": "Expires in 4 min",
        "bar": ["Steer", "Stop"],
        "untitled": "Untitled conversation",
        "send": "Send",
        "always": '"Always allow" needs a second tap.',
        "misfit": "Unknown option 'maybe'.",
        "expired": "Timed out before an answer.",
        "receipt": "Timed out before an answer: Name the note",
    },
    "it": {
        "section": "Agenti durevoli",
        "badge": "Sperimentale",
        "line2": "desk, locale",
        "caption": "Risposta richiesta · desk",
        "buttons": ["Consenti", "Consenti sempre", "Nega"],
        "deadline": "Scade tra 4 min",
        "bar": ["Indirizza", "Interrompi"],
        "untitled": "Conversazione senza titolo",
        "send": "Invia",
        "always": '"Consenti sempre" richiede un secondo tocco.',
        "misfit": "Opzione sconosciuta 'maybe'.",
        "expired": "Tempo scaduto prima di una risposta.",
        "receipt": "Tempo scaduto prima di una risposta: Name the note",
    },
    "pt-BR": {
        "section": "Agentes duráveis",
        "badge": "Experimental",
        "line2": "desk, local",
        "caption": "Precisa da sua resposta · desk",
        "buttons": ["Permitir", "Sempre permitir", "Negar"],
        "deadline": "Expira em 4 min",
        "bar": ["Direcionar", "Parar"],
        "untitled": "Conversa sem título",
        "send": "Enviar",
        "always": '"Sempre permitir" precisa de um segundo toque.',
        "misfit": "Opção desconhecida 'maybe'.",
        "expired": "O tempo acabou antes de uma resposta.",
        "receipt": "O tempo acabou antes de uma resposta: Name the note",
    },
}
HEADERS: list[tuple[str | None, str]] = [
    ("it-IT,it;q=0.9,en;q=0.8", "it"),
    ("pt-BR", "pt-BR"),
    ("fr-FR,fr;q=0.9", "en"),
    (None, "en"),
]


def _headers(accept: str | None) -> dict[str, str]:
    return {} if accept is None else {"Accept-Language": accept}


async def _get(client: TestClient[Any, Any], path: str, accept: str | None) -> Any:
    resp = await client.get(path, headers=_headers(accept))
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def _post(
    client: TestClient[Any, Any], path: str, body: Any, accept: str | None, status: int = 200
) -> Any:
    resp = await client.post(path, json=body, headers=_headers(accept))
    assert resp.status == status, await resp.text()
    return await resp.json()


async def _desk(rig: Rig) -> tuple[TestClient[Any, Any], Gateway, Any]:
    agent = rig.agent(
        "desk", runtime="desk", features=["history", "steer", "stop"], expiry_interval=3600.0
    )
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Tidy up")
    await agent.open_conversation("c2")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    deadline = rig.clock() + timedelta(minutes=4, seconds=30)
    await conv.ask(
        id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION,
        deadline=deadline,
    )  # fmt: skip
    await eventually(lambda: gw.agents.find_ask("desk", "p") is not None)
    return client, gw, conv


def _section(dash: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in dash["sections"] if s["kind"] == "durable_agents")


async def test_D_L_A_C_the_same_screens_in_each_language(rig: Rig) -> None:
    client, _gw, _conv = await _desk(rig)
    for accept, lang in HEADERS:
        words = WORDS[lang]
        dash = await _get(client, "/api/v1/dashboard", accept)
        section = _section(dash)
        assert section["title"] == words["section"], accept
        row = section["rows"][0]
        assert (row["line1"], row["badge"], row["line2"]) == (
            "desk",
            words["badge"],
            words["line2"],
        )
        listing = await _get(client, "/api/v1/agents/desk/conversations", accept)
        titles = {r["conversation_id"]: r["title"] for r in listing["rows"]}
        assert titles == {"c1": "Tidy up", "c2": words["untitled"]}  # the agent's title untouched
        chat = await _get(client, "/api/v1/agents/desk/conversations/c1", accept)
        card = chat["cards"]["cards"][0]
        assert card["caption"] == words["caption"]
        assert [b["label"] for b in card["body"]["buttons"]] == words["buttons"]
        assert [b["secondary"] for b in card["body"]["buttons"]] == [
            "Yes, run it",
            "Always for ls",
            "No",
        ]
        assert card["title"] == "Run ls?"
        assert card["deadline_label"] == words["deadline"]
        assert [c["label"] for c in chat["bar"]["controls"]] == words["bar"]
        strings = await _get(client, "/api/v1/strings", accept)
        assert strings["strings"]["send"] == words["send"]
        resp = await client.get("/api/v1/dashboard", headers=_headers(accept))
        assert resp.headers["Content-Language"] == lang
        assert "Accept-Language" in resp.headers["Vary"]


async def test_lang_query_when_no_header_names_a_known_language(rig: Rig) -> None:
    client, _gw, _conv = await _desk(rig)
    dash = await _get(client, "/api/v1/dashboard?lang=it", None)
    assert _section(dash)["title"] == "Agenti durevoli"
    dash = await _get(client, "/api/v1/dashboard?lang=pt", "fr")
    assert _section(dash)["title"] == "Agentes duráveis"
    dash = await _get(client, "/api/v1/dashboard?lang=it", "en-GB")
    assert _section(dash)["title"] == "Durable agents"  # the header comes first


@pytest.mark.parametrize(("accept", "lang"), HEADERS)
async def test_T1_A5_wire_8_answers_and_error_bodies_in_the_requests_language(
    rig: Rig, accept: str | None, lang: str
) -> None:
    client, _gw, _conv = await _desk(rig)
    words = WORDS[lang]
    path = "/api/v1/agents/desk/asks/p/answer"
    refused = await _post(
        client, path, {"request_id": "r1", "version": 1, "answer": {"option": "always"}}, accept
    )
    assert (refused["outcome"], refused["card"]["line"]) == ("refused", words["always"])
    misfit = await _post(
        client,
        path,
        {"request_id": "r2", "version": 1, "answer": {"option": "maybe"}},
        accept,
        status=400,
    )
    assert misfit == {"error": "bad_request", "message": words["misfit"]}
    rig.clock.advance(minutes=5)
    late = await _post(
        client, path, {"request_id": "r3", "version": 1, "answer": {"option": "allow"}}, accept
    )
    assert (late["outcome"], late["card"]["line"]) == ("expired", words["expired"])


async def test_R3_a_receipt_reads_in_each_language(rig: Rig) -> None:
    client, _gw, conv = await _desk(rig)
    await _get(client, "/api/v1/agents/desk/conversations/c1", None)  # the chat is open
    soon = rig.clock() + timedelta(seconds=1)
    await conv.ask(id="e", kind="text", title="Name the note", deadline=soon)
    rig.clock.advance(seconds=2)
    await rig.agents["desk"].expire_due()

    async def receipts(accept: str | None) -> list[str]:
        chat = await _get(client, "/api/v1/agents/desk/conversations/c1", accept)
        return [line["text"] for line in chat["lines"] if line["kind"] == "receipt"]

    async def one() -> bool:
        return len(await receipts(None)) == 1

    await eventually(one)
    for accept, lang in HEADERS:
        assert await receipts(accept) == [WORDS[lang]["receipt"]], accept


async def test_R5_version_message_with_its_numbers_in_italian(rig: Rig) -> None:
    agent = rig.agent("old", runtime="old", wire_version=2)
    sock = await rig.serve("old")
    client, gw = await rig.gateway([Source(name="old", socket=sock)])
    await eventually(lambda: gw.mirrors["old"].state is LinkState.VERSION_MISMATCH)
    del agent
    home = await _get(client, "/api/v1/agents/old", "it")
    warning = (
        "Il durable agent utilizza il protocollo wire v2, questa versione di Collie utilizza "
        "la v1. Aggiornare Collie o l'SDK dell'agente."
    )
    assert home["warning"] == warning
    listing = await _get(client, "/api/v1/agents/old/conversations", "it")
    assert listing["footer"]["text"] == warning
    dash = await _get(client, "/api/v1/dashboard", "it")
    assert _section(dash)["rows"][0]["right"] == {"label": "Versione non compatibile"}


async def test_web_page_in_the_requests_language(rig: Rig) -> None:
    client, _gw, _conv = await _desk(rig)
    for accept, lang in HEADERS:
        resp = await client.get("/", headers=_headers(accept))
        page = await resp.text()
        assert f'<html lang="{lang}">' in page
        assert ('"send":"' + WORDS[lang]["send"] + '"') in page.replace(": ", ":")
    italian = await (await client.get("/", headers={"Accept-Language": "it"})).text()
    assert 'id="collie-plurals"' in italian
    assert '"web_count_open":{"one":"{n} aperta","other":"{n} aperte"}' in italian.replace(
        ", ", ","
    ).replace(": ", ":")


async def _phone(
    client: TestClient[Any, Any], accept: str | None, last: str | None = None
) -> Phone:
    headers = _headers(accept)
    if last is not None:
        headers["Last-Event-ID"] = last
    resp = await client.get("/api/v1/events", headers=headers)
    assert resp.status == 200
    phone = Phone(resp)
    await eventually(lambda: phone.hello is not None)
    return phone


async def test_live_stream_events_in_each_phones_language(rig: Rig) -> None:
    client, gw, conv = await _desk(rig)
    await _get(client, "/api/v1/agents/desk/conversations/c1", None)  # the chat is live
    start = gw.bus.last_id
    phones = {lang: await _phone(client, accept) for accept, lang in HEADERS[:3]}
    try:
        await conv.ask(id="q", kind="permission", title="Run rm?", tool=TOOL, options=PERMISSION)
        other = await rig.agents["desk"].conversation("c2")
        assert other is not None
        await other.ask(id="r", kind="text", title="Name?")  # a second waiting conversation

        def arrived() -> bool:
            return all(p.of("chat.changed") and p.of("dashboard.row") for p in phones.values())

        await eventually(arrived)
        ids = {lang: [e.id for e in p.events] for lang, p in phones.items()}
        assert ids["it"] == ids["en"] == ids["pt-BR"]  # one numbering for every language
        for lang, phone in phones.items():
            words = WORDS[lang]
            cards = phone.of("chat.changed")[-1]["cards"]["cards"]
            assert [c["caption"] for c in cards] == [words["caption"]] * 2
            assert cards[1]["title"] == "Run rm?"
            assert phone.of("dashboard.row")[-1]["badge"] == words["badge"]
        # a phone that comes back in Italian is replayed the same events, in Italian
        again = await _phone(client, "it", last=start)
        try:
            await eventually(lambda: len(again.events) >= len(phones["it"].events))
            assert [(e.id, e.data) for e in again.events] == [
                (e.id, e.data) for e in phones["it"].events
            ]
        finally:
            await again.close()
    finally:
        for phone in phones.values():
            await phone.close()


async def test_V1_R5_a_command_to_a_wire2_agent_is_refused_in_the_phones_language(
    rig: Rig,
) -> None:
    agent = rig.agent("old", runtime="old", wire_version=2)
    sock = await rig.serve("old")
    client, gw = await rig.gateway([Source(name="old", socket=sock)])
    await eventually(lambda: gw.mirrors["old"].state is LinkState.VERSION_MISMATCH)
    del agent
    path = "/api/v1/agents/old/conversations/c1/messages"
    said = {}
    for accept in ("it", "pt-BR", None):
        body = {"request_id": f"m-{accept}", "text": "ciao"}
        said[accept] = await _post(client, path, body, accept)
    assert said["it"]["outcome"] == "refused"
    assert said["it"]["message"].startswith("Il durable agent utilizza il protocollo wire v2")
    assert said["pt-BR"]["message"] != said["it"]["message"]
    assert said[None]["message"].startswith("Program speaks wire v2, this Collie speaks v1.")
