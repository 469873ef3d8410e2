"""The relay that reads nothing (``collie-gateway relay``): a small Web Push service in front
of APNs and FCM, run by the app's publisher, the only holder of their credentials.

The app registers its APNs or FCM token and gets a Web Push endpoint; its gateway pushes to
that endpoint as to a browser's push service. The relay accepts only pushes signed with the
VAPID key the subscription is bound to, and forwards the still-encrypted body (APNs
mutable-content, FCM data message). It sees the ciphertext, the endpoint id and the provider
token: never a title, a pane or an agent.

Modules: ``states`` (the subscription's state table, pure), ``store`` (SQLite), ``app`` (the
aiohttp application), ``cli`` (the command).
"""

from __future__ import annotations

from push.relay.app import create_app
from push.relay.states import Effect, Input, State, step
from push.relay.store import RelayStore

__all__ = ["Effect", "Input", "RelayStore", "State", "create_app", "step"]
