"""Phones of one's own through HTTP (issue 21): pairing, a credential per phone, scopes,
listing, revoking, who answered, the page's cookie and its origin, against an SDK agent on a
real socket, a real SQLite file and a real HTTP server."""

from __future__ import annotations

import asyncio
import io
import logging
import time
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from collie_gateway.core.mirror import LinkState
from collie_gateway.core.phones import PairingLink, check_number, token_hash
from collie_gateway.gateway import Gateway
from collie_gateway.services.targets import PushTargets
from collie_gateway.sources import Source
from push import Content, WebhookTarget
from tests.collie_gateway.conftest import Rig, eventually
from tests.collie_gateway.push_fixtures import receiver
from tests.collie_gateway.test_answers_http import PERMISSION, TOOL, Wire
from wire.agent import Agent, ConversationHandle

Client = TestClient[Any, Any]
ADMIN = "admin-token-for-tests-9f3c"
WRONG = "This code is not right. Check it, or make a new one with collie-gateway pair."
USED = "This code was already used. Make a new one with collie-gateway pair."
EXPIRED = "This code expired. Make a new one with collie-gateway pair."
READ_ONLY = "This phone may only read: nothing was sent. Answer from a phone paired to answer."
ADMIN_ONLY = "Only the gateway's admin token may do this."
WRONG_ORIGIN = "Refused: this request did not come from the gateway's own page."
AGENT = "/api/v1/agents/desk"
CHAT = AGENT + "/conversations/c1"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Scene:
    """The agent ``desk`` (conversation ``c1``, behind a ``Wire``) and a gateway for it."""

    rig: Rig
    client: Client
    gw: Gateway
    agent: Agent
    conv: ConversationHandle
    wire: Wire

    async def call(
        self,
        method: str,
        path: str,
        token: str | None = None,
        body: Any = None,
        status: int = 200,
        **headers: str,
    ) -> Any:
        """One request; its JSON, after checking the status."""
        sent = dict(headers)
        if token is not None:
            sent.update(bearer(token))
        resp = await self.client.request(method, path, json=body, headers=sent)
        assert resp.status == status, (method, path, resp.status, await resp.text())
        return await resp.json()

    async def code(self, scope: str = "answer", token: str | None = ADMIN) -> dict[str, Any]:
        """A pairing code, as the admin token makes it."""
        made: dict[str, Any] = await self.call("POST", "/api/v1/pairings", token, {"scope": scope})
        return made

    async def phone(self, name: str = "Pixel", scope: str = "answer", **pair: Any) -> Any:
        """A phone paired with a new code: its pairing answer (``token``, ``phone_id``…)."""
        made = await self.code(scope)
        return await self.call(
            "POST", "/api/v1/pair", None, {"code": made["code"], "name": name, **pair}
        )

    async def raise_ask(self, ask_id: str = "p") -> None:
        await self.conv.ask(
            id=ask_id, kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION
        )
        await eventually(lambda: self.gw.agents.find_ask("desk", ask_id) is not None)


async def scene(rig: Rig, **settings: Any) -> Scene:
    """``desk`` and a gateway with ``settings`` (the admin token unless given)."""
    wire = Wire()
    agent = rig.agent(
        "desk",
        runtime="desk",
        features=["history", "stop", "starters"],
        middlewares=[wire.middleware()],
    )
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Tidy up")
    settings.setdefault("token", ADMIN)
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], **settings)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return Scene(rig, client, gw, agent, conv, wire)


# --- pairing ------------------------------------------------------------------------------------


async def test_a_code_pairs_one_phone_once_and_both_sides_show_the_check_number(
    rig: Rig,
) -> None:
    s = await scene(rig, public_urls=("https://gw.tail1234.ts.net",))
    made = await s.code()
    assert set(made) == {"pairing_id", "code", "link", "expires_at"}
    link = PairingLink.parse(made["link"])
    assert (link.code, link.urls, link.fingerprint) == (
        made["code"],
        ("https://gw.tail1234.ts.net",),
        None,
    )
    assert made["expires_at"] == "2026-12-02T12:05:00Z"  # the rig's clock + 5 minutes
    body = {"code": made["code"].upper(), "name": "Pixel 9", "public_key": "pk-of-the-phone"}
    paired = await s.call("POST", "/api/v1/pair", None, body)
    assert paired["scope"] == "answer"
    assert paired["check"] == check_number(made["code"], "pk-of-the-phone")
    assert paired["token"].startswith(f"collie.{paired['phone_id']}.")
    status = await s.call("GET", f"/api/v1/pairings/{made['pairing_id']}", ADMIN)
    assert status == {
        "pairing_id": made["pairing_id"],
        "state": "used",
        "phone_id": paired["phone_id"],
        "name": "Pixel 9",
        "scope": "answer",
        "check": paired["check"],
    }
    again = await s.call("POST", "/api/v1/pair", None, body, status=400)
    assert again == {"error": "pair_used", "message": USED}
    board = await s.call("GET", "/api/v1/dashboard", paired["token"])
    (section,) = [x for x in board["sections"] if x["kind"] == "durable_agents"]
    assert [row["agent"] for row in section["rows"]] == ["desk"]
    await s.call("GET", "/api/v1/dashboard", None, status=401)
    await s.call("GET", "/api/v1/dashboard", paired["token"] + "x", status=401)


async def test_an_expired_code_pairs_nothing(rig: Rig) -> None:
    s = await scene(rig)
    made = await s.code()
    rig.clock.advance(minutes=5)
    late = await s.call(
        "POST", "/api/v1/pair", None, {"code": made["code"], "name": "P"}, status=400
    )
    assert late == {"error": "pair_expired", "message": EXPIRED}
    status = await s.call("GET", f"/api/v1/pairings/{made['pairing_id']}", ADMIN)
    assert (status["state"], status["phone_id"]) == ("expired", None)
    assert await s.call("GET", "/api/v1/phones", ADMIN) == {"phones": []}


async def test_the_eleventh_wrong_code_in_a_minute_waits_and_other_phones_are_served(
    rig: Rig,
) -> None:
    s = await scene(rig)
    other = await s.phone("Other")
    made = await s.code()
    for i in range(10):
        wrong = {"code": f"aaaa-bbbb-{i:04d}", "name": "guess"}
        answer = await s.call("POST", "/api/v1/pair", None, wrong, status=400)
        assert answer == {"error": "pair_wrong", "message": WRONG}
    resp = await s.client.post("/api/v1/pair", json={"code": made["code"], "name": "late"})
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "60"
    assert await resp.json() == {
        "error": "too_many",
        "message": "Too many wrong codes. Try again in 60 s.",
    }
    await s.call("GET", "/api/v1/dashboard", other["token"])
    # The code was not looked at: it is still unused.
    status = await s.call("GET", f"/api/v1/pairings/{made['pairing_id']}", ADMIN)
    assert status["state"] == "pending"


async def test_pairings_are_the_admin_tokens_and_the_open_gateways(rig: Rig) -> None:
    s = await scene(rig)
    phone = await s.phone()
    refused = await s.call("POST", "/api/v1/pairings", phone["token"], {}, status=403)
    assert refused == {"error": "admin_only", "message": ADMIN_ONLY}
    await s.call("POST", "/api/v1/pairings", None, {}, status=401)


# --- scopes -------------------------------------------------------------------------------------


async def test_a_read_phone_sees_everything_and_nothing_it_sends_reaches_the_agent(
    rig: Rig,
) -> None:
    s = await scene(rig)
    reader = await s.phone("Tablet", scope="read")
    assert reader["scope"] == "read"
    await s.raise_ask()
    token = reader["token"]
    chat = await s.call("GET", CHAT, token)
    (card,) = chat["cards"]["cards"]
    tap = {"request_id": "r-read", "version": card["version"], "answer": {"option": "allow"}}
    acts = [
        (AGENT + "/asks/p/answer", tap),
        (CHAT + "/messages", {"request_id": "m1", "text": "hello"}),
        (CHAT + "/stop", {"request_id": "s1", "turn": 0}),
        (CHAT + "/close", {"request_id": "x1"}),
        (AGENT + "/conversations", {"request_id": "n1", "starter": "tidy"}),
        ("/api/v1/devices", {"provider": "fcm", "token": "fcm-token-1"}),
    ]
    for path, body in acts:
        refused = await s.call("POST", path, token, body, status=403)
        assert refused == {"error": "read_only", "message": READ_ONLY}, path
    assert [m for m, _, _ in s.wire.log if m == "POST"] == []  # nothing reached the agent
    await s.call("GET", "/api/v1/answers/r-read", ADMIN, status=404)  # nothing recorded
    assert await s.call("GET", "/api/v1/devices", ADMIN) == {"devices": []}
    await s.call("GET", "/api/v1/dashboard", token)
    await s.call("GET", AGENT + "/conversations", token)
    # A phone that answers does; the ledger names it.
    answerer = await s.phone("Pixel")
    tap["request_id"] = "r-answer"
    answer = await s.call("POST", AGENT + "/asks/p/answer", answerer["token"], tap)
    assert answer["outcome"] == "accepted"
    who = {"phone_id": answerer["phone_id"], "name": "Pixel"}
    assert answer["phone"] == who
    assert (await s.call("GET", "/api/v1/answers/r-answer", reader["token"]))["phone"] == who
    assert s.wire.replies("p") == ["r-answer"]


async def test_a_phone_may_take_less_than_its_code_never_more(rig: Rig) -> None:
    s = await scene(rig)
    narrowed = await s.call(
        "POST",
        "/api/v1/pair",
        None,
        {"code": (await s.code())["code"], "name": "A", "scope": "read"},
    )
    assert narrowed["scope"] == "read"
    widened = await s.call(
        "POST",
        "/api/v1/pair",
        None,
        {"code": (await s.code("read"))["code"], "name": "B", "scope": "answer"},
    )
    assert widened["scope"] == "read"


# --- listing and revoking -----------------------------------------------------------------------


async def test_phones_are_listed_without_their_tokens(rig: Rig) -> None:
    s = await scene(rig)
    first = await s.phone("Pixel")
    second = await s.phone("Tablet", scope="read")
    listed = await s.call("GET", "/api/v1/phones", second["token"])
    assert [(p["phone_id"], p["name"], p["scope"]) for p in listed["phones"]] == [
        (first["phone_id"], "Pixel", "answer"),
        (second["phone_id"], "Tablet", "read"),
    ]
    row = listed["phones"][1]
    assert row["paired_at"] == "2026-12-02T12:00:00Z"
    assert row["last_seen"] == "2026-12-02T12:00:00Z"
    assert row["last_address"] == "127.0.0.1"
    assert listed["phones"][0]["last_seen"] is None  # never used its token yet
    assert "token" not in str(listed)


async def test_a_revoked_phone_is_refused_at_once_and_its_stream_ends_within_a_second(
    rig: Rig,
) -> None:
    s = await scene(rig)
    phone = await s.phone()
    keeper = await s.phone("Keeper")
    token = phone["token"]
    device = await s.call("POST", "/api/v1/devices", token, {"provider": "fcm", "token": "fcm-1"})
    kept = await s.call(
        "POST", "/api/v1/devices", keeper["token"], {"provider": "fcm", "token": "fcm-2"}
    )
    stream = await s.client.get("/api/v1/events", headers=bearer(token))
    other = await s.client.get("/api/v1/events", headers=bearer(keeper["token"]))
    assert (await stream.content.readuntil(b"\n\n")).startswith(b"event: stream")
    assert (await other.content.readuntil(b"\n\n")).startswith(b"event: stream")
    revoked = await s.call("DELETE", f"/api/v1/phones/{phone['phone_id']}", ADMIN)
    assert revoked == {"revoked": phone["phone_id"]}
    started = time.monotonic()
    async with asyncio.timeout(1.0):
        assert await stream.content.read() == b""  # the stream ended
    assert time.monotonic() - started < 1.0
    await s.call("GET", "/api/v1/dashboard", token, status=401)
    devices = await s.call("GET", "/api/v1/devices", ADMIN)
    assert [d["device_id"] for d in devices["devices"]] == [kept["device_id"]]
    assert device["device_id"] != kept["device_id"]
    listed = await s.call("GET", "/api/v1/phones", ADMIN)
    assert [p["name"] for p in listed["phones"]] == ["Keeper"]
    # The other phone's stream goes on.
    s.gw.bus.publish("test.ping", {"n": 1})
    assert b"test.ping" in await other.content.readuntil(b"\n\n")
    other.close()
    again = await s.call("DELETE", f"/api/v1/phones/{phone['phone_id']}", ADMIN, status=404)
    assert again["error"] == "not_found"


async def test_a_phone_revokes_itself_but_no_other(rig: Rig) -> None:
    s = await scene(rig)
    mine, theirs = await s.phone("Mine"), await s.phone("Theirs", scope="read")
    refused = await s.call(
        "DELETE", f"/api/v1/phones/{mine['phone_id']}", theirs["token"], status=403
    )
    assert refused == {"error": "admin_only", "message": ADMIN_ONLY}
    gone = await s.call("DELETE", "/api/v1/phones/me", theirs["token"])  # a read phone too
    assert gone == {"revoked": theirs["phone_id"]}
    await s.call("GET", "/api/v1/phones", theirs["token"], status=401)
    await s.call("GET", "/api/v1/phones", mine["token"])


async def test_the_token_is_in_neither_the_sqlite_file_nor_the_log(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    s = await scene(rig)
    made = await s.code()
    paired = await s.call("POST", "/api/v1/pair", None, {"code": made["code"], "name": "Pixel"})
    token = paired["token"]
    await s.raise_ask()
    tap = {"request_id": "r-log", "version": 1, "answer": {"option": "allow"}}
    await s.call("POST", AGENT + "/asks/p/answer", token, tap)
    await s.call("GET", "/api/v1/dashboard", token[:-2] + "zz", status=401)
    await s.gw.phones.close()  # last_seen written
    secret = token.rsplit(".", 1)[1]
    stored = b"".join(p.read_bytes() for p in rig.tmp.iterdir() if p.name.startswith("gateway.db"))
    assert token_hash(token).encode() in stored
    assert secret.encode() not in stored
    assert made["code"].replace("-", "").encode() not in stored
    assert secret not in caplog.text
    assert f"answer r-log to desk/p by phone {paired['phone_id']}" in caplog.text
    assert f"phone {paired['phone_id']} ('Pixel', answer) paired" in caplog.text


# --- where auth applies -------------------------------------------------------------------------


async def test_loopback_is_open_until_a_phone_pairs(rig: Rig) -> None:
    s = await scene(rig, token=None)
    await s.call("GET", "/api/v1/dashboard")
    made = await s.code(token=None)  # the open gateway may pair: nothing else guards it
    paired = await s.call("POST", "/api/v1/pair", None, {"code": made["code"], "name": "First"})
    await s.call("GET", "/api/v1/dashboard", status=401)
    await s.call("POST", "/api/v1/pairings", None, {}, status=401)
    await s.call("GET", "/api/v1/dashboard", paired["token"])
    await s.call("GET", "/healthz")


async def test_auth_always_needs_a_credential_on_loopback_from_the_start(rig: Rig) -> None:
    s = await scene(rig, token=None, auth="always")
    await s.call("GET", "/api/v1/dashboard", status=401)
    await s.call("GET", "/healthz")


async def test_a_public_url_closes_loopback_a_tunnels_requests_come_from_there(
    rig: Rig,
) -> None:
    s = await scene(rig, public_urls=("https://collie.example.com",))
    await s.call("GET", "/api/v1/dashboard", status=401)


# --- the page: its cookie and its origin --------------------------------------------------------


async def test_the_pages_cookie_is_http_only_strict_and_acts_only_from_its_own_origin(
    rig: Rig,
) -> None:
    s = await scene(rig)
    own = str(s.client.make_url("/")).rstrip("/")
    made = await s.code()
    evil = await s.call(
        "POST",
        "/api/v1/pair",
        None,
        {"code": made["code"], "name": "page", "session": True},
        status=403,
        Origin="https://evil.example",
    )
    assert evil == {"error": "wrong_origin", "message": WRONG_ORIGIN}
    resp = await s.client.post(
        "/api/v1/pair",
        json={"code": made["code"], "name": "Web companion", "session": True},
        headers={"Origin": own},
    )
    assert resp.status == 200
    paired = await resp.json()
    assert paired["token"] is None  # the cookie holds it: no script sees it
    cookie = resp.headers["Set-Cookie"]
    assert cookie.startswith("collie_session=collie.")
    for part in ("HttpOnly", "SameSite=Strict", "Path=/"):
        assert part in cookie
    assert "Secure" not in cookie  # plain HTTP on loopback
    await s.call("GET", "/api/v1/dashboard")  # the cookie alone
    await s.raise_ask()
    tap = {"request_id": "r-page", "version": 1, "answer": {"option": "allow"}}
    for origin in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {}):
        refused = await s.call("POST", AGENT + "/asks/p/answer", None, tap, status=403, **origin)
        assert refused == {"error": "wrong_origin", "message": WRONG_ORIGIN}
    assert s.wire.replies() == []
    answer = await s.call("POST", AGENT + "/asks/p/answer", None, tap, Origin=own)
    assert answer["outcome"] == "accepted"
    assert answer["phone"]["name"] == "Web companion"
    gone = await s.call("DELETE", "/api/v1/phones/me", None, Origin=own)
    assert gone == {"revoked": paired["phone_id"]}
    await s.call("GET", "/api/v1/dashboard", status=401)


# --- a client of the tests' own that misbehaves -------------------------------------------------


async def test_huge_bodies_wrong_types_and_10000_pairings_while_other_phones_are_served(
    rig: Rig,
) -> None:
    s = await scene(rig)
    phone = await s.phone("Served")
    began = time.monotonic()  # the first failure below opens the limiter's first window
    body = io.BytesIO(b"{" + b" " * (2 * 1024 * 1024) + b"}")
    huge = await s.client.post("/api/v1/pair", data=body)
    assert huge.status == 413
    for bad in (b"not json", b'{"code": 5, "name": "x"}', b'{"code": "c", "name": []}', b"[]"):
        resp = await s.client.post("/api/v1/pair", data=bad)
        assert resp.status == 400, bad
        assert (await resp.json())["error"] == "bad_request"
    wrong = await s.client.post("/api/v1/pair", json={"code": "x", "name": "y", "admin": True})
    assert wrong.status == 400  # an unknown field
    blank = await s.client.post("/api/v1/pair", json={"code": "x", "name": "\u200b\x07 "})
    assert await blank.json() == {"error": "bad_request", "message": "name: no visible characters"}
    statuses: dict[int, int] = {}
    served: list[float] = []

    async def attacker(n: int) -> None:
        for i in range(n):
            resp = await s.client.post("/api/v1/pair", json={"code": f"guess-{i}", "name": "x"})
            statuses[resp.status] = statuses.get(resp.status, 0) + 1
            resp.release()

    async def other_phone(stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            await s.call("GET", "/api/v1/dashboard", phone["token"])
            served.append(time.monotonic() - started)
            await asyncio.sleep(0.02)

    stop = asyncio.Event()
    watcher = asyncio.create_task(other_phone(stop))
    await asyncio.gather(*(attacker(500) for _ in range(20)))  # 10,000 attempts
    minutes = int((time.monotonic() - began) // 60) + 1  # a loaded machine may take longer
    stop.set()
    await watcher
    # The four garbage bodies, the unknown field and the blank name counted as failures:
    # 4 more wrong codes get their 400 in the first minute, 10 in each one after.
    assert set(statuses) == {400, 429}
    assert statuses[400] <= 4 + 10 * (minutes - 1)
    assert statuses[400] + statuses[429] == 10_000
    assert len(served) >= 5  # the other phone was answered all along (no time bound: load)
    await s.call("GET", "/api/v1/dashboard", phone["token"])


# --- who answered, told to the webhook ----------------------------------------------------------


async def test_the_webhook_names_the_phone_whose_answer_the_agent_took(rig: Rig) -> None:
    secret = b"whsec_phones_test"
    async with receiver([secret]) as hook:

        def targets(content: Content) -> PushTargets:
            return PushTargets(webhooks=[WebhookTarget(hook.url, [secret], timeout=2.0)])

        s = await scene(rig, push_targets=targets, machine="workshop")
        phone = await s.phone("Pixel")
        await s.raise_ask()
        tap = {"request_id": "r-hook", "version": 1, "answer": {"option": "allow"}}
        answer = await s.call("POST", AGENT + "/asks/p/answer", phone["token"], tap)
        assert answer["outcome"] == "accepted"
        await eventually(lambda: any("answered" in body for body in hook.accepted))
    answered = [body for body in hook.accepted if "answered" in body]
    assert answered == [
        {
            "machine": "workshop",
            "agent": "desk",
            "answered": {
                "ask_id": "p",
                "request_id": "r-hook",
                "phone": {"phone_id": phone["phone_id"], "name": "Pixel"},
            },
        }
    ]
    assert hook.refused == []


async def test_refusals_are_worded_in_the_phones_language(rig: Rig) -> None:
    s = await scene(rig)
    reader = await s.phone("Tablet", scope="read")
    wrong = await s.call(
        "POST", "/api/v1/pair", None, {"code": "nope", "name": "x"}, status=400,
        **{"Accept-Language": "it-IT,it;q=0.9"},
    )  # fmt: skip
    assert wrong["message"] == (
        "Questo codice non è corretto. Controllalo, o creane uno nuovo con collie-gateway pair."
    )
    body = {"request_id": "m1", "text": "ciao"}
    refused = await s.call(
        "POST", CHAT + "/messages", reader["token"], body, status=403,
        **{"Accept-Language": "pt-BR"},
    )  # fmt: skip
    assert refused["message"] == (
        "Este telefone só pode ler: nada foi enviado. Responda de um telefone pareado para "
        "responder."
    )
