"""Push for Collie: the limits (P1), once per ask (P3), payloads (P2, X1), the APNs, FCM and
Web Push senders, withdrawals, the relay, and signed webhooks (S6). It never imports
``collie_gateway``.

Pure: ``limits``, ``payloads``, ``models``, ``errors``, ``once``, ``vapid``, ``health``. I/O:
``apns``, ``fcm``, ``webpush``, ``sender``, ``webhook``, ``relay`` (a server). Importing the
package loads only the pure modules; a sender's name (``from push import ApnsClient``) loads
its module, and httpx or aiohttp with it, on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from push._retry import RetryPolicy
from push.errors import (
    DeviceGone,
    Duplicate,
    PayloadTooLarge,
    ProviderError,
    PushError,
    SignatureError,
    Throttled,
)
from push.health import PushHealth
from push.limits import Decision, PushLimiter, Quiet, QuietReason, Send, Summary
from push.models import (
    AskNotification,
    Delivery,
    Device,
    Environment,
    Forwarded,
    ManyAsksNotification,
    Message,
    NoticeNotification,
    Notification,
    Outcome,
    PingNotification,
    Provider,
    Urgency,
    WebPushKeys,
    Withdrawal,
)
from push.once import notice_key, once_key
from push.payloads import (
    DEFAULT_TTL,
    ApnsRequest,
    Content,
    Strings,
    WebPushMessage,
    apns_id,
    apns_request,
    clean,
    collapse_id,
    cut,
    fcm_message,
    open_envelope,
    seal,
    topic,
    valid_apns_token,
    webpush_message,
)

if TYPE_CHECKING:  # the senders: loaded on first use (``__getattr__``)
    from push.apns import ApnsClient
    from push.fcm import FcmClient, ServiceAccount
    from push.sender import Dispatcher, OnDelivery, PushSender
    from push.webhook import (
        ID_HEADER,
        SeenSet,
        WebhookResult,
        WebhookTarget,
        sign,
        verify,
        webhook_id,
    )
    from push.webpush import WebPushClient, check_endpoint, subscription_keys

_LAZY: dict[str, str] = {
    "ApnsClient": "push.apns",
    "Dispatcher": "push.sender",
    "FcmClient": "push.fcm",
    "ID_HEADER": "push.webhook",
    "OnDelivery": "push.sender",
    "PushSender": "push.sender",
    "SeenSet": "push.webhook",
    "ServiceAccount": "push.fcm",
    "WebPushClient": "push.webpush",
    "WebhookResult": "push.webhook",
    "WebhookTarget": "push.webhook",
    "check_endpoint": "push.webpush",
    "sign": "push.webhook",
    "subscription_keys": "push.webpush",
    "verify": "push.webhook",
    "webhook_id": "push.webhook",
}

__all__ = [
    "DEFAULT_TTL",
    "ID_HEADER",
    "ApnsClient",
    "ApnsRequest",
    "AskNotification",
    "Content",
    "Decision",
    "Delivery",
    "Device",
    "DeviceGone",
    "Dispatcher",
    "Duplicate",
    "Environment",
    "FcmClient",
    "Forwarded",
    "ManyAsksNotification",
    "Message",
    "NoticeNotification",
    "Notification",
    "OnDelivery",
    "Outcome",
    "PayloadTooLarge",
    "PingNotification",
    "Provider",
    "ProviderError",
    "PushError",
    "PushHealth",
    "PushLimiter",
    "PushSender",
    "Quiet",
    "QuietReason",
    "RetryPolicy",
    "SeenSet",
    "Send",
    "ServiceAccount",
    "SignatureError",
    "Strings",
    "Summary",
    "Throttled",
    "Urgency",
    "WebPushClient",
    "WebPushKeys",
    "WebPushMessage",
    "WebhookResult",
    "WebhookTarget",
    "Withdrawal",
    "apns_id",
    "apns_request",
    "check_endpoint",
    "clean",
    "collapse_id",
    "cut",
    "fcm_message",
    "notice_key",
    "once_key",
    "open_envelope",
    "seal",
    "sign",
    "subscription_keys",
    "topic",
    "valid_apns_token",
    "verify",
    "webhook_id",
    "webpush_message",
]


def __getattr__(name: str) -> Any:
    """A sender's name, loaded with its module on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'push' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
