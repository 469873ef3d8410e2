"""Issue 22 with real processes: a webhook cut short by SIGTERM or kill -9 is delivered once
by the next run, under the same ``Collie-Webhook-Id``; and the relay (``collie-gateway relay``)
between a gateway and the fake APNs, which see only ciphertext, for an ask and its withdrawal
after a tap on another phone."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from aiohttp import web

from push import vapid
from tests.collie_gateway.conftest import Rig, eventually, get_json, post_json
from tests.collie_gateway.push_fixtures import Receiver, Services, serve
from tests.collie_gateway.test_push_http import logged, raise_ask, start, svc
from tests.collie_gateway.test_shutdown import raise_asks, scene
from tests.push.test_relay import APNS_TOKEN, relay_process
from tests.push.webpush_fakes import Browser, b64url

__all__ = ["svc"]  # the fixture, shared with test_push_http
SECRET = b"whsec_owed"


@pytest.mark.parametrize("how", ["SIGTERM", "kill -9"])
async def test_a_webhook_cut_short_is_delivered_once_after_the_restart(how: str) -> None:
    hook = Receiver([SECRET])
    refusing = True

    async def handle(request: web.Request) -> web.Response:
        if refusing:
            hook.ids.append(request.headers.get("Collie-Webhook-Id"))
            return web.Response(status=503, headers={"Retry-After": "20"})
        return await hook.handle(request)

    app = web.Application()
    app.router.add_post("/hook", handle)
    async with serve(app) as base, scene(with_mute=False) as s:
        s.gateway.env.update(
            COLLIE_WEBHOOK_URL=base + "/hook", COLLIE_WEBHOOK_SECRETS=SECRET.decode()
        )
        await s.gateway.start()
        conv = await s.agent.open_conversation("c1", title="Deploy")
        await raise_asks(conv, "a1")
        await eventually(lambda: len(hook.ids) == 1, within=10)  # 503, Retry-After: 20
        first = hook.ids[0]
        if how == "SIGTERM":
            await s.gateway.stop()  # the try waits out Retry-After: cut short
        else:
            await s.gateway.kill()
        refusing = False
        await s.gateway.start()  # the same SQLite file
        await eventually(lambda: len(hook.accepted) == 1, within=10)
        await asyncio.sleep(0.5)  # nothing more comes
        assert hook.ids == [first, first]
        assert hook.refused == []
        [delivered] = hook.accepted
        assert delivered["agent"] == "desk"
        assert delivered["ask"]["id"] == "a1"  # type: ignore[index]
        assert "Traceback" not in s.output()


async def test_the_relay_between_a_gateway_and_apns_sees_only_ciphertext(
    rig: Rig, svc: Services
) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Payroll deploy"})
    gateway_key = (await get_json(client, "/api/v1/push/vapid"))["public_key"]
    async with relay_process(rig.tmp, svc) as r:
        app = Browser()  # the native app's keys, made as a browser makes them
        sub = await r.register("apns", APNS_TOKEN, app, vapid=gateway_key)
        # The app hands the subscription to its gateway at pairing: an ordinary webpush device.
        body = {
            "provider": "webpush",
            "endpoint": sub["endpoint"],
            "keys": {"p256dh": app.p256dh, "auth": b64url(app.auth)},
        }
        device = (await post_json(client, "/api/v1/devices", body))["device_id"]
        await raise_ask(convs["c1"], "a1", push_title="Drop the salaries table?")
        await logged(client, "a1", "sent")
        tap = {"request_id": "tap-1", "version": 1, "answer": {"option": "yes"}}
        await post_json(client, "/api/v1/agents/desk/asks/a1/answer", tap)
        entries = await logged(client, "a1", "withdrawn")
        assert [e["device"] for e in entries if e["outcome"] == "withdrawn"] == [device]
        alert, background = svc.apns.requests
    for seen in (alert, background):
        # Outside the ciphertext nothing names the agent, the ask or the pane; inside it, the
        # record's bytes hold none of the words in the clear. (The ciphertext's base64 is
        # random text: a short name like "c1" turns up in it by chance.)
        wrapped: dict[str, Any] = json.loads(seen.body)
        cipher = base64.b64decode(wrapped["collie"].pop("w"))
        clear = json.dumps(wrapped).encode()
        for word in (b"Payroll", b"salaries", b"desk", b"a1", b"c1"):
            assert word not in clear, (word, clear)
        for word in (b"Payroll", b"salaries", b"Deploy"):
            assert word not in cipher, (word, seen.body)
    assert alert.headers["apns-push-type"] == "alert"
    assert background.headers["apns-push-type"] == "background"
    shown = app.json(base64.b64decode(alert.json["collie"]["w"]))  # type: ignore[index]
    assert (shown["title"], shown["body"]) == (
        "Permission needed in Payroll deploy",
        "Drop the salaries table?",
    )
    taken = app.json(base64.b64decode(background.json["collie"]["w"]))  # type: ignore[index]
    assert (taken["type"], taken["ask"], taken["tag"]) == ("withdraw", "a1", shown["tag"])
    assert vapid.load_public_key(gateway_key)  # the relay took only the gateway's key
