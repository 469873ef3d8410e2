"""The push services a gateway test talks to: the fake APNs and FCM servers of
``tests/push/fakes.py`` on 127.0.0.1, the real clients pointed at them, and local webhook
receivers. ``Services.targets`` is the gateway's ``push_targets`` factory."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from collie_gateway.services.targets import PushTargets
from push import (
    ApnsClient,
    Content,
    Duplicate,
    FcmClient,
    Provider,
    RetryPolicy,
    SeenSet,
    ServiceAccount,
    SignatureError,
    WebhookTarget,
    verify,
)
from tests.push.fakes import HOST, FakeApns, FakeFcm, make_tls, pem, service_account

TEAM_ID = "TEAM123456"
KEY_ID = "KEY7890ABC"
TOPIC = "org.collie.phone"
PROJECT = "collie-test"
EMAIL = "push@collie-test.iam.gserviceaccount.com"


@functools.cache
def apns_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@functools.cache
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


async def no_sleep(seconds: float) -> None:
    """The clients' backoff, without the waiting."""
    await asyncio.sleep(0)


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1 that verifies each delivery as a real one would."""

    secrets: list[bytes]
    url: str = ""
    seen: SeenSet = field(default_factory=SeenSet)
    raw: list[tuple[str, bytes]] = field(default_factory=list)
    accepted: list[dict[str, object]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    ids: list[str | None] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        header = request.headers.get("Collie-Signature", "")
        delivery_id = request.headers.get("Collie-Webhook-Id")
        body = await request.read()
        self.raw.append((header, body))
        self.ids.append(delivery_id)
        try:
            verify(header, body, self.secrets, time.time(), self.seen, delivery_id=delivery_id)
        except Duplicate:
            return web.json_response({"ok": True, "duplicate": True})
        except SignatureError as exc:
            self.refused.append(str(exc))
            return web.json_response({"error": str(exc)}, status=400)
        self.accepted.append(json.loads(body))
        return web.json_response({"ok": True})


@dataclass
class Services:
    """The fakes, and how the gateway's clients are built for them."""

    apns: FakeApns
    sandbox: FakeApns
    fcm: FakeFcm
    fcm_url: str
    account: ServiceAccount
    tls_client: ssl.SSLContext
    clock: Callable[[], float] = time.time
    apns_timeout: float = 5.0
    fcm_timeout: float = 5.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    webhooks: list[tuple[str, list[bytes]]] = field(default_factory=list)

    def targets(self, content: Content) -> PushTargets:
        """The gateway's ``push_targets``: real clients aimed at the fakes."""
        apns = ApnsClient(
            team_id=TEAM_ID,
            key_id=KEY_ID,
            signing_key=pem(apns_key()),
            topic=TOPIC,
            content=content,
            timeout=self.apns_timeout,
            retry=self.retry,
            production_url=self.apns.url,
            sandbox_url=self.sandbox.url,
            verify=self.tls_client,
            clock=self.clock,
            sleep=no_sleep,
        )
        fcm = FcmClient(
            self.account,
            content=content,
            base_url=self.fcm_url,
            timeout=self.fcm_timeout,
            retry=self.retry,
            clock=self.clock,
            sleep=no_sleep,
        )
        hooks = [
            WebhookTarget(url, secrets, timeout=2.0, retry=self.retry, sleep=no_sleep)
            for url, secrets in self.webhooks
        ]
        return PushTargets(senders={Provider.APNS: apns, Provider.FCM: fcm}, webhooks=hooks)


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 (a fresh port); its base URL."""
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://{HOST}:{port}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def receiver(secrets: list[bytes]) -> AsyncIterator[Receiver]:
    """A webhook receiver on 127.0.0.1."""
    hook = Receiver(secrets)
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    async with serve(app) as base:
        hook.url = base + "/hook"
        yield hook


@contextlib.asynccontextmanager
async def services(directory: Path, clock: Callable[[], float]) -> AsyncIterator[Services]:
    """The fake APNs (HTTP/2 over TLS) and FCM (v1 API and token endpoint) on 127.0.0.1."""
    tls = make_tls(directory)
    public = apns_key().public_key()
    apns = await FakeApns(tls, public_key=public, key_id=KEY_ID, team_id=TEAM_ID).start()
    sandbox = await FakeApns(tls, public_key=public, key_id=KEY_ID, team_id=TEAM_ID).start()
    fcm = FakeFcm(public_key=rsa_key().public_key(), client_email=EMAIL, project_id=PROJECT)
    try:
        async with serve(fcm.app()) as base:
            fcm.token_uri = base + "/token"
            account = service_account(rsa_key(), fcm)
            yield Services(
                apns=apns,
                sandbox=sandbox,
                fcm=fcm,
                fcm_url=base,
                account=account,
                tls_client=tls.client,
                clock=clock,
            )
    finally:
        await apns.aclose()
        await sandbox.aclose()
