"""Shared fixtures for the push tests: keys, TLS, fake clocks, the fake services."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from pytest_aiohttp import AiohttpServer

from collie_gateway.strings import Catalogue
from push import AskNotification, Content, Device, Environment, Provider, ServiceAccount
from tests.push import fakes
from tests.push.fakes import FakeApns, FakeFcm, Tls, make_tls

TEAM_ID = "TEAM123456"
KEY_ID = "KEY7890ABC"
TOPIC = "org.collie.phone"
PROJECT = "collie-test"
EMAIL = "push@collie-test.iam.gserviceaccount.com"
T0 = 1_700_000_000.0
DEPLOY_ASK = AskNotification(
    machine="m1",
    agent="desk",
    conversation="c1",
    ask="a1",
    pane_key="m1/desk/c1",
    pane="Deploy",
    title="Run the tests?",
    line="pytest -q",
    push_id="once-1",
)


class FakeClock:
    """Wall-clock seconds that move only when told."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeSleep:
    """Records each requested delay and yields once instead of waiting."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.delays: list[float] = []
        self._clock = clock

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        if self._clock is not None:
            self._clock.advance(seconds)
        await asyncio.sleep(0)


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def apns_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="session")
def apns_pem(apns_key: ec.EllipticCurvePrivateKey) -> bytes:
    return fakes.pem(apns_key)


@pytest.fixture(scope="session")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def content() -> Content:
    return Content(strings=Catalogue())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeps(clock: FakeClock) -> FakeSleep:
    return FakeSleep(clock)


@pytest.fixture
async def apns_server(tls: Tls, apns_key: ec.EllipticCurvePrivateKey) -> AsyncIterator[FakeApns]:
    server = FakeApns(tls, public_key=apns_key.public_key(), key_id=KEY_ID, team_id=TEAM_ID)
    await server.start()
    yield server
    await server.aclose()


@pytest.fixture
async def sandbox_server(tls: Tls, apns_key: ec.EllipticCurvePrivateKey) -> AsyncIterator[FakeApns]:
    server = FakeApns(tls, public_key=apns_key.public_key(), key_id=KEY_ID, team_id=TEAM_ID)
    await server.start()
    yield server
    await server.aclose()


@pytest.fixture
async def fcm_server(
    aiohttp_server: AiohttpServer, rsa_key: rsa.RSAPrivateKey
) -> tuple[FakeFcm, TestServer]:
    fake = FakeFcm(public_key=rsa_key.public_key(), client_email=EMAIL, project_id=PROJECT)
    server = await aiohttp_server(fake.app())
    fake.token_uri = str(server.make_url("/token"))
    return fake, server


@pytest.fixture
def service_account(
    rsa_key: rsa.RSAPrivateKey, fcm_server: tuple[FakeFcm, TestServer]
) -> ServiceAccount:
    fake, _ = fcm_server
    return fakes.service_account(rsa_key, fake)


def apns_device(
    id: str = "dev-ios",
    *,
    registered_at: float = T0 - 86_400,
    environment: Environment = Environment.PRODUCTION,
    key: bytes | None = None,
) -> Device:
    return Device(
        id=id,
        provider=Provider.APNS,
        token="a1" * 32,
        registered_at=registered_at,
        environment=environment,
        key=key,
    )


def fcm_device(id: str = "dev-android", *, key: bytes | None = None) -> Device:
    return Device(
        id=id,
        provider=Provider.FCM,
        token="fcm-token-" + "x" * 140,
        registered_at=T0 - 86_400,
        key=key,
    )
