"""Phones from the terminal (issue 21): ``collie-gateway pair`` against a gateway serving
self-signed TLS (the link's fingerprint pinned, the check number on both sides), ``redeem``
as a crew lead uses it, and ``phones list|revoke`` on the gateway's file while it runs."""

from __future__ import annotations

import asyncio
import io
import json
import re
import threading
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from collie_gateway.__main__ import _parser
from collie_gateway.core.phones import PairingLink, check_number
from collie_gateway.errors import ConfigError
from collie_gateway.phones_cli import run
from collie_gateway.serving import gateway_app
from collie_gateway.settings import Settings
from collie_gateway.tls import self_signed
from fixtures.agents.harness import short_dir
from tests.collie_gateway.conftest import Rig
from tests.collie_gateway.test_phones_http import ADMIN, bearer, scene

NOW = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)


class Screen(io.StringIO):
    """A terminal the test reads while a command still runs: ``seen(text)`` waits for it."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def write(self, text: str) -> int:
        with self.changed:
            n = super().write(text)
            self.changed.notify_all()
        return n

    def seen(self, pattern: str, within: float = 10.0) -> re.Match[str]:
        deadline = time.monotonic() + within
        with self.changed:
            while (found := re.search(pattern, self.getvalue())) is None:
                left = deadline - time.monotonic()
                assert left > 0, f"{pattern!r} not shown: {self.getvalue()[-500:]}"
                self.changed.wait(left)
        return found


async def cli(*argv: str, out: io.StringIO | None = None) -> tuple[int, str]:
    """Run ``collie-gateway ARGV`` in a thread (it runs its own event loop)."""
    screen = out if out is not None else io.StringIO()
    code = await asyncio.to_thread(run, _parser().parse_args(list(argv)), screen)
    return code, screen.getvalue()


@pytest.fixture
async def tls_gateway(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[str, Path, str]]:
    """A gateway (no agents) serving self-signed TLS on 127.0.0.1: its URL, file, fingerprint."""
    monkeypatch.setenv("COLLIE_TOKEN", ADMIN)
    with short_dir() as tmp:
        db = tmp / "collie.db"
        tls = self_signed(db, NOW)
        settings = Settings(sources=[], db_path=db, token=ADMIN, tls=tls, auth="always")
        runner = web.AppRunner(gateway_app(settings))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.server_context())
        await site.start()
        url = f"https://127.0.0.1:{runner.addresses[0][1]}"
        try:
            yield url, db, tls.fingerprint
        finally:
            await runner.cleanup()


async def test_pair_over_tls_the_link_pins_the_certificate_and_both_sides_show_the_check(
    tls_gateway: tuple[str, Path, str],
) -> None:
    url, db, fingerprint = tls_gateway
    screen = Screen()
    pairing = asyncio.create_task(
        cli("pair", "--url", url, "--db", str(db), "--scope", "read", out=screen)
    )
    link_text = (await asyncio.to_thread(screen.seen, r"link:\s+(\S+)")).group(1)
    link = PairingLink.parse(link_text)
    assert link.fingerprint == fingerprint
    assert "TLS:" in screen.getvalue()
    assert "█" in screen.getvalue()  # the QR code
    # A phone that pins the link's fingerprint pairs; one offered another certificate does not.
    body = {"code": link.code, "name": "lead", "public_key": "pk-lead"}
    other = self_signed(db.with_name("other.db"), NOW)
    wrong_pin = aiohttp.Fingerprint(bytes.fromhex(other.fingerprint))
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ServerFingerprintMismatch):
            await http.post(url + "/api/v1/pair", json=body, ssl=wrong_pin)
        pin = aiohttp.Fingerprint(bytes.fromhex(link.fingerprint or ""))
        async with http.post(url + "/api/v1/pair", json=body, ssl=pin) as resp:
            assert resp.status == 200
            paired = await resp.json()
    code, shown = await asyncio.wait_for(pairing, 10)
    check = check_number(link.code, "pk-lead")
    assert paired["check"] == check
    assert code == 0
    assert f"Paired: lead (read). Check number: {check[:3]} {check[3:]}" in shown


async def test_redeem_prints_the_token_a_crew_lead_keeps(
    tls_gateway: tuple[str, Path, str], capfd: pytest.CaptureFixture[str]
) -> None:
    url, db, _ = tls_gateway
    code, shown = await cli("pair", "--url", url, "--db", str(db), "--no-wait")
    assert code == 0
    link = re.search(r"link:\s+(\S+)", shown)
    assert link is not None
    redeemed, token = await cli("redeem", link.group(1), "--name", "lead", "--url", url)
    assert redeemed == 0
    token = token.strip()
    assert re.fullmatch(r"collie\.p-[0-9a-f]{12}\.[\w-]{43}", token)
    assert "check number" in capfd.readouterr().err
    pin = aiohttp.Fingerprint(bytes.fromhex(PairingLink.parse(link.group(1)).fingerprint or ""))
    async with (
        aiohttp.ClientSession() as http,
        http.get(url + "/api/v1/phones", headers=bearer(token), ssl=pin) as resp,
    ):
        assert resp.status == 200
        assert [p["name"] for p in (await resp.json())["phones"]] == ["lead"]


async def test_phones_list_and_revoke_on_the_file_end_a_running_gateways_stream(
    rig: Rig,
) -> None:
    s = await scene(rig)
    phone = await s.phone("Pixel")
    await s.phone("Tablet", scope="read")
    db = str(rig.tmp / "gateway.db")
    code, listed = await cli("phones", "list", "--db", db)
    assert code == 0
    lines = listed.splitlines()
    assert lines[0].split() == ["ID", "NAME", "SCOPE", "PAIRED", "LAST", "SEEN", "FROM"]
    assert [line.split()[1:3] for line in lines[1:]] == [["Pixel", "answer"], ["Tablet", "read"]]
    stream = await s.client.get("/api/v1/events", headers=bearer(phone["token"]))
    await stream.content.readuntil(b"\n\n")
    code, said = await cli("phones", "revoke", phone["phone_id"], "--db", db)
    assert (code, said) == (0, f"revoked {phone['phone_id']}\n")
    await s.call("GET", "/api/v1/dashboard", phone["token"], status=401)  # at once
    started = time.monotonic()
    async with asyncio.timeout(1.5):
        assert await stream.content.read() == b""
    assert time.monotonic() - started < 1.0 + 0.5  # the watcher looks twice a second
    code, listed = await cli("phones", "list", "--db", db, "--json")
    assert '"Tablet"' in listed
    assert "Pixel" not in listed
    code, _ = await cli("phones", "revoke", phone["phone_id"], "--db", db)
    assert code == 1


async def test_redeem_a_used_code(tls_gateway: tuple[str, Path, str]) -> None:
    url, db, _ = tls_gateway
    _, shown = await cli("pair", "--url", url, "--db", str(db), "--no-wait")
    link = re.search(r"link:\s+(\S+)", shown)
    assert link is not None
    assert (await cli("redeem", link.group(1), "--name", "a", "--url", url))[0] == 0
    args: Any = _parser().parse_args(["redeem", link.group(1), "--name", "b", "--url", url])
    with pytest.raises(ConfigError, match="This code was already used"):
        await asyncio.to_thread(run, args, io.StringIO())


async def test_over_tls_the_pages_cookie_is_secure(tls_gateway: tuple[str, Path, str]) -> None:
    url, db, fingerprint = tls_gateway
    _, shown = await cli("pair", "--url", url, "--db", str(db), "--no-wait")
    link = re.search(r"link:\s+(\S+)", shown)
    assert link is not None
    body = {"code": PairingLink.parse(link.group(1)).code, "name": "page", "session": True}
    pin = aiohttp.Fingerprint(bytes.fromhex(fingerprint))
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + "/api/v1/pair", json=body, ssl=pin, headers={"Origin": url}) as resp,
    ):
        assert resp.status == 200
        cookie = resp.headers["Set-Cookie"]
    for part in ("HttpOnly", "SameSite=Strict", "Secure"):
        assert part in cookie


async def test_every_time_pair_and_phones_print_is_utc_to_the_second_with_z(
    tls_gateway: tuple[str, Path, str],
) -> None:
    url, db, _ = tls_gateway
    second = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
    for where in (["--url", url], []):  # through the API, and through the file
        _, shown = await cli("pair", *where, "--db", str(db), "--no-wait")
        assert re.search(rf"valid until {second}, one phone\)", shown), shown
    link = re.search(r"link:\s+(\S+)", shown)
    assert link is not None
    assert (await cli("redeem", link.group(1), "--name", "lead", "--url", url))[0] == 0
    for where in (["--url", url], []):
        _, listed = await cli("phones", "list", *where, "--db", str(db), "--json")
        (row,) = json.loads(listed)
        assert re.fullmatch(second, row["paired_at"]), row
        _, table = await cli("phones", "list", *where, "--db", str(db))
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\dZ", table.splitlines()[1].split()[3])
