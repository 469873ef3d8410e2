"""An answer the agent took, told to the webhooks with the phone that gave it (S6): its id and
name, looked up in the background, never its token."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from collie_gateway.core.answers import Tap
from collie_gateway.core.phones import Phone
from collie_gateway.services.tasks import Spawn


class PhoneBook(Protocol):
    """The paired phones, revoked or not (``PhonesStore``)."""

    async def phone(self, phone_id: str) -> Phone | None: ...


class Told(Protocol):
    """Tells the webhooks who answered an ask (``Pushing``)."""

    def answered(
        self, agent: str, ask_id: str, request_id: str, phone: dict[str, str] | None
    ) -> None: ...


def tell_answered(phones: PhoneBook, webhooks: Told, spawn: Spawn) -> Callable[[Tap], None]:
    """What ``Answers.on_accepted`` calls for each answer the agent took."""

    async def tell(tap: Tap) -> None:
        phone = await phones.phone(tap.phone) if tap.phone else None
        named = {"phone_id": phone.phone_id, "name": phone.name} if phone else None
        webhooks.answered(tap.agent, tap.ask_id, tap.request_id, named)

    def on_accepted(tap: Tap) -> None:
        spawn(tell(tap), "answered")

    return on_accepted
