"""Push for Collie: the limits (P1), once per ask (P3), payloads (P2, X1), the APNs, FCM and
Web Push senders, withdrawals, the relay, and signed webhooks (S6). It never imports
``collie_gateway``.

Pure: ``limits``, ``payloads``, ``models``, ``errors``, ``once``, ``vapid``, ``health``. I/O:
``apns``, ``fcm``, ``webpush``, ``sender``, ``webhook``, ``relay`` (a server).
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
    Notification,
    Outcome,
    PingNotification,
    Provider,
    Urgency,
    WebPushKeys,
    Withdrawal,
)
from push.once import once_key
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
