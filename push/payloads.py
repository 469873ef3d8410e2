"""Notification -> APNs and FCM payloads: wording (P2), cleaning, masking (X1), cutting,
the private envelope, and the services' size limits. Pure: no I/O, ``now`` passed in.

Text pipeline, for each of the pane's name, the agent's title and its line:
clean (drop control characters and bidi controls, fold whitespace) -> redact -> cut.
Masking comes before cutting, so a cut can never leave half a secret unmasked.

Private envelope (a device that registered a 32-byte key): the title, the line, the pane and
every id travel only inside ``base64(version || nonce || ciphertext+tag)``, where version is
the byte 0x01, nonce 12 random bytes, and ciphertext+tag AES-256-GCM of a UTF-8 JSON object
under the device's key with the device id (UTF-8) as associated data. The visible alert is
the catalogue's ``push_private``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import os
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from push.errors import PayloadTooLarge
from push.models import (
    AskNotification,
    Device,
    Forwarded,
    Message,
    NoticeNotification,
    Notification,
    PingNotification,
    Urgency,
    Withdrawal,
)

TITLE_MAX: Final = 60  # spec P2
LINE_MAX: Final = 120  # spec P2
PANE_MAX: Final = 60  # ours: a pane's name is cut like a title
APNS_MAX_PAYLOAD: Final = 4096  # Apple: alert notifications
FCM_MAX_PAYLOAD: Final = 4096  # FCM: data and notification of one message
# A relayed Web Push body travels base64 inside an APNs or FCM payload of 4096 bytes: the
# relay takes bodies up to RELAY_MAX_BODY, so every Web Push plaintext the gateway makes
# fits it (body = 86 header + plaintext + 1 delimiter + 16 tag, RFC 8188 §2).
RELAY_MAX_BODY: Final = 2816
WEBPUSH_MAX_PLAINTEXT: Final = RELAY_MAX_BODY - 86 - 1 - 16
TOPIC_CHARS: Final = 32  # RFC 8030 §5.4: at most 32 base64url characters
ENVELOPE_VERSION: Final = 1
NONCE_BYTES: Final = 12
ELLIPSIS: Final = "…"
# Ours (the spec leaves push expiry open): a push without a deadline waits an hour.
DEFAULT_TTL: Final = 3600.0
_APNS_ID_NAMESPACE: Final = uuid.UUID("6f1d4c2e-8a53-4b0e-9c57-2f0a6d3c9e41")

BIDI_CONTROLS: Final = (
    "\u202a\u202b\u202c\u202d\u202e"  # embeddings and overrides
    "\u2066\u2067\u2068\u2069"  # isolates
    "\u200e\u200f\u061c"  # marks
)
_FOLD_TO_SPACE: Final = "\t\n\v\f\r\x85\u2028\u2029"


def _clean_table() -> dict[int, int | None]:
    table: dict[int, int | None] = {}
    for cp in [*range(0x20), *range(0x7F, 0xA0), *range(0xD800, 0xE000)]:
        table[cp] = None  # C0, DEL, C1 controls; lone surrogates cannot be encoded
    for ch in BIDI_CONTROLS:
        table[ord(ch)] = None
    for ch in _FOLD_TO_SPACE:
        table[ord(ch)] = 0x20
    return table


_CLEAN: Final = _clean_table()
_TRAILING_JOINERS: Final = "\u200d\ufe0e\ufe0f "
_APNS_TOKEN: Final = re.compile(r"[0-9A-Fa-f]{16,200}", re.ASCII)


class Strings(Protocol):
    """What the payloads need of the phone's string catalogue: lookup by key."""

    def __getitem__(self, key: str, /) -> str: ...


Redact = Callable[[str], str]


def _identity(text: str) -> str:
    return text


@dataclass(frozen=True, slots=True, kw_only=True)
class Content:
    """How pushes are worded: the catalogue (keys ``push_permission``, ``push_many``,
    ``push_test``, ``push_private``) of the default language and of each other language by
    tag, the secret masking function, and how long a push without a deadline may wait for a
    phone that is offline (``DEFAULT_TTL``, an hour; 0: APNs and FCM try once and do not
    store it).

    Usage: ``Content(strings=Catalogue(), languages={"it": Catalogue(lang="it")})``.
    """

    strings: Strings
    redact: Callable[[str], str] = _identity
    default_ttl: float = DEFAULT_TTL
    languages: Mapping[str, Strings] = field(default_factory=dict)

    def words(self, device: Device) -> Strings:
        """The catalogue a push to ``device`` is worded from: its language's, else the
        default's."""
        if device.lang is None:
            return self.strings
        return self.languages.get(device.lang, self.strings)


def clean(text: str) -> str:
    """``text`` without control characters, bidi controls or lone surrogates, its
    whitespace folded to single spaces."""
    return " ".join(text.translate(_CLEAN).split())


def cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in "…" when cut."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    return text[: limit - 1].rstrip(_TRAILING_JOINERS) + ELLIPSIS


def valid_apns_token(token: str) -> bool:
    """Whether ``token`` looks like an APNs device token (hex)."""
    return _APNS_TOKEN.fullmatch(token) is not None


def collapse_id(note: Notification | Withdrawal, key: bytes | None = None) -> str:
    """The collapse id: one per pane for an ask (and its withdrawal), one per agent for the
    many-asks push.

    Keyed with the device's envelope key when it has one, so the id reveals nothing.
    """
    if isinstance(note, AskNotification | Withdrawal):
        scope = json.dumps(["pane", note.pane_key], ensure_ascii=False)
    elif isinstance(note, NoticeNotification):
        scope = json.dumps(["notice", note.pane_key], ensure_ascii=False)
    else:
        scope = json.dumps(["agent", note.machine, note.agent], ensure_ascii=False)
    data = scope.encode()
    if key is not None:
        return hmac.new(key, data, hashlib.sha256).hexdigest()[:32]
    return hashlib.sha256(b"collie-collapse\0" + data).hexdigest()[:32]


def apns_id(note: Message, device: Device) -> str:
    """The ``apns-id`` of ``note`` to ``device``: derived from the note's ``push_id`` (the
    same in every run, so a push sent again after a restart shows once), else random. A
    withdrawal has its own id beside its ask's; a relayed message keeps the relay's."""
    if isinstance(note, Forwarded):
        return note.message_id or str(uuid.uuid4())
    if note.push_id is None:
        return str(uuid.uuid4())
    name = f"{note.push_id}\0{device.id}"
    if isinstance(note, Withdrawal):
        name += "\0withdraw"
    return str(uuid.uuid5(_APNS_ID_NAMESPACE, name))


def topic(note: Notification | Withdrawal, key: bytes | None = None) -> str:
    """The Web Push ``Topic`` of ``note`` (RFC 8030 §5.4): one per ask, the same for the
    ask's withdrawal, so a withdrawal replaces an ask push the service still holds. 32
    base64url characters, keyed like :func:`collapse_id`."""
    if note.push_id is not None:
        scope = json.dumps(["push", note.push_id], ensure_ascii=False)
    elif isinstance(note, AskNotification | Withdrawal):
        scope = json.dumps(["ask", note.machine, note.agent, note.conversation, note.ask])
    else:
        scope = json.dumps(["agent", note.machine, note.agent], ensure_ascii=False)
    data = b"collie-topic\0" + scope.encode()
    digest = hmac.new(key, data, hashlib.sha256).digest() if key else hashlib.sha256(data).digest()
    return base64.urlsafe_b64encode(digest[:24]).decode("ascii")


def seal(key: bytes, device_id: str, plaintext: bytes, *, nonce: bytes | None = None) -> str:
    """The private envelope of ``plaintext`` (format in the module docstring)."""
    nonce = os.urandom(NONCE_BYTES) if nonce is None else nonce
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"a nonce has {NONCE_BYTES} bytes")
    sealed = AESGCM(key).encrypt(nonce, plaintext, device_id.encode())
    return base64.b64encode(bytes([ENVELOPE_VERSION]) + nonce + sealed).decode("ascii")


def open_envelope(key: bytes, device_id: str, envelope: str) -> bytes:
    """The plaintext of a private envelope (what the phone does).

    Raises:
        ValueError: not an envelope of this version.
        cryptography.exceptions.InvalidTag: wrong key or device id, or tampered.
    """
    raw = base64.b64decode(envelope, validate=True)
    if len(raw) < 1 + NONCE_BYTES + 16 or raw[0] != ENVELOPE_VERSION:
        raise ValueError("not a version 1 envelope")
    return AESGCM(key).decrypt(raw[1 : 1 + NONCE_BYTES], raw[1 + NONCE_BYTES :], device_id.encode())


# --- texts ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Texts:
    headline: str
    title: str
    line: str
    pane: str


class _Source:
    """A notification's texts cleaned and masked, ready to cut to any lengths."""

    __slots__ = ("line", "note", "pane", "strings", "title")

    def __init__(self, note: Notification, content: Content, strings: Strings) -> None:
        self.note = note
        self.strings = strings
        if isinstance(note, AskNotification | NoticeNotification):
            redact = content.redact
            self.pane = redact(clean(note.pane))
            self.title = redact(clean(_title(note, strings, redact)))
            self.line = redact(clean(note.line or ""))
        else:
            self.pane = clean(note.host)
            self.title = self.line = ""

    def texts(self, pane_max: int, title_max: int, line_max: int) -> _Texts:
        pane = cut(self.pane, pane_max)
        if isinstance(self.note, NoticeNotification):  # its title is the headline
            return _Texts(cut(self.title, title_max), "", cut(self.line, line_max), pane)
        if isinstance(self.note, AskNotification):
            headline = self.strings["push_permission"].format(pane=pane)
        elif isinstance(self.note, PingNotification):
            headline = self.strings["push_test"].format(host=pane)
        else:
            headline = self.strings["push_many"].format(host=pane)
        return _Texts(headline, cut(self.title, title_max), cut(self.line, line_max), pane)


def _title(note: AskNotification | NoticeNotification, strings: Strings, redact: Redact) -> str:
    """The title: a notice's words in the device's language (each argument cleaned and
    masked, X1), else the title given."""
    if isinstance(note, AskNotification) or note.words is None:
        return note.title or ""
    key, args = note.words
    try:
        return strings[key].format(**{k: redact(clean(v)) for k, v in args})
    except (KeyError, IndexError, ValueError):
        return note.title


def _fit(source: _Source, build: Callable[[_Texts], bytes], limit: int) -> _Texts:
    """The longest texts whose payload fits ``limit`` bytes: the line gives way
    first, then the title, then the pane's name.

    Raises:
        PayloadTooLarge: it does not fit with all three empty.
    """
    maxes = [
        min(PANE_MAX, len(source.pane)),
        min(TITLE_MAX, len(source.title)),
        min(LINE_MAX, len(source.line)),
    ]
    texts = source.texts(*maxes)
    if len(build(texts)) <= limit:
        return texts
    for i in (2, 1, 0):
        best: _Texts | None = None
        lo, hi = 0, maxes[i] - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            trial = list(maxes)
            trial[i] = mid
            candidate = source.texts(*trial)
            if len(build(candidate)) <= limit:
                best, lo = candidate, mid + 1
            else:
                hi = mid - 1
        if best is not None:
            return best
        maxes[i] = 0
    raise PayloadTooLarge(f"over {limit} bytes with every text empty")


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _ids(note: Notification | Withdrawal) -> dict[str, str]:
    if isinstance(note, AskNotification | Withdrawal):
        return {
            "type": "withdraw" if isinstance(note, Withdrawal) else "ask",
            "machine": note.machine,
            "agent": note.agent,
            "conversation": note.conversation,
            "ask": note.ask,
        }
    if isinstance(note, NoticeNotification):
        return {
            "type": "notice",
            "machine": note.machine,
            "agent": note.agent,
            "conversation": note.conversation,
            "item": note.item,
        }
    kind = "test" if isinstance(note, PingNotification) else "many"
    return {"type": kind, "machine": note.machine, "agent": note.agent}


def _envelope(device: Device, note: Notification, texts: _Texts) -> str:
    assert device.key is not None
    inner: dict[str, object] = {"v": ENVELOPE_VERSION, **_ids(note), "headline": texts.headline}
    if isinstance(note, AskNotification | NoticeNotification):
        inner.update(pane=texts.pane, title=texts.title, line=texts.line)
    return seal(device.key, device.id, _json(inner))


def _expiry(note: Notification | Withdrawal, content: Content, now: float) -> float | None:
    if not isinstance(note, Withdrawal) and note.deadline is not None:
        return note.deadline
    if content.default_ttl > 0:
        return now + content.default_ttl
    return None


# --- APNs ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApnsRequest:
    """One APNs request but its ``authorization`` and ``apns-id`` headers."""

    path: str
    headers: Mapping[str, str]
    body: bytes


def apns_request(
    device: Device,
    note: Message,
    *,
    topic: str,
    content: Content,
    now: float,
) -> ApnsRequest:
    """The APNs request for ``note`` to ``device``: an alert for a notification or an
    alerting relayed message, a background push (``content-available``, priority 5) for a
    withdrawal or a silent relayed message.

    Raises:
        PayloadTooLarge: the payload cannot fit 4096 bytes.
    """
    if isinstance(note, Withdrawal):
        return _apns_withdrawal(device, note, topic=topic, content=content, now=now)
    if isinstance(note, Forwarded):
        return _apns_forwarded(device, note, topic=topic, content=content, now=now)
    return _apns_alert(device, note, topic=topic, content=content, now=now)


def _apns_headers(topic: str, expiry: float | None, *, silent: bool) -> dict[str, str]:
    return {
        "apns-push-type": "background" if silent else "alert",
        "apns-priority": "5" if silent else "10",
        "apns-expiration": str(max(0, math.ceil(expiry))) if expiry is not None else "0",
        "apns-topic": topic,
        "content-type": "application/json",
    }


def _checked(body: bytes, limit: int) -> bytes:
    if len(body) > limit:
        raise PayloadTooLarge(f"{len(body)} bytes, over {limit}")
    return body


def _apns_withdrawal(
    device: Device, note: Withdrawal, *, topic: str, content: Content, now: float
) -> ApnsRequest:
    cid = collapse_id(note, device.key)
    inner: dict[str, object] = {**_ids(note), "thread": cid}
    collie: dict[str, object] = inner
    if device.key is not None:
        collie = {"e": seal(device.key, device.id, _json({"v": ENVELOPE_VERSION, **inner}))}
    body = _json({"aps": {"content-available": 1}, "collie": collie})
    headers = _apns_headers(topic, _expiry(note, content, now), silent=True)
    return ApnsRequest(f"/3/device/{device.token}", headers, _checked(body, APNS_MAX_PAYLOAD))


def _apns_forwarded(
    device: Device, note: Forwarded, *, topic: str, content: Content, now: float
) -> ApnsRequest:
    sealed = base64.b64encode(note.body).decode("ascii")
    aps: dict[str, object] = {"content-available": 1}
    if not note.silent:
        title = content.words(device)["push_private"]
        aps = {"alert": {"title": title}, "mutable-content": 1}
        aps["sound"] = "default"
    body = _json({"aps": aps, "collie": {"w": sealed}})
    expiry = now + note.ttl if note.ttl > 0 else None
    headers = _apns_headers(topic, expiry, silent=note.silent)
    if note.topic and not note.silent:
        headers["apns-collapse-id"] = note.topic
    return ApnsRequest(f"/3/device/{device.token}", headers, _checked(body, APNS_MAX_PAYLOAD))


def _apns_alert(
    device: Device,
    note: Notification,
    *,
    topic: str,
    content: Content,
    now: float,
) -> ApnsRequest:
    """The APNs alert for ``note`` to ``device``.

    ``apns-expiration`` is the ask's deadline in unix seconds (rounded up), else
    ``now + content.default_ttl``, else 0.

    Raises:
        PayloadTooLarge: the payload cannot fit 4096 bytes.
    """
    cid = collapse_id(note, device.key)
    private = device.key is not None
    strings = content.words(device)

    def build(texts: _Texts) -> bytes:
        aps: dict[str, object] = {"sound": "default", "thread-id": cid}
        if private:
            aps["alert"] = {"title": strings["push_private"]}
            aps["mutable-content"] = 1
            return _json({"aps": aps, "collie": {"e": _envelope(device, note, texts)}})
        alert = {"title": texts.headline}
        if texts.title:
            alert["subtitle"] = texts.title
        if texts.line:
            alert["body"] = texts.line
        aps["alert"] = alert
        return _json({"aps": aps, "collie": _ids(note)})

    body = build(_fit(_Source(note, content, strings), build, APNS_MAX_PAYLOAD))
    headers = _apns_headers(topic, _expiry(note, content, now), silent=False)
    headers["apns-collapse-id"] = cid
    return ApnsRequest(f"/3/device/{device.token}", headers, body)


# --- FCM -------------------------------------------------------------------------------------


def fcm_message(
    device: Device,
    note: Message,
    *,
    content: Content,
    now: float,
) -> dict[str, object]:
    """The FCM HTTP v1 request body ``{"message": …}`` for ``note`` to ``device``: a
    notification message for a notification, a data message for a withdrawal (normal
    priority) or a relayed message (its ciphertext base64 in ``data.w``).

    Raises:
        PayloadTooLarge: the message cannot fit 4096 bytes.
    """
    if isinstance(note, Notification):
        return _fcm_alert(device, note, content=content, now=now)
    if isinstance(note, Withdrawal):
        cid = collapse_id(note, device.key)
        data = {**_ids(note), "tag": cid}
        if device.key is not None:
            inner = _json({"v": ENVELOPE_VERSION, **data})
            data = {"e": seal(device.key, device.id, inner)}
        expiry = _expiry(note, content, now)
        ttl = max(0, math.ceil(expiry - now)) if expiry is not None else 0
        priority, collapse = "normal", None
    else:
        data = {"w": base64.b64encode(note.body).decode("ascii")}
        ttl, collapse = note.ttl, note.topic
        priority = "normal" if note.silent else "high"
    _checked(_json(data), FCM_MAX_PAYLOAD)
    android: dict[str, object] = {"priority": priority, "ttl": f"{ttl}s"}
    if collapse:
        android["collapse_key"] = collapse
    return {"message": {"token": device.token, "data": data, "android": android}}


def _fcm_alert(
    device: Device,
    note: Notification,
    *,
    content: Content,
    now: float,
) -> dict[str, object]:
    """The FCM notification message for ``note`` to ``device``.

    ``android.ttl`` runs to the ask's deadline (rounded up, at least 0 s), else
    ``content.default_ttl``.

    Raises:
        PayloadTooLarge: notification and data cannot fit 4096 bytes.
    """
    cid = collapse_id(note, device.key)
    private = device.key is not None
    parts: dict[str, dict[str, str]] = {}
    strings = content.words(device)

    def build(texts: _Texts) -> bytes:
        if private:
            notification = {"title": strings["push_private"]}
            data = {"e": _envelope(device, note, texts)}
        else:
            notification = {"title": texts.headline}
            body = "\n".join(t for t in (texts.title, texts.line) if t)
            if body:
                notification["body"] = body
            data = _ids(note)
        parts["notification"], parts["data"] = notification, data
        return _json(notification) + _json(data)

    build(_fit(_Source(note, content, strings), build, FCM_MAX_PAYLOAD))
    expiry = _expiry(note, content, now)
    ttl = max(0, math.ceil(expiry - now)) if expiry is not None else 0
    return {
        "message": {
            "token": device.token,
            "notification": parts["notification"],
            "data": parts["data"],
            "android": {
                "priority": "high",
                "ttl": f"{ttl}s",
                "collapse_key": cid,
                "notification": {"tag": cid},
            },
        }
    }


# --- Web Push --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WebPushMessage:
    """One Web Push message before encryption: the plaintext the service worker reads, and
    the ``TTL``, ``Urgency`` and ``Topic`` headers (RFC 8030 §5)."""

    plaintext: bytes
    ttl: int
    urgency: Urgency
    topic: str


def webpush_message(
    device: Device,
    note: Notification | Withdrawal,
    *,
    content: Content,
    now: float,
) -> WebPushMessage:
    """The Web Push message for ``note`` to ``device``: a UTF-8 JSON object
    ``{"v":1,"type":"ask"|"many"|"withdraw"|"private","tag",…}`` (``tag``: the
    notification's tag, per pane as APNs' collapse id). An ask or the many-asks push has
    ``title`` and ``body`` and the ids, at high urgency; a withdrawal names the ask, at low
    urgency, under the ask's Topic. A device with an envelope key gets ``push_private`` as
    the title and the rest in ``e`` (the private envelope).

    Raises:
        PayloadTooLarge: the plaintext cannot fit ``WEBPUSH_MAX_PLAINTEXT`` bytes.
    """
    cid = collapse_id(note, device.key)
    expiry = _expiry(note, content, now)
    ttl = max(0, math.ceil(expiry - now)) if expiry is not None else 0
    key = topic(note, device.key)
    if isinstance(note, Withdrawal):
        inner: dict[str, object] = {"v": ENVELOPE_VERSION, **_ids(note), "tag": cid}
        if device.key is not None:
            sealed = seal(device.key, device.id, _json(inner))
            inner = {"v": ENVELOPE_VERSION, "type": "withdraw", "tag": cid, "e": sealed}
        plain = _checked(_json(inner), WEBPUSH_MAX_PLAINTEXT)
        return WebPushMessage(plain, ttl, Urgency.LOW, key)

    strings = content.words(device)

    def build(texts: _Texts) -> bytes:
        if device.key is not None:
            title = strings["push_private"]
            return _json(
                {"v": ENVELOPE_VERSION, "type": "private", "tag": cid, "title": title,
                 "e": _envelope(device, note, texts)}
            )  # fmt: skip
        body = "\n".join(t for t in (texts.title, texts.line) if t)
        shown = {"v": ENVELOPE_VERSION, **_ids(note), "tag": cid, "title": texts.headline}
        return _json({**shown, "body": body})

    plain = build(_fit(_Source(note, content, strings), build, WEBPUSH_MAX_PLAINTEXT))
    return WebPushMessage(plain, ttl, Urgency.HIGH, key)
