"""``collie-gateway pair`` and ``collie-gateway phones list|revoke``: phones from the
terminal, through the running gateway (``--url``, with ``COLLIE_TOKEN``) or its ``--db``.

``pair`` prints the pairing link as a QR code, waits for the phone, and shows its name and
the check number the phone shows too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Protocol, TextIO
from urllib.parse import urlsplit

import aiohttp
import segno

from collie_gateway.core.phones import CodeState, PairingLink, Phone, Scope, spaced_fingerprint
from collie_gateway.errors import ConfigError
from collie_gateway.services.phones import Phones
from collie_gateway.settings import DEMO_STATE
from collie_gateway.store.protocols import PhonesStore
from collie_gateway.store.stores import check_store, is_database_url, open_stores, phones_of_file
from collie_gateway.tls import Tls, fingerprint_of, self_signed, self_signed_paths
from collie_gateway.tls import load as load_tls

POLL: Final = 0.5  # seconds between two looks at a pairing while ``pair`` waits
COMMANDS: Final = frozenset({"pair", "phones", "redeem"})
DEFAULT_DB: Final = Path("collie.db")  # serve's and pair's store when nothing names one


def db_arg(value: str) -> Path | str:
    """``--db``: a PostgreSQL URL as given, else a SQLite file's path."""
    return value if is_database_url(value) else Path(value)


def store_from(
    db: Path | str | None, environ: Mapping[str, str], file: Path = DEFAULT_DB
) -> tuple[Path, str | None]:
    """The SQLite file and the PostgreSQL URL (None: the file is the store) of ``--db``
    and ``COLLIE_DATABASE_URL`` (``--db`` wins); ``file`` when neither names one.

    Raises:
        ConfigError: ``COLLIE_DATABASE_URL`` is not a postgresql:// URL.
    """
    if isinstance(db, Path):
        return db, None
    url = db if db is not None else environ.get("COLLIE_DATABASE_URL") or None
    if url is not None and not is_database_url(url):
        raise ConfigError("COLLIE_DATABASE_URL is a postgresql:// URL (a SQLite file: --db)")
    return file, url


def check_db(db: Path | str | None) -> None:
    """Refuse a ``--db`` file that is a folder or in a folder that does not exist.

    Raises:
        ConfigError: one sentence naming the option and the value.
    """
    if not isinstance(db, Path):
        return
    if db.is_dir():
        raise ConfigError(
            f"--db {db} is a folder: name the SQLite file, e.g. --db {db / 'collie.db'}"
        )
    folder = db.expanduser().absolute().parent
    if not folder.is_dir():
        raise ConfigError(f"--db {db}: the folder {folder} does not exist")


def zulu(when: datetime | str) -> str:
    """A time as the command line prints it: UTC, to the second, ``Z``."""
    at = datetime.fromisoformat(when) if isinstance(when, str) else when
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_serve_options(p: argparse.ArgumentParser) -> None:
    """``serve`` and ``demo``'s options of phones: ``--auth``, ``--public-url``, TLS."""
    p.add_argument(
        "--auth",
        choices=["auto", "always"],
        default="auto",
        help="always: a credential on loopback too (auto: loopback is open until a phone pairs)",
    )
    p.add_argument(
        "--public-url",
        action="append",
        default=[],
        help="an address phones use (a tunnel, a LAN address), put in pairing links (repeat)",
    )
    p.add_argument("--tls-cert", type=Path, default=None, help="serve TLS with this certificate")
    p.add_argument("--tls-key", type=Path, default=None, help="the key of --tls-cert")
    p.add_argument(
        "--tls",
        choices=["self-signed"],
        default=None,
        help="self-signed: a certificate made once, kept beside the database",
    )


def tls_from_args(args: argparse.Namespace) -> Tls | None:
    """The TLS the options ask for, or None.

    Raises:
        ConfigError: half of --tls-cert/--tls-key, both kinds, or files that do not load.
    """
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    if args.tls_cert is not None:
        if args.tls is not None:
            raise ConfigError("--tls self-signed or --tls-cert/--tls-key, not both")
        return load_tls(args.tls_cert, args.tls_key)
    if args.tls == "self-signed":
        hosts = [args.host, *(urlsplit(u).hostname or "" for u in args.public_url)]
        return self_signed(args.db, datetime.now(UTC), [h for h in hosts if h])
    return None


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``pair`` and ``phones`` to the command line."""
    pair = sub.add_parser(
        "pair",
        help="pair a phone: print a one-time code as a QR code and wait for the phone",
        description="Make a one-time pairing code (5 minutes, one phone), print its link as a "
        "QR code, and wait until a phone pairs: its name and check number show.",
    )
    _where(pair)
    pair.add_argument(
        "--scope",
        choices=[s.value for s in Scope],
        default="answer",
        help="what the phone may do: answer (everything) or read (no answers, no commands)",
    )
    pair.add_argument(
        "--public-url",
        action="append",
        default=[],
        help="an address the phone may use, put in the link (repeat; with --db)",
    )
    pair.add_argument(
        "--tls-cert", type=Path, default=None, help="its fingerprint goes in the link"
    )
    pair.add_argument("--no-wait", dest="wait", action="store_false", help="do not wait")
    redeem = sub.add_parser(
        "redeem",
        help="pair this machine with another gateway (a crew lead with a member)",
        description="Use a pairing link made on another gateway: print the token this "
        "machine gets (on stdout, for the crew entry's token_env) and the check number.",
    )
    redeem.add_argument("link", help="the collie://pair?... link `pair` printed there")
    redeem.add_argument("--name", required=True, help="this machine's name, as listed there")
    redeem.add_argument(
        "--scope", choices=[s.value for s in Scope], default=None, help="ask for less: read"
    )
    redeem.add_argument("--url", default=None, help="the gateway's address, if not in the link")
    phones = sub.add_parser(
        "phones", help="list or revoke paired phones", description="List or revoke phones."
    )
    actions = phones.add_subparsers(dest="phones", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the phones paired", description="Paired phones.")
    _where(listing)
    listing.add_argument("--json", action="store_true", help="as JSON")
    revoke = actions.add_parser(
        "revoke", help="revoke a phone", description="Revoke a phone: its token stops working."
    )
    _where(revoke)
    revoke.add_argument("phone_id", help="the phone's id, from `phones list`")


def _where(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        type=db_arg,
        default=None,
        help="the running gateway's store, as serve was given it: its SQLite file or a "
        "postgresql:// URL (default: COLLIE_DATABASE_URL, else collie.db in the current "
        "folder; the demo prints its own pair command)",
    )
    p.add_argument(
        "--url",
        default=None,
        help="the running gateway (e.g. http://127.0.0.1:8765), with COLLIE_TOKEN; else --db",
    )


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run ``pair`` or ``phones …``; the exit code.

    Raises:
        ConfigError: the gateway refused, or could not be reached.
    """
    return asyncio.run(_run(args, out))


async def _run(args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "redeem":
        return await _redeem(args, out)
    async with _backend(args) as backend:
        if args.command == "pair":
            return await _pair(backend, args, out)
        if args.phones == "list":
            phones = await backend.phones()
            _print_phones(phones, args.json, out)
            return 0
        if not await backend.revoke(args.phone_id):
            print(f"collie-gateway: no phone {args.phone_id!r} to revoke", file=sys.stderr)
            return 1
        print(f"revoked {args.phone_id}", file=out)
        return 0


def stopped(args: argparse.Namespace) -> str:
    """The one line a command stopped by Ctrl-C leaves."""
    if args.command == "pair" and args.wait:
        return "stopped waiting (Ctrl-C); a phone may still use the code until it expires"
    return "stopped (Ctrl-C)"


@dataclass(frozen=True, slots=True)
class Waited:
    """A pairing as ``pair`` sees it while it waits."""

    state: CodeState
    name: str | None = None
    scope: str | None = None
    check: str | None = None


class _Backend(Protocol):
    """The phones of one gateway, through its file or its HTTP API."""

    async def new_code(
        self, scope: Scope, urls: list[str], cert: Path | None
    ) -> dict[str, Any]: ...

    async def pairing(self, pairing_id: str) -> Waited: ...

    async def phones(self) -> list[dict[str, Any]]: ...

    async def revoke(self, phone_id: str) -> bool: ...


class _File:
    """Through the database file (a running gateway notices within a second)."""

    def __init__(self, db_path: Path, repo: PhonesStore) -> None:
        self.db_path = db_path
        self.repo = repo
        self.service = Phones(
            repo,
            admin_token=None,
            clock=lambda: datetime.now(UTC),
            monotonic=asyncio.get_running_loop().time,
        )

    async def new_code(self, scope: Scope, urls: list[str], cert: Path | None) -> dict[str, Any]:
        made = await self.service.new_code(scope)
        kept = self_signed_paths(self.db_path)[0]
        cert = cert or (kept if kept.exists() else None)
        fp = fingerprint_of(cert) if cert else None
        link = PairingLink(made.code, tuple(urls), fp)
        return {
            "pairing_id": made.pairing_id,
            "code": made.code,
            "link": str(link),
            "expires_at": zulu(made.expires_at),
        }

    async def pairing(self, pairing_id: str) -> Waited:
        found = await self.repo.pairing(pairing_id)
        if found is None:
            return Waited(CodeState.EXPIRED)
        pairing, phone, check = found
        state = pairing.at(datetime.now(UTC))
        if phone is None:
            return Waited(state)
        return Waited(state, phone.name, phone.scope.value, check)

    async def phones(self) -> list[dict[str, Any]]:
        return [phone_row(p) for p in await self.service.phones()]

    async def revoke(self, phone_id: str) -> bool:
        return await self.service.revoke(phone_id)


class _Http:
    """Through the running gateway's API, with the admin token."""

    def __init__(self, url: str, token: str | None, db_path: Path) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        # The gateway's own self-signed certificate, kept beside its file, is pinned.
        kept = self_signed_paths(db_path)[0]
        ssl: aiohttp.Fingerprint | bool = True
        if kept.exists():
            ssl = aiohttp.Fingerprint(bytes.fromhex(fingerprint_of(kept)))
        self.session = aiohttp.ClientSession(
            headers=headers, connector=aiohttp.TCPConnector(ssl=ssl)
        )

    async def _call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        try:
            async with self.session.request(method, self.url + path, json=body) as resp:
                data = await resp.json(content_type=None)
                if resp.status in (401, 403):
                    raise ConfigError(f"{self.url} refused: {data.get('message')}")
                return resp.status, data
        except (aiohttp.ClientError, ValueError) as exc:
            raise ConfigError(f"{self.url}: {exc}") from None

    async def new_code(self, scope: Scope, urls: list[str], cert: Path | None) -> dict[str, Any]:
        status, data = await self._call("POST", "/api/v1/pairings", {"scope": scope.value})
        if status != 200:
            raise ConfigError(f"{self.url}: {data.get('message')}")
        return dict(data)

    async def pairing(self, pairing_id: str) -> Waited:
        status, data = await self._call("GET", f"/api/v1/pairings/{pairing_id}")
        if status != 200:
            return Waited(CodeState.EXPIRED)
        return Waited(
            CodeState(data["state"]), data.get("name"), data.get("scope"), data.get("check")
        )

    async def phones(self) -> list[dict[str, Any]]:
        _, data = await self._call("GET", "/api/v1/phones")
        # The times as the file's rows give them (the API's carry fractions of a second).
        return [
            row | {k: zulu(row[k]) for k in ("paired_at", "last_seen") if row.get(k)}
            for row in data["phones"]
        ]

    async def revoke(self, phone_id: str) -> bool:
        status, _ = await self._call("DELETE", f"/api/v1/phones/{phone_id}")
        return status == 200


@asynccontextmanager
async def _backend(args: argparse.Namespace) -> AsyncIterator[_Backend]:
    check_db(args.db)
    db_path, url = store_from(args.db, os.environ)
    if args.url:
        http = _Http(args.url, os.environ.get("COLLIE_TOKEN") or None, db_path)
        try:
            yield http
        finally:
            await http.session.close()
        return
    if url is not None:
        stores = await open_stores(db_path, url)
        try:
            yield _File(db_path, stores.phones)
        finally:
            await stores.close()
        return
    if not db_path.is_file():
        demo = (DEMO_STATE / "collie.db").expanduser()
        raise ConfigError(
            f"--db {db_path}: no gateway store there; name the running gateway's (--db as "
            "serve was given it"
            + (f"; the demo's: --db {demo})" if demo.is_file() else "; the demo prints its own)")
        )
    check_store(db_path)  # a newer gateway's file is refused, not migrated
    async with phones_of_file(db_path) as phones:
        yield _File(db_path, phones)


def phone_row(phone: Phone) -> dict[str, Any]:
    """A phone as ``GET /api/v1/phones`` and ``phones list --json`` show it."""
    return {
        "phone_id": phone.phone_id,
        "name": phone.name,
        "scope": phone.scope.value,
        "paired_at": zulu(phone.paired_at),
        "last_seen": zulu(phone.last_seen) if phone.last_seen else None,
        "last_address": phone.last_address,
    }


def _print_phones(rows: Sequence[dict[str, Any]], as_json: bool, out: TextIO) -> None:
    if as_json:
        print(json.dumps(rows, indent=2), file=out)
        return
    if not rows:
        print("no phones paired", file=out)
        return
    head = ("ID", "NAME", "SCOPE", "PAIRED", "LAST SEEN", "FROM")
    table = [head] + [
        (
            r["phone_id"],
            r["name"],
            r["scope"],
            _minute(r["paired_at"]),
            _minute(r["last_seen"]) if r["last_seen"] else "-",
            r["last_address"] or "-",
        )
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    for row in table:
        print(
            "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip(), file=out
        )


def _minute(when: str) -> str:
    """A time in the phones table: to the minute, ``Z``."""
    return zulu(when)[:16] + "Z"


async def _pair(backend: _Backend, args: argparse.Namespace, out: TextIO) -> int:
    made = await backend.new_code(Scope(args.scope), args.public_url, args.tls_cert)
    link = PairingLink.parse(made["link"])
    segno.make(made["link"], error="m").terminal(out=out, compact=True)
    print(f"\n  link:     {made['link']}", file=out)
    until = zulu(made["expires_at"])
    print(f"  code:     {made['code']}  (valid until {until}, one phone)", file=out)
    if link.fingerprint:
        print(f"  TLS:      {spaced_fingerprint(link.fingerprint)}", file=out)
    if not link.urls:
        print("  (no --public-url: the phone needs the gateway's address)", file=out)
    if not args.wait:
        return 0
    print("\nWaiting for the phone…", file=out, flush=True)
    deadline = time.monotonic() + 3600  # bounded even if the clock lies
    while time.monotonic() < deadline:
        waited = await backend.pairing(made["pairing_id"])
        if waited.state is CodeState.USED:
            check = waited.check or ""
            print(
                f"Paired: {waited.name} ({waited.scope}). Check number: {check[:3]} {check[3:]}"
                " — the phone shows the same.",
                file=out,
            )
            return 0
        if waited.state is CodeState.EXPIRED:
            print("The code expired before a phone used it.", file=out)
            return 1
        await asyncio.sleep(POLL)
    return 1


async def _redeem(args: argparse.Namespace, out: TextIO) -> int:
    """Pair with another gateway as a phone would: the token on ``out``, the rest on stderr."""
    try:
        link = PairingLink.parse(args.link)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    url = args.url or (link.urls[0] if link.urls else None)
    if url is None:
        raise ConfigError("the link names no address: give --url")
    pin = aiohttp.Fingerprint(bytes.fromhex(link.fingerprint)) if link.fingerprint else True
    body = {"code": link.code, "name": args.name, "scope": args.scope}
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(url.rstrip("/") + "/api/v1/pair", json=body, ssl=pin) as resp,
        ):
            data = await resp.json(content_type=None)
    except (aiohttp.ClientError, ValueError) as exc:
        raise ConfigError(f"{url}: {exc}") from None
    if resp.status != 200:
        raise ConfigError(f"{url}: {data.get('message')}")
    check = data["check"]
    if link.fingerprint:  # for a crew entry's "fingerprint"
        print(f"fingerprint: sha256:{link.fingerprint}", file=sys.stderr)
    print(
        f"paired as {data['phone_id']} ({data['scope']}); check number {check[:3]} {check[3:]}",
        file=sys.stderr,
    )
    print(data["token"], file=out)
    return 0
