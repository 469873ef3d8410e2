"""Issue 10.4 and 10.6: push settings from the environment (time to live, APNs environment,
endpoints, CA file), refused with one clear error when wrong."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from collie_gateway.__main__ import push_options_from_env, push_targets_from_env
from collie_gateway.errors import ConfigError
from tests.collie_gateway.conftest import Rig
from tests.collie_gateway.push_fixtures import Services, services
from tests.collie_gateway.test_push_http import APNS_TOKEN, logged, raise_ask, register, start


@pytest.fixture
async def svc(rig: Rig) -> AsyncIterator[Services]:
    async with services(rig.tmp, lambda: rig.clock().timestamp()) as s:
        yield s


def test_push_options_default_to_nothing_set() -> None:
    assert push_options_from_env({}) == {}


def test_push_options_read_ttl_and_apns_environment() -> None:
    env = {"COLLIE_PUSH_TTL": "600", "COLLIE_APNS_ENVIRONMENT": "sandbox"}
    assert push_options_from_env(env) == {"push_ttl": 600.0, "apns_environment": "sandbox"}
    assert push_options_from_env({"COLLIE_PUSH_TTL": "0"}) == {"push_ttl": 0.0}


@pytest.mark.parametrize("ttl", ["soon", "-1", "2419201", "nan"])
def test_a_bad_push_ttl_is_refused(ttl: str) -> None:
    with pytest.raises(ConfigError, match="COLLIE_PUSH_TTL is seconds"):
        push_options_from_env({"COLLIE_PUSH_TTL": ttl})


def test_a_bad_apns_environment_is_refused() -> None:
    with pytest.raises(ConfigError, match="COLLIE_APNS_ENVIRONMENT is production or sandbox"):
        push_options_from_env({"COLLIE_APNS_ENVIRONMENT": "development"})


def test_a_missing_ca_file_is_refused(tmp_path: Path) -> None:
    env = {
        "COLLIE_WEBHOOK_URL": "https://127.0.0.1:9/hook",
        "COLLIE_WEBHOOK_SECRETS": "s",
        "COLLIE_PUSH_CA_FILE": str(tmp_path / "missing.pem"),
    }
    with pytest.raises(ConfigError, match="COLLIE_PUSH_CA_FILE"):
        push_targets_from_env(env)
    (tmp_path / "bad.pem").write_text("not a certificate", encoding="utf-8")
    with pytest.raises(ConfigError, match="COLLIE_PUSH_CA_FILE"):
        push_targets_from_env({**env, "COLLIE_PUSH_CA_FILE": str(tmp_path / "bad.pem")})


async def test_a_push_without_a_deadline_waits_the_configured_ttl(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes"}, push_ttl=600.0)
    await register(client, "apns", APNS_TOKEN)
    await raise_ask(convs["c1"], "a1")
    await logged(client, "a1", "sent")
    expected = math.ceil(rig.clock().timestamp() + 600)
    assert svc.apns.requests[0].headers["apns-expiration"] == str(expected)
