"""A push worded in the language of the device it goes to (spec P2, S6; issue 26): real
agents, the gateway's real HTTP API, the real APNs and FCM clients against the fakes."""

from __future__ import annotations

from typing import Any

from collie_gateway.strings import Catalogues
from tests.collie_gateway.conftest import Rig, get_json, post_json
from tests.collie_gateway.push_fixtures import Services, receiver
from tests.collie_gateway.test_push_http import (
    APNS_TOKEN,
    FCM_TOKEN,
    alert,
    logged,
    raise_ask,
    register,
    start,
    svc,
)

__all__ = ["svc"]  # the fixture the tests below use

ENGLISH_TOKEN = "b2" * 32


async def test_P2_one_ask_pushed_to_an_italian_and_an_english_device(
    rig: Rig, svc: Services
) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Deploy notes"})
    italian = await register(client, "apns", APNS_TOKEN, lang="it")
    english = await register(client, "apns", ENGLISH_TOKEN)
    resp = await client.post(
        "/api/v1/devices",
        json={"provider": "fcm", "token": FCM_TOKEN},
        headers={"Accept-Language": "pt-BR,pt;q=0.9"},
    )
    assert resp.status == 200, await resp.text()
    portuguese = (await resp.json())["device_id"]
    devices = (await get_json(client, "/api/v1/devices"))["devices"]
    assert {d["device_id"]: d["lang"] for d in devices} == {
        italian: "it",
        english: None,
        portuguese: "pt-BR",
    }
    await raise_ask(convs["c1"], "a1", push_title="Deploy?", push_line="to prod")
    await logged(client, "a1", "sent", "sent", "sent")
    by_token = {r.headers[":path"].rsplit("/", 1)[1]: alert(r) for r in svc.apns.requests}
    # Collie's words in the device's language; the agent's own (title, line, pane) untouched
    assert by_token == {
        APNS_TOKEN: {
            "title": "Autorizzazione richiesta in Deploy notes",
            "subtitle": "Deploy?",
            "body": "to prod",
        },
        ENGLISH_TOKEN: {
            "title": "Permission needed in Deploy notes",
            "subtitle": "Deploy?",
            "body": "to prod",
        },
    }
    (fcm,) = svc.fcm.requests
    assert fcm.message["notification"] == {
        "title": "Permissão necessária em Deploy notes",
        "body": "Deploy?\nto prod",
    }


async def test_P2_a_device_language_is_a_tag_or_refused(rig: Rig, svc: Services) -> None:
    client, _gw, _convs = await start(rig, svc, {"c1": "Notes"})
    for bad in ("", "it IT", "x" * 40, "<script>"):
        body = {"provider": "apns", "token": APNS_TOKEN, "lang": bad}
        answer = await post_json(client, "/api/v1/devices", body, status=400)
        assert answer["error"] == "bad_request"
    await register(client, "apns", APNS_TOKEN, lang="fr-CA")  # kept; pushes read the default
    (device,) = (await get_json(client, "/api/v1/devices"))["devices"]
    assert device["lang"] == "fr-CA"


async def test_S6_webhook_keeps_english_keys_and_adds_the_default_languages_text(
    rig: Rig, svc: Services
) -> None:
    secret = b"whsec_test_secret"
    async with receiver([secret]) as hook:
        svc.webhooks = [(hook.url, [secret])]
        client, _gw, convs = await start(
            rig, svc, {"c1": "Notes"}, catalogues=Catalogues.load(default="it")
        )
        await raise_ask(convs["c1"], "a1", push_title="Deploy?")
        await logged(client, "a1", "sent")
    (body,) = hook.accepted
    ask: Any = body["ask"]
    assert (body["machine"], body["agent"], ask["id"], ask["push_title"]) == (
        "desk-mac",
        "desk",
        "a1",
        "Deploy?",
    )
    assert body["lang"] == "it"
    assert body["text"] == {"headline": "Autorizzazione richiesta in Notes"}
