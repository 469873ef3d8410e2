"""Issue 22: the relay that reads nothing, as a process (``python -m collie_gateway relay``)
between a Web Push sender and the fake APNs and FCM of ``fakes.py``.

The app's side is played by the test: it makes the subscription's keys as a browser would,
registers its provider token with the relay, and decrypts what the fakes received. The fakes
see only ciphertext; a push signed by another VAPID key is refused; the daily quota holds
(withdrawals exempt); a deleted or refused subscription answers 410.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from collie_gateway.strings import Catalogue
from fixtures.agents.harness import REPO, short_dir
from push import (
    AskNotification,
    Content,
    Device,
    Outcome,
    Provider,
    RetryPolicy,
    WebPushClient,
    Withdrawal,
    vapid,
)
from tests.collie_gateway.conftest import eventually
from tests.collie_gateway.processes import free_port
from tests.collie_gateway.push_fixtures import (
    EMAIL,
    PROJECT,
    Services,
    rsa_key,
    services,
)
from tests.collie_gateway.test_shutdown import push_env
from tests.push.fakes import FakeFcm, FcmReply, account_json, fcm_error
from tests.push.webpush_fakes import Browser

APNS_TOKEN = "a1" * 32
FCM_TOKEN = "fcm-token-" + "x" * 140
SUBJECT = "mailto:ops@collie.test"
NOTE = AskNotification(
    machine="desk-mac",
    agent="deskagent",
    conversation="conv-secret",
    ask="ask-secret",
    pane_key="desk-mac/deskagent/conv-secret",
    pane="Payroll deploy",
    title="Drop the production table?",
    line="psql -c 'DROP TABLE salaries'",
    push_id="once-relay",
)
SECRETS = (
    b"Payroll",
    b"salaries",
    b"DROP TABLE",  # not "DROP" alone: four letters a ciphertext's base64 holds now and then
    b"deskagent",
    b"desk-mac",
    b"ask-secret",
    b"conv-secret",
)


@dataclass
class Relay:
    """The relay process, the fakes behind it, and a gateway's sender in front of it."""

    base: str
    svc: Services
    proc: asyncio.subprocess.Process
    log: Path
    key: ec.EllipticCurvePrivateKey

    def sender(self, key: ec.EllipticCurvePrivateKey | None = None) -> WebPushClient:
        """A gateway's Web Push client (``key``: another gateway's VAPID key)."""
        return WebPushClient(
            vapid_key=key or self.key,
            subject=SUBJECT,
            content=Content(strings=Catalogue()),
            retry=RetryPolicy(max_tries=1),
        )

    async def register(
        self, provider: str, token: str, browser: Browser, **extra: Any
    ) -> dict[str, Any]:
        body = {"provider": provider, "token": token, "p256dh": browser.p256dh, **extra}
        async with (
            aiohttp.ClientSession() as http,
            http.post(self.base + "/v1/subscriptions", json=body) as resp,
        ):
            out: dict[str, Any] = await resp.json()
            assert resp.status == 201, out
            return out

    async def raw(self, method: str, path: str, **kwargs: Any) -> tuple[int, dict[str, str], str]:
        async with (
            aiohttp.ClientSession() as http,
            http.request(method, self.base + path, **kwargs) as resp,
        ):
            return resp.status, dict(resp.headers), await resp.text()


def device(endpoint: str, browser: Browser) -> Device:
    return Device(
        id="d-relay",
        provider=Provider.WEBPUSH,
        token=endpoint,
        registered_at=time.time(),
        webpush=browser.keys,
    )


@contextlib.asynccontextmanager
async def relay_process(tmp: Path, svc: Services, *args: str) -> AsyncIterator[Relay]:
    """``collie-gateway relay`` on a free port, forwarding to ``svc``'s fakes."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO), **push_env(tmp, svc)}
    log = tmp / "relay.log"
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "collie_gateway", "relay", "--db", str(tmp / "relay.db"),
            "--port", str(port), "--public-url", base, *args,
            cwd=REPO, env=env, stdout=out, stderr=out,
        )  # fmt: skip

    async def up() -> bool:
        assert proc.returncode is None, log.read_text()
        try:
            async with aiohttp.ClientSession() as http, http.get(base + "/") as r:
                return r.status == 404
        except aiohttp.ClientError:
            return False

    try:
        await eventually(up, within=15)
        yield Relay(base, svc, proc, log, vapid.generate())
    finally:
        if proc.returncode is None:
            proc.terminate()
        try:
            async with asyncio.timeout(10):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
        output = log.read_text(errors="replace")
        assert "Traceback" not in output, output


@contextlib.asynccontextmanager
async def relay(*args: str) -> AsyncIterator[Relay]:
    with short_dir() as tmp:
        async with services(tmp, time.time) as svc, relay_process(tmp, svc, *args) as r:
            yield r


def sealed(raw: str) -> bytes:
    return base64.b64decode(raw, validate=True)


async def test_apns_app_gets_an_ask_and_its_withdrawal_the_relay_and_apple_see_ciphertext() -> None:
    async with relay() as r:
        browser = Browser()
        sub = await r.register("apns", APNS_TOKEN, browser, vapid=vapid.public_key(r.key))
        assert sub["endpoint"] == f"{r.base}/push/{sub['id']}"
        assert len(sub["id"]) == 32
        async with r.sender() as gateway:
            ask = await gateway.send(device(sub["endpoint"], browser), NOTE)
            gone = await gateway.send(device(sub["endpoint"], browser), Withdrawal.of(NOTE))
        assert (ask.outcome, ask.status) == (Outcome.SENT, 201)
        assert gone.ok
        first, second = r.svc.apns.requests
        for seen in (first, second):
            assert not [s for s in SECRETS if s in seen.body], seen.body
            assert seen.jwt_error is None
        assert first.headers["apns-push-type"] == "alert"
        assert first.headers["apns-priority"] == "10"
        assert first.json["aps"] == {
            "alert": {"title": "A durable agent needs your answer"},
            "mutable-content": 1,
            "sound": "default",
        }
        shown = browser.json(sealed(first.json["collie"]["w"]))  # type: ignore[index]
        assert shown["title"] == "Permission needed in Payroll deploy"
        assert shown["body"] == "Drop the production table?\npsql -c 'DROP TABLE salaries'"
        assert second.headers["apns-push-type"] == "background"
        assert second.headers["apns-priority"] == "5"
        assert second.json["aps"] == {"content-available": 1}
        taken = browser.json(sealed(second.json["collie"]["w"]))  # type: ignore[index]
        assert (taken["type"], taken["ask"], taken["tag"]) == (
            "withdraw",
            "ask-secret",
            shown["tag"],
        )


async def test_fcm_app_gets_a_data_message_fcm_sees_ciphertext() -> None:
    async with relay() as r:
        browser = Browser()
        sub = await r.register("fcm", FCM_TOKEN, browser)
        async with r.sender() as gateway:
            assert (await gateway.send(device(sub["endpoint"], browser), NOTE)).ok
        [seen] = r.svc.fcm.requests
        raw = json.dumps(seen.message).encode()
        assert not [s for s in SECRETS if s in raw], raw
        assert set(seen.message) == {"token", "data", "android"}  # no notification: data
        assert seen.message["android"]["priority"] == "high"  # type: ignore[index]
        data = seen.message["data"]
        assert isinstance(data, dict)
        assert browser.json(sealed(data["w"]))["ask"] == "ask-secret"


async def test_a_push_signed_by_another_vapid_key_is_refused() -> None:
    async with relay() as r:
        bound_now, bound_later = Browser(), Browser()
        at_registration = await r.register(
            "apns", APNS_TOKEN, bound_now, vapid=vapid.public_key(r.key)
        )
        first_push = await r.register("fcm", FCM_TOKEN, bound_later)
        assert first_push["vapid"] is None
        async with r.sender() as ours, r.sender(vapid.generate()) as theirs:
            stranger = await theirs.send(device(at_registration["endpoint"], bound_now), NOTE)
            assert (stranger.outcome, stranger.status) == (Outcome.FAILED, 403)
            # Unbound: the first signed push binds it; then only that key may push.
            assert (await ours.send(device(first_push["endpoint"], bound_later), NOTE)).ok
            late = await theirs.send(device(first_push["endpoint"], bound_later), NOTE)
            assert late.status == 403
            assert (await ours.send(device(at_registration["endpoint"], bound_now), NOTE)).ok
        assert len(r.svc.apns.requests) == 1
        assert len(r.svc.fcm.requests) == 1


async def test_the_daily_quota_counts_alerts_not_withdrawals() -> None:
    async with relay("--daily-alerts", "3") as r:
        browser = Browser()
        sub = await r.register("apns", APNS_TOKEN, browser)
        target = device(sub["endpoint"], browser)
        async with r.sender() as gateway:
            for _ in range(3):
                assert (await gateway.send(target, NOTE)).ok
            headers, body = gateway.request(target, NOTE)
            headers["Authorization"] = gateway.authorization(sub["endpoint"])
            status, answer, text = await r.raw(
                "POST", f"/push/{sub['id']}", headers=headers, data=body
            )
            assert (status, json.loads(text)) == (429, {"error": "over 3 alerting pushes today"})
            assert 0 < int(answer["Retry-After"]) <= 86401
            for _ in range(5):
                assert (await gateway.send(target, Withdrawal.of(NOTE))).ok
        pushed = [s.headers["apns-push-type"] for s in r.svc.apns.requests]
        assert pushed == ["alert"] * 3 + ["background"] * 5


async def test_410_for_a_subscription_the_app_deleted_or_the_provider_refused() -> None:
    async with relay() as r:
        browser = Browser()
        deleted = await r.register("apns", APNS_TOKEN, browser)
        refused = await r.register("fcm", FCM_TOKEN, browser)
        path = f"/v1/subscriptions/{deleted['id']}"
        assert (await r.raw("DELETE", path, headers={"Authorization": "Bearer nope"}))[0] == 403
        bearer = {"Authorization": f"Bearer {deleted['secret']}"}
        assert (await r.raw("DELETE", path, headers=bearer))[0] == 204
        r.svc.fcm.script = lambda seen: fcm_error(404, "UNREGISTERED")
        async with r.sender() as gateway:
            gone = await gateway.send(device(deleted["endpoint"], browser), NOTE)
            assert (gone.outcome, gone.status) == (Outcome.GONE, 410)
            first = await gateway.send(device(refused["endpoint"], browser), NOTE)
            assert (first.outcome, first.status) == (Outcome.GONE, 410)
            r.svc.fcm.script = lambda seen: FcmReply(200)
            again = await gateway.send(device(refused["endpoint"], browser), NOTE)
            assert (again.outcome, again.status) == (Outcome.GONE, 410)
        assert r.svc.apns.requests == []
        assert len(r.svc.fcm.requests) == 1  # the refused token is not tried again


async def test_what_the_relay_refuses_before_forwarding() -> None:
    async with relay() as r:
        browser = Browser()
        sub = await r.register("apns", APNS_TOKEN, browser)
        push = f"/push/{sub['id']}"
        async with r.sender() as gateway:
            headers, body = gateway.request(device(sub["endpoint"], browser), NOTE)
            signed = {**headers, "Authorization": gateway.authorization(sub["endpoint"])}
        no_ttl = {k: v for k, v in signed.items() if k != "TTL"}
        clear = {**signed, "Content-Encoding": "identity"}
        cases = [
            (await r.raw("POST", push, headers=headers, data=body), 401),
            (await r.raw("POST", push, headers=no_ttl, data=body), 400),
            (await r.raw("POST", push, headers=clear, data=b"{}"), 415),
            (await r.raw("POST", push, headers=signed, data=body[:50]), 400),
            (await r.raw("POST", push, headers=signed, data=body + b"x" * 3000), 413),
            (await r.raw("POST", push, headers={**signed, "Urgency": "soon"}, data=body), 400),
            (await r.raw("POST", push, headers={**signed, "Topic": "x" * 33}, data=body), 400),
            (await r.raw("POST", "/push/nobody", headers=signed, data=body), 404),
        ]
        assert [status for (status, _, _), _ in cases] == [want for _, want in cases]
        with_auth = {"provider": "apns", "token": APNS_TOKEN, "p256dh": browser.p256dh,
                     "auth": "BTBZMqHH6r4Tts7J_aSIgg"}  # fmt: skip
        status, _, text = await r.raw("POST", "/v1/subscriptions", json=with_auth)
        assert (status, json.loads(text)["error"]) == (
            400,
            "the auth secret stays with the app: send only p256dh",
        )
        bad_token = {"provider": "apns", "token": "not hex"}
        assert (await r.raw("POST", "/v1/subscriptions", json=bad_token))[0] == 400
        assert (await r.raw("POST", "/v1/subscriptions", data=b"\xff"))[0] == 400
        assert r.svc.apns.requests == []


@pytest.mark.parametrize("url", ["http://relay.example.org", "ftp://127.0.0.1"])
async def test_the_relay_wants_a_public_url_it_may_be_pushed_at(url: str) -> None:
    with short_dir() as tmp:
        fake = FakeFcm(public_key=rsa_key().public_key(), client_email=EMAIL, project_id=PROJECT)
        fake.token_uri = "http://127.0.0.1:9/token"
        (tmp / "fcm.json").write_text(json.dumps(account_json(rsa_key(), fake)), encoding="utf-8")
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "COLLIE_FCM_SERVICE_ACCOUNT": str(tmp / "fcm.json"),
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "collie_gateway", "relay", "--public-url", url,
            "--db", str(tmp / "relay.db"),
            cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 2
    assert err.decode() == (
        "collie-gateway: an endpoint is https:// (http:// only on a loopback address)\n"
    )


async def test_the_relay_wants_credentials() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLLIE_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "collie_gateway", "relay", "--public-url", "https://r.example",
        cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 2
    assert err.decode() == (
        "collie-gateway: the relay needs APNs or FCM credentials (COLLIE_APNS_*, COLLIE_FCM_*)\n"
    )
