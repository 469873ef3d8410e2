"""The relay's HTTP API (aiohttp).

- ``POST /v1/subscriptions`` ``{"provider": "apns"|"fcm", "token", "environment"?,
  "p256dh"?, "vapid"?}`` → 201 ``{"id", "endpoint", "secret", "vapid"}``. ``vapid`` binds the
  subscription to the gateway's key now; without it the first signed push binds it. The app
  keeps the private key and the auth secret: a body carrying ``auth`` is refused.
- ``DELETE /v1/subscriptions/{id}`` with ``Authorization: Bearer <secret>`` → 204.
- ``POST /push/{id}``: the Web Push endpoint (RFC 8030 §5). ``TTL`` required,
  ``Content-Encoding: aes128gcm`` required (415 otherwise: nothing in clear is forwarded),
  VAPID required (401 without, 403 when invalid or another key than the bound one).
  Alerting pushes (urgency normal or high) count against a quota per UTC day (429 past it);
  low and very-low (withdrawals) are exempt. 201 once APNs or FCM took it; 410 for a
  subscription deleted or whose token the provider refused; 404 for one never made.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import msgspec
from aiohttp import web

from push import vapid
from push.models import Device, Environment, Forwarded, Outcome, Provider, Urgency
from push.payloads import RELAY_MAX_BODY, TOPIC_CHARS, valid_apns_token
from push.relay.states import Effect, Input, State, push_input, step
from push.relay.store import RelayStore, Subscription
from push.sender import PushSender

log = logging.getLogger(__name__)

DAILY_ALERTS: Final = 500  # ours: alerting pushes per subscription per UTC day
MAX_TTL: Final = 28 * 86400  # APNs and FCM keep a message at most four weeks
MIN_BODY: Final = 86 + 17  # an aes128gcm header and one record with its tag (RFC 8188)
_TOPIC: Final = re.compile(rf"[A-Za-z0-9_\-]{{1,{TOPIC_CHARS}}}", re.ASCII)
_TTL: Final = re.compile(r"[0-9]{1,10}", re.ASCII)
_FCM_TOKEN: Final = re.compile(r"[\x21-\x7e]{1,4096}", re.ASCII)

Senders = Mapping[Provider, PushSender]
STORE: Final = web.AppKey("relay_store", RelayStore)
SENDERS: Final = web.AppKey("relay_senders", dict[Provider, PushSender])


class SubscriptionIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A registration: the app's provider token and, optionally, the public parts."""

    provider: Provider
    token: str
    environment: Environment = Environment.PRODUCTION
    p256dh: str | None = None  # the app's Web Push public key (base64url)
    vapid: str | None = None  # the gateway's VAPID public key, to bind now
    auth: str | None = None  # refused: the auth secret stays with the app


_decode = msgspec.json.Decoder(SubscriptionIn).decode


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers or None)


def _checked(body: SubscriptionIn) -> SubscriptionIn:
    """The registration with keys in canonical form.

    Raises:
        ValueError: why it is refused.
    """
    if body.auth is not None:
        raise ValueError("the auth secret stays with the app: send only p256dh")
    if body.provider is Provider.APNS and not valid_apns_token(body.token):
        raise ValueError("an APNs token is hexadecimal digits")
    if body.provider is Provider.FCM and not _FCM_TOKEN.fullmatch(body.token):
        raise ValueError("an FCM token is 1 to 4096 visible ASCII characters")
    if body.provider is Provider.WEBPUSH:
        raise ValueError("the relay forwards to apns or fcm")
    keys = {
        name: vapid.public_key(vapid.load_public_key(value)) if value is not None else None
        for name, value in (("p256dh", body.p256dh), ("vapid", body.vapid))
    }
    return msgspec.structs.replace(body, **keys)


def create_app(
    db: Path | str,
    senders: Callable[[], Senders],
    *,
    public_url: str,
    clock: Callable[[], float] = time.time,
    daily_alerts: int = DAILY_ALERTS,
) -> web.Application:
    """The relay's application on the SQLite file ``db``. ``senders`` is called once at
    start-up (the clients open their sessions in the running loop); ``public_url`` is the
    relay's origin as gateways reach it (endpoints and the VAPID audience derive from it)."""
    base = public_url.rstrip("/")
    aud = vapid.audience(base)
    app = web.Application(client_max_size=64 * 1024)

    async def startup(app: web.Application) -> None:
        app[STORE] = await RelayStore.open(db)
        app[SENDERS] = dict(senders())

    async def cleanup(app: web.Application) -> None:
        for sender in app.get(SENDERS, {}).values():
            await sender.aclose()
        if STORE in app:
            await app[STORE].close()

    async def register(request: web.Request) -> web.Response:
        store = request.app[STORE]
        try:
            body = _checked(_decode(await request.read()))
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
            return _error(400, str(exc))
        if body.provider not in request.app[SENDERS]:
            return _error(400, f"this relay does not forward to {body.provider.value}")
        sub, secret = await store.create(
            provider=body.provider,
            token=body.token,
            environment=body.environment,
            p256dh=body.p256dh,
            vapid=body.vapid,
            now=clock(),
        )
        out = {"id": sub.id, "endpoint": f"{base}/push/{sub.id}", "secret": secret}
        return web.json_response({**out, "vapid": sub.vapid}, status=201)

    async def push(request: web.Request) -> web.Response:
        store = request.app[STORE]
        sub = await store.get(request.match_info["id"])
        if sub is None:
            return _error(404, "no such subscription")
        if sub.state in (State.DELETED, State.REFUSED):
            return _error(410, f"subscription {sub.state.value}")
        parsed = _parse_push(request.headers, await request.read())
        if isinstance(parsed, web.Response):
            return parsed
        try:
            signer = vapid.verify(request.headers.get("Authorization"), aud=aud, now=clock())
        except vapid.VapidError as exc:
            status = 401 if not request.headers.get("Authorization") else 403
            return _error(status, str(exc))
        effect, _ = step(sub.state, push_input(sub.vapid, signer.public_key))
        if effect is Effect.BIND_AND_FORWARD:
            bound = await store.bind(sub.id, signer.public_key)
            effect = Effect.FORWARD if bound == signer.public_key else Effect.REFUSE
        if effect is Effect.REFUSE:
            return _error(403, "signed by another VAPID key than the subscription's")
        return await _forward(request.app[SENDERS], store, sub, parsed, clock(), daily_alerts)

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    app.router.add_post("/v1/subscriptions", register)
    app.router.add_delete("/v1/subscriptions/{id}", _delete)
    app.router.add_post("/push/{id}", push)
    return app


async def _delete(request: web.Request) -> web.Response:
    """``DELETE /v1/subscriptions/{id}``: the app ends its subscription with its secret."""
    store = request.app[STORE]
    sub_id = request.match_info["id"]
    sub = await store.get(sub_id)
    if sub is None:
        return _error(404, "no such subscription")
    secret = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if not await store.secret_matches(sub_id, secret):
        return _error(403, "not this subscription's secret")
    _, next_state = step(sub.state, Input.DELETE)
    await store.set_state(sub_id, next_state, "deleted by the app")
    return web.Response(status=204)


def _parse_push(headers: Mapping[str, str], body: bytes) -> Forwarded | web.Response:
    """The message a push request carries, or the error answer (RFC 8030 §5)."""
    ttl = headers.get("TTL", "")
    if not _TTL.fullmatch(ttl):
        return _error(400, "a push needs a TTL header (seconds)")
    try:
        urgency = Urgency(headers.get("Urgency", Urgency.NORMAL.value))
    except ValueError:
        return _error(400, "Urgency is very-low, low, normal or high")
    topic = headers.get("Topic")
    if topic is not None and not _TOPIC.fullmatch(topic):
        return _error(400, f"a Topic is 1 to {TOPIC_CHARS} base64url characters")
    if headers.get("Content-Encoding", "").strip().lower() != "aes128gcm":
        return _error(415, "only aes128gcm bodies are forwarded")
    if len(body) > RELAY_MAX_BODY:
        return _error(413, f"a body is at most {RELAY_MAX_BODY} bytes here")
    # RFC 8188 §2.1: salt(16) rs(4) idlen(1) keyid(idlen); a sender's key is 65 bytes.
    if len(body) < MIN_BODY or body[20] != 65 or int.from_bytes(body[16:20], "big") < 18:
        return _error(400, "the body is not an aes128gcm message")
    return Forwarded(
        body=body,
        ttl=min(int(ttl), MAX_TTL),
        urgency=urgency,
        topic=topic,
        message_id=str(uuid.uuid4()),
    )


async def _forward(
    senders: dict[Provider, PushSender],
    store: RelayStore,
    sub: Subscription,
    message: Forwarded,
    now: float,
    daily_alerts: int,
) -> web.Response:
    day = int(now // 86400)
    counted = not message.silent
    if counted and not await store.take(sub.id, day, daily_alerts):
        wait = str(int(86400 - now % 86400) + 1)
        return _error(429, f"over {daily_alerts} alerting pushes today", **{"Retry-After": wait})
    device = Device(
        id=sub.id,
        provider=sub.provider,
        token=sub.token,
        registered_at=sub.created_at,
        environment=sub.environment,
    )
    sender = senders.get(sub.provider)
    if sender is None:
        if counted:
            await store.give_back(sub.id, day)
        return _error(503, f"this relay does not forward to {sub.provider.value} now")
    delivery = await sender.send(device, message)
    if delivery.ok:
        location = f"/push/{sub.id}/messages/{message.message_id}"
        return web.Response(status=201, headers={"Location": location})
    if counted:
        await store.give_back(sub.id, day)
    if delivery.outcome is Outcome.GONE:
        _, next_state = step(sub.state, Input.PROVIDER_GONE)
        await store.set_state(sub.id, next_state, delivery.reason)
        return _error(410, "the provider refused the token")
    log.warning("relay %s: %s (%s)", sub.provider.value, delivery.outcome, delivery.reason)
    if delivery.reason == "PayloadTooLarge":
        return _error(413, "too large for the provider")
    if delivery.outcome is Outcome.THROTTLED:
        return _error(429, "the provider is throttling", **{"Retry-After": "60"})
    return _error(502 if delivery.status else 503, "the provider did not take it")
