"""One interface for every push target, and a dispatcher that sends in the background.

The dispatcher never raises into its caller and never makes it wait: ``dispatch`` schedules
tasks and returns; each finished push is handed to ``on_delivery``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Final, Protocol

from push.models import Delivery, Device, Message, Outcome, Provider
from wire.tasks import cancel_late

log = logging.getLogger(__name__)

MAX_IN_FLIGHT: Final = 16  # a small burst keeps each loop step short (bench/push_loop_bench.py)
SEND_DEADLINE: Final = 180.0  # a backstop above any sender's own timeouts and retries
CANCELLED: Final = "cancelled"  # the reason of a push cut short (the gateway stopped)


class PushSender(Protocol):
    """Sends one notification to one device. ``send`` returns the outcome and never
    raises for it; APNs, FCM and a future relay all fit here."""

    async def send(self, device: Device, note: Message) -> Delivery:
        """Send ``note`` to ``device``."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


OnDelivery = Callable[[Delivery], Awaitable[None] | None]


class Dispatcher:
    """Picks the sender per device and sends in background tasks.

    Usage::

        dispatcher = Dispatcher({Provider.APNS: apns, Provider.FCM: fcm}, on_delivery=record)
        dispatcher.dispatch(devices, note)   # returns at once
        dispatcher.dispatch(others, note, on_delivery=other_record)  # its own callback
        ...
        await dispatcher.aclose(grace=2.0)   # at shutdown, before closing the senders: one
                                             # grace for every pending push, not one each
    """

    def __init__(
        self,
        senders: Mapping[Provider, PushSender],
        on_delivery: OnDelivery | None = None,
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
        deadline: float = SEND_DEADLINE,
    ) -> None:
        self._senders = dict(senders)
        self._on_delivery = on_delivery
        self._slots = asyncio.Semaphore(max_in_flight)
        self._deadline = deadline
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        """Pushes scheduled and not yet reported."""
        return len(self._tasks)

    def dispatch(
        self,
        devices: Iterable[Device],
        note: Message,
        on_delivery: OnDelivery | None = None,
    ) -> int:
        """Schedule ``note`` to every device; the number scheduled. Never raises. Each
        delivery goes to ``on_delivery`` if given, else to the dispatcher's own."""
        scheduled = 0
        report = on_delivery or self._on_delivery
        try:
            loop = asyncio.get_running_loop()
            for device in devices:
                task = loop.create_task(self._run(device, note, report))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                scheduled += 1
        except Exception:
            log.exception("push dispatch failed after %d scheduled", scheduled)
        return scheduled

    async def drain(self) -> None:
        """Wait until every scheduled push is reported."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self, grace: float = 5.0) -> None:
        """Wait up to ``grace`` seconds for pending pushes, then cancel the rest."""
        await cancel_late(self._tasks, grace)

    async def _run(self, device: Device, note: Message, report: OnDelivery | None) -> None:
        sender = self._senders.get(device.provider)
        if sender is None:
            await self._report(_failed(device, f"no sender for {device.provider}"), report)
            return
        try:
            async with self._slots, asyncio.timeout(self._deadline):
                delivery = await sender.send(device, note)
        except TimeoutError:
            delivery = _failed(device, "deadline")
        except asyncio.CancelledError:
            await self._report(_failed(device, CANCELLED), report)
            raise
        except Exception as exc:
            log.exception("push sender raised for device %s", device.id)
            delivery = _failed(device, f"internal: {type(exc).__name__}")
        await self._report(delivery, report)

    async def _report(self, delivery: Delivery, report: OnDelivery | None) -> None:
        log.info(
            "push device=%s outcome=%s reason=%s status=%s id=%s attempts=%d",
            delivery.device_id,
            delivery.outcome,
            delivery.reason,
            delivery.status,
            delivery.provider_id,
            delivery.attempts,
        )
        if report is None:
            return
        try:
            result = report(delivery)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("push on_delivery raised for device %s", delivery.device_id)


def _failed(device: Device, reason: str) -> Delivery:
    return Delivery.of(device, Outcome.FAILED, reason)
