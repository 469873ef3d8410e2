"""Loopback fakes that speak the real protocols: APNs (HTTP/2 over TLS, ALPN h2, ES256 provider
tokens) and FCM HTTP v1 (JSON API plus an OAuth JWT-bearer token endpoint)."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import itertools
import json
import ssl
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from aiohttp import web
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from push import AskNotification, ServiceAccount

HOST = "127.0.0.1"


def pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    """``key`` as the clients take it (PKCS#8 PEM, unencrypted)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


# --- TLS -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tls:
    server: ssl.SSLContext
    client: ssl.SSLContext


def make_tls(directory: Path) -> Tls:
    """A CA and a leaf for 127.0.0.1, made now; the server offers only ALPN h2."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Collie test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.IPv4Address(HOST))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / "leaf.pem", directory / "leaf.key"
    # The CA as a file too: a gateway process trusts it through COLLIE_PUSH_CA_FILE.
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.minimum_version = ssl.TLSVersion.TLSv1_2
    server.load_cert_chain(cert_path, key_path)
    server.set_alpn_protocols(["h2"])
    client = ssl.create_default_context(cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    return Tls(server=server, client=client)


# --- APNs ----------------------------------------------------------------------------------


@dataclass
class ApnsSeen:
    """One request the fake APNs received."""

    connection: int
    stream: int
    headers: dict[str, str]
    body: bytes
    jwt: str | None
    jwt_error: str | None

    @property
    def apns_id(self) -> str:
        return self.headers.get("apns-id", "")

    @property
    def json(self) -> dict[str, object]:
        obj = json.loads(self.body)
        assert isinstance(obj, dict)
        return obj


@dataclass(frozen=True)
class Reply:
    """Answer with this status, headers and JSON body (None: no body)."""

    status: int = 200
    body: dict[str, object] | None = None
    headers: tuple[tuple[str, str], ...] = ()


Action = Reply | Literal["hang", "goaway", "goaway-processed", "drop"]
Script = Callable[[ApnsSeen], Action]


class FakeApns:
    """APNs on 127.0.0.1: HTTP/2 over TLS, ALPN h2 required, ES256 provider JWT verified
    (signature, ``kid``, ``iss``) before ``script`` decides the answer."""

    def __init__(
        self, tls: Tls, *, public_key: ec.EllipticCurvePublicKey, key_id: str, team_id: str
    ) -> None:
        self._tls = tls
        self._public_key = public_key
        self._key_id = key_id
        self._team_id = team_id
        self.script: Script = lambda seen: Reply(200)
        self.requests: list[ApnsSeen] = []
        self.alpn: list[str | None] = []
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.WriteTransport] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._connections = itertools.count(1)

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"https://{HOST}:{port}"

    @property
    def jwts(self) -> set[str]:
        return {r.jwt for r in self.requests if r.jwt}

    async def start(self) -> FakeApns:
        self._server = await asyncio.start_server(self._serve, HOST, 0, ssl=self._tls.server)
        return self

    async def aclose(self) -> None:
        assert self._server is not None
        self._server.close()
        for transport in list(self._transports):
            transport.abort()
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=5)
        await self._server.wait_closed()

    def verify_jwt(self, authorization: str | None) -> tuple[str | None, str | None]:
        if not authorization or not authorization.startswith("bearer "):
            return None, "MissingProviderToken"
        jwt = authorization.removeprefix("bearer ")
        try:
            h, c, s = jwt.split(".")
            header, claims = json.loads(b64url_decode(h)), json.loads(b64url_decode(c))
            raw = b64url_decode(s)
            if header.get("alg") != "ES256" or len(raw) != 64:
                return jwt, "InvalidProviderToken"
            signature = encode_dss_signature(
                int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")
            )
            self._public_key.verify(signature, f"{h}.{c}".encode(), ec.ECDSA(hashes.SHA256()))
        except (ValueError, InvalidSignature):
            return jwt, "InvalidProviderToken"
        if header.get("kid") != self._key_id or claims.get("iss") != self._team_id:
            return jwt, "InvalidProviderToken"
        if not isinstance(claims.get("iat"), int):
            return jwt, "InvalidProviderToken"
        return jwt, None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._transports.add(writer.transport)
        number = next(self._connections)
        ssl_object = writer.get_extra_info("ssl_object")
        self.alpn.append(ssl_object.selected_alpn_protocol() if ssl_object else None)
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        conn.initiate_connection()
        streams: dict[int, tuple[dict[str, str], bytearray]] = {}
        try:
            if self.alpn[-1] != "h2":
                return
            writer.write(conn.data_to_send())
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                close = False
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        streams[event.stream_id] = (dict(event.headers or []), bytearray())  # type: ignore[arg-type]
                    elif isinstance(event, h2.events.DataReceived):
                        streams[event.stream_id][1].extend(event.data or b"")
                        conn.acknowledge_received_data(
                            event.flow_controlled_length or 0, event.stream_id or 0
                        )
                    elif isinstance(event, h2.events.StreamEnded) and event.stream_id:
                        headers, body = streams.pop(event.stream_id)
                        close = self._answer(conn, number, event.stream_id, headers, bytes(body))
                    elif isinstance(event, h2.events.ConnectionTerminated):
                        close = True
                writer.write(conn.data_to_send())
                await writer.drain()
                if close:
                    return
        except (ConnectionError, h2.exceptions.ProtocolError, ssl.SSLError):
            return
        finally:
            self._transports.discard(writer.transport)
            writer.transport.abort()
            self._handlers.discard(task)

    def _answer(
        self,
        conn: h2.connection.H2Connection,
        number: int,
        stream: int,
        headers: dict[str, str],
        body: bytes,
    ) -> bool:
        jwt, jwt_error = self.verify_jwt(headers.get("authorization"))
        seen = ApnsSeen(number, stream, headers, body, jwt, jwt_error)
        self.requests.append(seen)
        action: Action
        if jwt_error:
            action = Reply(403, {"reason": jwt_error})
        elif headers.get(":method") != "POST" or not headers.get(":path", "").startswith(
            "/3/device/"
        ):
            action = Reply(405, {"reason": "MethodNotAllowed"})
        else:
            action = self.script(seen)
        if action == "hang":
            return False
        if action == "goaway":
            conn.close_connection(error_code=0, last_stream_id=0)
            return True
        if action == "goaway-processed":
            conn.close_connection(error_code=0, last_stream_id=stream)
            return True
        if action == "drop":
            return True
        assert isinstance(action, Reply)
        out = [(":status", str(action.status)), ("apns-id", seen.apns_id), *action.headers]
        if action.body is None:
            conn.send_headers(stream, out, end_stream=True)
        else:
            conn.send_headers(stream, [*out, ("content-type", "application/json")])
            conn.send_data(stream, json.dumps(action.body).encode(), end_stream=True)
        return False


# --- FCM -----------------------------------------------------------------------------------

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"


@dataclass(frozen=True)
class FcmReply:
    status: int = 200
    body: dict[str, object] | None = None
    headers: tuple[tuple[str, str], ...] = ()


def fcm_error(
    status: int,
    code: str,
    message: str = "",
    *,
    headers: tuple[tuple[str, str], ...] = (),
) -> FcmReply:
    """An FCM v1 error body: google.rpc.Status with an FcmError detail."""
    names = {
        400: "INVALID_ARGUMENT",
        401: "UNAUTHENTICATED",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        429: "RESOURCE_EXHAUSTED",
        500: "INTERNAL",
        503: "UNAVAILABLE",
    }
    detail = {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}
    error = {
        "code": status,
        "message": message,
        "status": names.get(status, code),
        "details": [detail],
    }
    return FcmReply(status, {"error": error}, headers)


def account_json(key: rsa.RSAPrivateKey, fcm: FakeFcm) -> dict[str, str]:
    """A service account's key file, signing with ``key``, whose tokens ``fcm`` issues."""
    return {
        "type": "service_account",
        "project_id": fcm.project_id,
        "private_key_id": "kid-1",
        "private_key": pem(key).decode(),
        "client_email": fcm.client_email,
        "token_uri": fcm.token_uri,
    }


def service_account(key: rsa.RSAPrivateKey, fcm: FakeFcm) -> ServiceAccount:
    """The service account of :func:`account_json`."""
    return ServiceAccount.from_json(account_json(key, fcm))


def ask_note(i: int) -> AskNotification:
    """The ``i``th of a burst of asks, each in its own conversation."""
    return AskNotification(
        machine="m1",
        agent="desk",
        conversation=f"c{i}",
        ask=f"a{i}",
        pane_key=f"p{i}",
        pane=f"Pane {i}",
        title="Run the tests?",
        line="pytest -q " + "x" * 100,
    )


@dataclass
class FcmSeen:
    token: str
    message: dict[str, object]


@dataclass
class FakeFcm:
    """FCM HTTP v1 and Google's token endpoint, for one service account."""

    public_key: rsa.RSAPublicKey
    client_email: str
    project_id: str
    token_uri: str = ""
    script: Callable[[FcmSeen], FcmReply] = field(default=lambda seen: FcmReply(200))
    token_script: Callable[[int], FcmReply | None] = field(default=lambda n: None)
    requests: list[FcmSeen] = field(default_factory=list)
    assertions: list[dict[str, object]] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    revoked: set[str] = field(default_factory=set)
    token_calls: int = 0
    hang: bool = False  # decided as each send arrives: a send held stays held
    held: int = 0  # sends held by ``hang`` or ``hold`` so far
    hold: asyncio.Event | None = None  # when given, each send waits for it to be set

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/token", self._token)
        app.router.add_post("/v1/projects/{project}/messages:send", self._send)
        return app

    async def _token(self, request: web.Request) -> web.Response:
        self.token_calls += 1
        scripted = self.token_script(self.token_calls)
        if scripted is not None:
            return _reply(scripted)
        form = urllib.parse.parse_qs((await request.read()).decode())
        if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        assertion = form.get("assertion", [""])[0]
        try:
            h, c, s = assertion.split(".")
            header, claims = json.loads(b64url_decode(h)), json.loads(b64url_decode(c))
            self.public_key.verify(
                b64url_decode(s), f"{h}.{c}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
        except (ValueError, InvalidSignature):
            return web.json_response({"error": "invalid_grant"}, status=400)
        ok = (
            header.get("alg") == "RS256"
            and claims.get("iss") == self.client_email
            and claims.get("aud") == self.token_uri
            and claims.get("scope") == SCOPE
            and 0 < claims["exp"] - claims["iat"] <= 3600
        )
        if not ok:
            return web.json_response({"error": "invalid_grant"}, status=400)
        self.assertions.append(claims)
        token = f"ya29.test-{len(self.issued) + 1}"
        self.issued.append(token)
        return web.json_response(
            {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}
        )

    async def _send(self, request: web.Request) -> web.StreamResponse:
        if self.hang:
            self.held += 1
            await asyncio.sleep(3600)
        if self.hold is not None and not self.hold.is_set():
            self.held += 1
            await self.hold.wait()
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ")
        if request.match_info["project"] != self.project_id:
            return _reply(fcm_error(404, "NOT_FOUND", "project"))
        if token not in self.issued or token in self.revoked:
            body = {"error": {"code": 401, "status": "UNAUTHENTICATED", "message": "bad token"}}
            return web.json_response(body, status=401)
        message = (await request.json())["message"]
        seen = FcmSeen(token, message)
        self.requests.append(seen)
        reply = self.script(seen)
        if reply.status == 200 and reply.body is None:
            name = f"projects/{self.project_id}/messages/0:{len(self.requests)}"
            reply = FcmReply(200, {"name": name})
        return _reply(reply)


def _reply(reply: FcmReply) -> web.Response:
    return web.json_response(reply.body, status=reply.status, headers=dict(reply.headers))
