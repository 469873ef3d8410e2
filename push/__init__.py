"""Push for Collie: the limits (P1), once per ask (P3), payloads (P2, X1), the APNs and FCM
senders, and signed webhooks (S6). It never imports ``collie_gateway``.

Pure: ``limits``, ``payloads``, ``models``, ``errors``, ``once``. I/O: ``apns``, ``fcm``,
``sender``, ``webhook``.
"""

from __future__ import annotations

from push._retry import RetryPolicy
from push.apns import ApnsClient
from push.errors import (
    DeviceGone,
    Duplicate,
    PayloadTooLarge,
    ProviderError,
    PushError,
    SignatureError,
    Throttled,
)
from push.fcm import FcmClient, ServiceAccount
from push.limits import Decision, PushLimiter, Quiet, QuietReason, Send, Summary
from push.models import (
    AskNotification,
    Delivery,
    Device,
    Environment,
    ManyAsksNotification,
    Notification,
    Outcome,
    Provider,
)
from push.once import once_key
from push.payloads import (
    DEFAULT_TTL,
    ApnsRequest,
    Content,
    Strings,
    apns_id,
    apns_request,
    clean,
    collapse_id,
    cut,
    fcm_message,
    open_envelope,
    seal,
    valid_apns_token,
)
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
    "ManyAsksNotification",
    "Notification",
    "OnDelivery",
    "Outcome",
    "PayloadTooLarge",
    "Provider",
    "ProviderError",
    "PushError",
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
    "WebhookResult",
    "WebhookTarget",
    "apns_id",
    "apns_request",
    "clean",
    "collapse_id",
    "cut",
    "fcm_message",
    "once_key",
    "open_envelope",
    "seal",
    "sign",
    "valid_apns_token",
    "verify",
    "webhook_id",
]
