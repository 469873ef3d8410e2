"""Push routes beside the devices: the gateway's VAPID key for Web Push, push
health, and a test notification to one device. Registered from ``routes.PUSH_ROUTES``."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from aiohttp import web

from collie_gateway.http.keys import PUSHING
from collie_gateway.http.openapi import Route
from collie_gateway.http.responses import encoded, json_error
from push.health import Mark
from wire.messages import Time


class VapidKey(msgspec.Struct, kw_only=True):
    """The gateway's VAPID public key: the page subscribes with it (``applicationServerKey``).

    Attributes:
        public_key: The uncompressed P-256 point, base64url without padding; the same for
            the life of the gateway's store.
    """

    public_key: str


class PushMark(msgspec.Struct, kw_only=True):
    """A moment in a provider's health.

    Attributes:
        at: When.
        reason: Why it failed (a failure only), e.g. `InvalidProviderToken` or `HTTP 503`.
    """

    at: Time
    reason: str | None = None


class ProviderHealth(msgspec.Struct, kw_only=True):
    """One push provider's health.

    Attributes:
        provider: `apns`, `fcm` or `webpush`.
        configured: Whether this gateway sends through it now.
        ok: Whether the latest verdict was a success; null before any push through it.
        last_success: The last push it took (a token it called gone counts: it answered).
        last_failure: The last push it failed or refused, with the reason.
    """

    provider: str
    configured: bool
    ok: bool | None
    last_success: PushMark | None
    last_failure: PushMark | None


class PushHealthView(msgspec.Struct, kw_only=True):
    """Push health: a silent outage shows here in a minute, not in months.

    Attributes:
        providers: Configured providers first, then any other that has a verdict.
    """

    providers: list[ProviderHealth]


class PingIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A test notification: nothing to say (``{}``)."""


class PingResult(msgspec.Struct, kw_only=True):
    """How the test notification ended (it is in the push log too).

    Attributes:
        device_id: The device.
        outcome: `sent`, `gone` (the device was removed), `throttled` or `failed`.
        reason: Why it was not sent.
        status: The push service's HTTP status, when it answered.
    """

    device_id: str
    outcome: str
    reason: str | None
    status: int | None


def _mark(mark: object) -> PushMark | None:
    if not isinstance(mark, Mark):
        return None
    return PushMark(at=datetime.fromtimestamp(mark.at, UTC), reason=mark.reason)


async def vapid_key(request: web.Request) -> web.Response:
    """The gateway's VAPID public key, for the page's Web Push subscription."""
    return encoded(VapidKey(public_key=request.app[PUSHING].vapid_public_key))


async def push_health(request: web.Request) -> web.Response:
    """Each push provider's last success and last failure with its reason."""
    pushing = request.app[PUSHING]
    configured = list(pushing.targets.senders)
    state = pushing.health.state
    names = [*configured, *(p for p in state.providers if p not in configured)]
    rows = []
    for provider in names:
        entry = state.providers.get(provider)
        rows.append(
            ProviderHealth(
                provider=provider.value,
                configured=provider in configured,
                ok=entry.ok if entry is not None else None,
                last_success=_mark(entry.last_success if entry else None),
                last_failure=_mark(entry.last_failure if entry else None),
            )
        )
    return encoded(PushHealthView(providers=rows))


async def ping_device(request: web.Request) -> web.Response:
    """Send a test notification to one device through the whole path, and say how it ended."""
    raw = await request.read()
    try:
        msgspec.json.decode(raw or b"{}", type=PingIn)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return json_error(400, "bad_request", str(exc))
    device_id = request.match_info["device"]
    delivery = await request.app[PUSHING].ping(device_id)
    if delivery is None:
        return json_error(404, "not_found", "no such device")
    return encoded(
        PingResult(
            device_id=device_id,
            outcome=delivery.outcome.value,
            reason=delivery.reason,
            status=delivery.status,
        )
    )


PUSH_ROUTES: list[Route] = [
    Route("GET", "/api/v1/push/vapid", vapid_key, VapidKey),
    Route("GET", "/api/v1/push/health", push_health, PushHealthView),
    Route(
        "POST",
        "/api/v1/devices/{device}/test",
        ping_device,
        PingResult,
        body=PingIn,
        errors={404: "No such device"},
    ),
]
