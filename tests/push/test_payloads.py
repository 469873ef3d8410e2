"""Payloads: P2 wording, cleaning, X1 masking before cutting, sizes, the envelope."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from collie_gateway.strings import Catalogue
from push import (
    AskNotification,
    Content,
    Device,
    ManyAsksNotification,
    NoticeNotification,
    PayloadTooLarge,
    Provider,
    apns_request,
    clean,
    collapse_id,
    cut,
    fcm_message,
    open_envelope,
    seal,
)
from push.payloads import APNS_MAX_PAYLOAD, FCM_MAX_PAYLOAD
from tests.push.conftest import T0, apns_device, fcm_device

FIXTURES = Path(__file__).parents[2] / "fixtures" / "push"


def note(**changes: object) -> AskNotification:
    fields: dict[str, object] = {
        "machine": "m1",
        "agent": "desk",
        "conversation": "c1",
        "ask": "a1",
        "pane_key": "m1/desk/c1",
        "pane": "Refactor parser",
        "title": "Run the tests?",
        "line": "pytest -q",
    }
    fields.update(changes)
    return AskNotification(**fields)  # type: ignore[arg-type]


def apns_json(
    device: Device, n: AskNotification | ManyAsksNotification | NoticeNotification, content: Content
) -> dict[str, object]:
    body = apns_request(device, n, topic="t", content=content, now=T0).body
    obj = json.loads(body)
    assert isinstance(obj, dict)
    return obj


def alert(
    device: Device, n: AskNotification | ManyAsksNotification | NoticeNotification, content: Content
) -> dict[str, str]:
    aps = apns_json(device, n, content)["aps"]
    assert isinstance(aps, dict)
    result = aps["alert"]
    assert isinstance(result, dict)
    return result


@pytest.mark.parametrize(
    "vector",
    json.loads((FIXTURES / "text_vectors.json").read_text(encoding="utf-8")),
    ids=lambda v: v["description"],
)
def test_A6_text_vectors(vector: dict[str, object]) -> None:
    text = vector["input"]
    assert isinstance(text, str)
    if vector["op"] == "clean":
        assert clean(text) == vector["expect"]
    else:
        limit = vector["limit"]
        assert isinstance(limit, int)
        assert cut(text, limit) == vector["expect"]


def test_P2_wording_comes_from_the_catalogue(content: Content) -> None:
    assert alert(apns_device(), note(), content) == {
        "title": "Permission needed in Refactor parser",
        "subtitle": "Run the tests?",
        "body": "pytest -q",
    }
    italian = Content(strings=Catalogue({"push_permission": "Permesso richiesto in {pane}"}))
    assert alert(apns_device(), note(), italian)["title"] == "Permesso richiesto in Refactor parser"
    plain = Content(strings={"push_permission": "Needs you: {pane}", "push_private": "x"})
    assert alert(apns_device(), note(title=None, line=None), plain) == {
        "title": "Needs you: Refactor parser"
    }


def test_P2_title_at_most_60_and_line_at_most_120(content: Content) -> None:
    exact = alert(apns_device(), note(title="t" * 60, line="l" * 120), content)
    assert exact["subtitle"] == "t" * 60
    assert exact["body"] == "l" * 120
    over = alert(apns_device(), note(title="t" * 61, line="l" * 500), content)
    assert over["subtitle"] == "t" * 59 + "…"
    assert len(over["subtitle"]) == 60
    assert over["body"] == "l" * 119 + "…"
    assert len(over["body"]) == 120


def test_P2_texts_are_cleaned(content: Content) -> None:
    got = alert(
        apns_device(),
        note(pane="a\u202eb", title="rm\u2066 -rf\u2069\n/", line="x\x00y\u200f\tz"),
        content,
    )
    assert got == {"title": "Permission needed in ab", "subtitle": "rm -rf /", "body": "xy z"}


SECRET = re.compile(r"sk-[A-Za-z0-9]+")


def mask(text: str) -> str:
    return SECRET.sub("[secret]", text)


def test_X1_secrets_are_masked_before_cutting() -> None:
    content = Content(strings=Catalogue(), redact=mask)
    title = "x" * 50 + " sk-" + "A" * 30  # the secret straddles the 60th character
    line = "token sk-ABCDEF then " + "y" * 200
    got = alert(apns_device(), note(title=title, line=line, pane="deploy sk-PANE9"), content)
    assert "sk-" not in json.dumps(got)
    assert got["subtitle"] == "x" * 50 + " [secret]"
    assert got["body"].startswith("token [secret] then ")
    assert len(got["body"]) == 120
    assert got["title"] == "Permission needed in deploy [secret]"


def test_X1_secrets_are_masked_inside_the_envelope_too() -> None:
    content = Content(strings=Catalogue(), redact=mask)
    device = apns_device("d", key=b"\x01" * 32)
    collie = apns_json(device, note(title="key sk-XYZ"), content)["collie"]
    assert isinstance(collie, dict)
    inner = json.loads(open_envelope(b"\x01" * 32, "d", collie["e"]))
    assert inner["title"] == "key [secret]"


def test_P2_the_line_gives_way_first_to_fit_4096_bytes(content: Content) -> None:
    wide = "𝕏" * 225  # 4 UTF-8 bytes each: 900 bytes per id
    n = note(machine=wide, agent=wide, conversation=wide, ask=wide, line="€" * 200, title="t" * 80)
    req = apns_request(apns_device(), n, topic="t", content=content, now=T0)
    assert len(req.body) <= APNS_MAX_PAYLOAD
    got = json.loads(req.body)["aps"]["alert"]
    assert got["subtitle"] == "t" * 59 + "…"  # the title is whole (as cut by P2)
    assert got["body"].endswith("…")
    assert len(got["body"]) < 120
    assert len(req.body) > APNS_MAX_PAYLOAD - 8  # ... and no more than needed


def test_P2_private_payload_fits_4096_bytes(content: Content) -> None:
    wide = "𝕏" * 180
    n = note(machine=wide, agent=wide, conversation=wide, ask="a", line="€" * 200)
    device = apns_device("d", key=b"\x02" * 32)
    req = apns_request(device, n, topic="t", content=content, now=T0)
    assert len(req.body) <= APNS_MAX_PAYLOAD
    inner = json.loads(open_envelope(b"\x02" * 32, "d", json.loads(req.body)["collie"]["e"]))
    assert inner["line"].endswith("…")
    assert inner["conversation"] == wide


def test_fcm_fits_4096_bytes(content: Content) -> None:
    wide = "𝕏" * 200
    n = note(machine=wide, agent=wide, conversation=wide, ask=wide, line="€" * 200)
    message = fcm_message(fcm_device(), n, content=content, now=T0)["message"]
    assert isinstance(message, dict)
    size = len(json.dumps(message["notification"], ensure_ascii=False).encode())
    size += len(json.dumps(message["data"], ensure_ascii=False).encode())
    assert size <= FCM_MAX_PAYLOAD
    assert message["notification"]["body"].endswith("…")


def test_payload_too_large_when_even_empty_texts_do_not_fit(content: Content) -> None:
    n = note(machine="m" * 5000)
    with pytest.raises(PayloadTooLarge):
        apns_request(apns_device(), n, topic="t", content=content, now=T0)
    with pytest.raises(PayloadTooLarge):
        fcm_message(fcm_device(), n, content=content, now=T0)


def test_apns_headers_and_expiration(content: Content) -> None:
    req = apns_request(
        apns_device(), note(deadline=T0 + 60.01), topic="org.x", content=content, now=T0
    )
    assert req.path == "/3/device/" + "a1" * 32
    assert req.headers["apns-push-type"] == "alert"
    assert req.headers["apns-priority"] == "10"
    assert req.headers["apns-topic"] == "org.x"
    assert req.headers["apns-expiration"] == str(int(T0) + 61)
    # Issue 10.4: without a deadline a push waits an hour by default for an offline phone.
    assert apns_request(apns_device(), note(), topic="t", content=content, now=T0).headers[
        "apns-expiration"
    ] == str(int(T0) + 3600)
    at_once = Content(strings=Catalogue(), default_ttl=0)
    assert (
        apns_request(apns_device(), note(), topic="t", content=at_once, now=T0).headers[
            "apns-expiration"
        ]
        == "0"
    )
    waiting = Content(strings=Catalogue(), default_ttl=600)
    assert apns_request(apns_device(), note(), topic="t", content=waiting, now=T0).headers[
        "apns-expiration"
    ] == str(int(T0) + 600)


def test_P2_fcm_ttl_without_a_deadline_is_an_hour_by_default() -> None:
    message = fcm_message(fcm_device(), note(), content=Content(strings=Catalogue()), now=T0)
    assert message["message"]["android"]["ttl"] == "3600s"  # type: ignore[index]


@pytest.mark.parametrize(
    ("deadline", "default_ttl", "ttl"),
    [(T0 + 90.2, 0.0, "91s"), (T0 - 5, 0.0, "0s"), (None, 0.0, "0s"), (None, 600.0, "600s")],
)
def test_fcm_ttl_runs_to_the_deadline(deadline: float | None, default_ttl: float, ttl: str) -> None:
    content = Content(strings=Catalogue(), default_ttl=default_ttl)
    message = fcm_message(fcm_device(), note(deadline=deadline), content=content, now=T0)["message"]
    assert isinstance(message, dict)
    assert message["android"]["ttl"] == ttl


def test_collapse_id_per_pane_and_keyed_for_private_devices() -> None:
    a, b = note(ask="a1"), note(ask="a2")
    other = note(pane_key="m1/desk/c2")
    assert collapse_id(a) == collapse_id(b) != collapse_id(other)
    key = b"\x03" * 32
    assert collapse_id(a, key) == collapse_id(b, key) != collapse_id(a)
    assert len(collapse_id(a)) == 32
    assert "desk" not in collapse_id(a)
    many = ManyAsksNotification(machine="m1", agent="desk", host="studio")
    assert collapse_id(many) not in {collapse_id(a), collapse_id(other)}


def test_P1_many_asks_push(content: Content) -> None:
    many = ManyAsksNotification(machine="m1", agent="desk", host="studio\u202e")
    obj = apns_json(apns_device(), many, content)
    assert obj["aps"]["alert"] == {"title": "A durable agent on studio is raising many asks"}  # type: ignore[index]
    assert obj["collie"] == {"type": "many", "machine": "m1", "agent": "desk"}
    message = fcm_message(fcm_device(), many, content=content, now=T0)["message"]
    assert message["notification"] == {"title": "A durable agent on studio is raising many asks"}  # type: ignore[index]
    private = apns_json(apns_device("d", key=b"\x04" * 32), many, content)
    envelope = private["collie"]["e"]  # type: ignore[index]
    assert "studio" not in json.dumps(private).replace(envelope, "")
    inner = json.loads(open_envelope(b"\x04" * 32, "d", envelope))
    assert inner["headline"] == "A durable agent on studio is raising many asks"


def test_envelope_format_and_authentication() -> None:
    key, plaintext = b"\x05" * 32, b'{"ask":"a1"}'
    sealed = seal(key, "dev-1", plaintext)
    raw = base64.b64decode(sealed)
    assert raw[0] == 1
    assert len(raw) == 1 + 12 + len(plaintext) + 16
    assert open_envelope(key, "dev-1", sealed) == plaintext
    assert seal(key, "dev-1", plaintext) != sealed  # a fresh nonce each time
    with pytest.raises(InvalidTag):
        open_envelope(key, "dev-2", sealed)  # the device id is authenticated
    with pytest.raises(InvalidTag):
        open_envelope(b"\x06" * 32, "dev-1", sealed)
    tampered = bytearray(raw)
    tampered[-1] ^= 1
    with pytest.raises(InvalidTag):
        open_envelope(key, "dev-1", base64.b64encode(tampered).decode())
    with pytest.raises(ValueError, match="version 1"):
        open_envelope(key, "dev-1", base64.b64encode(b"\x02" + raw[1:]).decode())
    with pytest.raises(ValueError, match="nonce"):
        seal(key, "dev-1", plaintext, nonce=b"short")


@pytest.mark.parametrize(
    "vector",
    json.loads((FIXTURES / "envelope_vectors.json").read_text(encoding="utf-8")),
    ids=lambda v: v["description"][:40],
)
def test_envelope_vectors(vector: dict[str, object]) -> None:
    given = vector["input"]
    assert isinstance(given, dict)
    key, nonce = bytes.fromhex(given["key_hex"]), bytes.fromhex(given["nonce_hex"])
    sealed = seal(key, given["device_id"], given["plaintext"].encode(), nonce=nonce)
    assert sealed == vector["expect"]
    raw = base64.b64decode(sealed)
    assert (
        AESGCM(key).decrypt(raw[1:13], raw[13:], given["device_id"].encode())
        == given["plaintext"].encode()
    )


def test_a_device_key_has_32_bytes() -> None:
    with pytest.raises(ValueError, match="32"):
        Device(id="d", provider=Provider.APNS, token="ab", registered_at=T0, key=b"short")


def notice(**changes: object) -> NoticeNotification:
    fields: dict[str, object] = {
        "machine": "m1",
        "agent": "claude-code",
        "conversation": "c1",
        "item": "n1",
        "pane_key": "m1/claude-code/c1",
        "pane": "Claude Code · shop",
        "title": "Claude Code finished in shop",
        "line": "All tests pass",
        "words": ("say_hooks_finished", (("client", "Claude Code"), ("folder", "shop sk-F0LD"))),
    }
    fields.update(changes)
    return NoticeNotification(**fields)  # type: ignore[arg-type]


def test_P2_X1_a_notice_is_worded_per_device_masked_also_in_its_envelope() -> None:
    content = Content(strings=Catalogue(), redact=mask, languages={"it": Catalogue(lang="it")})
    italian = Device(id="d", provider=Provider.APNS, token="a1" * 32, registered_at=T0, lang="it")
    got = alert(italian, notice(line="token sk-ABC " + "y" * 200), content)
    assert got == {"title": "Claude Code ha finito in shop [secret]", "body": got["body"]}
    assert got["body"].startswith("token [secret] ")
    assert len(got["body"]) == 120
    assert alert(apns_device(), notice(words=None), content)["title"] == (
        "Claude Code finished in shop"
    )
    unknown = notice(words=("say_nothing_here", ()), title="Done")
    assert alert(apns_device(), unknown, content)["title"] == "Done"
    device = apns_device("d", key=b"\x03" * 32)
    collie = apns_json(device, notice(), content)["collie"]
    assert isinstance(collie, dict)
    inner = json.loads(open_envelope(b"\x03" * 32, "d", collie["e"]))
    assert (inner["type"], inner["item"], inner["headline"], inner["line"]) == (
        "notice", "n1", "Claude Code finished in shop [secret]", "All tests pass",
    )  # fmt: skip
    assert collapse_id(notice()) != collapse_id(note(pane_key="m1/claude-code/c1"))
