"""TLS of the phone API (issue 21): a self-signed certificate kept beside the database, 0600,
reused; a phone pins the fingerprint its pairing link carries, and refuses any other."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from collie_gateway import tls
from collie_gateway.core.phones import PairingLink
from collie_gateway.errors import ConfigError

NOW = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)


def test_a_self_signed_certificate_is_made_once_0600_and_reused(tmp_path: Path) -> None:
    db = tmp_path / "state" / "collie.db"
    first = tls.self_signed(db, NOW, hosts=["gw.example", "192.168.1.5"])
    assert first.cert == tmp_path / "state" / "collie.db.tls.crt"
    assert first.key == tmp_path / "state" / "collie.db.tls.key"
    for path in (first.cert, first.key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first.fingerprint) == 64
    assert tls.fingerprint(first.cert.read_bytes()) == first.fingerprint
    again = tls.self_signed(db, NOW, hosts=["other.example"])
    assert again == first  # a restart keeps the certificate: paired phones keep their pin
    assert sorted(p.name for p in db.parent.iterdir()) == ["collie.db.tls.crt", "collie.db.tls.key"]


def test_a_kept_key_others_may_read_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "collie.db"
    made = tls.self_signed(db, NOW)
    os.chmod(made.key, 0o644)
    with pytest.raises(ConfigError, match=r"collie\.db\.tls\.key may be read by others"):
        tls.self_signed(db, NOW)


def test_files_that_are_no_certificate_are_refused(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    with pytest.raises(ConfigError) as refused:
        tls.load(cert, key)
    assert str(refused.value) == f"--tls-cert {cert}: no PEM certificate in it"
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConfigError) as refused:
        tls.load(missing, key)
    assert str(refused.value) == f"--tls-cert {missing}: no such file"
    with pytest.raises(ConfigError) as refused:
        tls.load(cert, missing)
    assert str(refused.value) == f"--tls-key {missing}: no such file"
    with pytest.raises(ConfigError) as refused:
        tls.load(tmp_path, key)
    assert str(refused.value) == f"--tls-cert {tmp_path} is a folder, not a PEM file"
    other = tls.self_signed(tmp_path / "a.db", NOW)
    with pytest.raises(ConfigError, match="--tls-key"):
        tls.load(other.cert, key)  # a certificate, but the key is not its key


async def _serve(cert: tls.Tls) -> AsyncIterator[int]:
    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/healthz", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=cert.server_context())
    await site.start()
    port = int(runner.addresses[0][1])
    try:
        yield port
    finally:
        await runner.cleanup()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[tls.Tls, int]]:
    cert = tls.self_signed(tmp_path / "collie.db", NOW)
    async for port in _serve(cert):
        yield cert, port


async def test_a_phone_pins_the_links_fingerprint(
    served: tuple[tls.Tls, int], tmp_path: Path
) -> None:
    cert, port = served
    link = PairingLink.parse(
        str(PairingLink("code", (f"https://127.0.0.1:{port}",), cert.fingerprint))
    )
    assert link.fingerprint is not None
    pin = aiohttp.Fingerprint(bytes.fromhex(link.fingerprint))
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{link.urls[0]}/healthz", ssl=pin) as resp:
            assert resp.status == 200
            assert await resp.json() == {"ok": True}
        # Without the pin, a self-signed certificate is not trusted at all.
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(f"{link.urls[0]}/healthz")
        # Another gateway's certificate (a machine in the middle) is refused by the pin.
        other = tls.self_signed(tmp_path / "other.db", NOW)
        assert other.fingerprint != cert.fingerprint
        async for other_port in _serve(other):
            with pytest.raises(aiohttp.ServerFingerprintMismatch):
                await session.get(f"https://127.0.0.1:{other_port}/healthz", ssl=pin)
