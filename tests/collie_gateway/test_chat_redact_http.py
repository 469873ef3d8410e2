"""Secrets in a reply being written never reach the phone (X1, issue 9.10), on the live
stream nor in a read, however the agent splits them; the live chat still equals the read
(C2). And a chat dropped from memory shows the agent's text after a ``reset`` (issue 9.1).

Against an agent of the tests' own (``LogAgent``), which streams any split it is given."""

from __future__ import annotations

import asyncio
from typing import Any

from collie_gateway.core.mirror import LinkState
from collie_gateway.core.redact import MASK, Redactor
from collie_gateway.sources import Source
from tests.collie_gateway.chat_phone import LogAgent, PhoneChat, shown
from tests.collie_gateway.conftest import Rig, eventually, get_json

CHAT = "/api/v1/agents/desk/conversations/c1"
STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dcQ"
GITHUB = "ghp_KBJHFhMpKYolVviUsb6QL4PC6TMF3ctIJnlg"
KEY_LINES = [
    "MIIEowIBAAKCAQEAx4aV1b2cD3eF4gH5iJ6kL7mN8oP9qR0sT1uV2wX3yZ4aB5cD",
    "6eF7gH8iJ9kL0mN1oP2qR3sT4uV5wX6yZ7aB8cD9eF0gH1iJ2kL3mN4oP5qR6sT",
    "7uV8wX9yZ0aB1cD2eF3gH4iJ5kL6mN7oP8qR9sT0uV1wX2yZ3aB4cD5eF6gH7i",
]
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(KEY_LINES) + "\n-----END RSA PRIVATE KEY-----"
REPLY = (
    f"Deploy with {STRIPE} then push with {GITHUB}, and the key:\n{PEM}\n"
    'Also password = "correct horse battery staple" in the config.\nDone. '
)
SECRETS = [STRIPE[len("sk_live_") :], GITHUB[len("ghp_") :], *KEY_LINES, "correct horse battery"]


class WatchingPhone(PhoneChat):
    """A phone that keeps every text it showed, after each live event it applied."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.screens: list[str] = []

    async def _apply(self, event_id: str, kind: str, data: dict[str, Any]) -> None:
        await super()._apply(event_id, kind, data)
        self.screens.append("\n".join(text for _id, text, _final, _cut in self.shown()))


def runs(secret: str, size: int = 6) -> set[str]:
    """Every run of ``size`` characters of a secret."""
    return {secret[i : i + size] for i in range(len(secret) - size + 1)}


def shows_a_secret(screen: str) -> list[str]:
    return [r for s in SECRETS for r in runs(s) if r in screen]


async def stream_reply(rig: Rig, *, redact: bool) -> tuple[WatchingPhone, list[str], list[Any]]:
    """The agent streams ``REPLY`` in pieces of 1–4 characters while a phone follows the
    chat and another reads it now and then. Returns the phone, every read's text, and the
    chat's last read."""
    agent = LogAgent()
    sock = rig.tmp / "log.sock"
    await agent.serve(sock)
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], redact=redact)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    item = agent.append()
    phone = WatchingPhone(client, CHAT)
    await phone.start()
    reads: list[str] = []
    at, size = 0, 1
    while at < len(REPLY):
        agent.delta(item, REPLY[at : at + size])
        at += size
        size = size % 4 + 1
        await asyncio.sleep(0.001)  # the gateway and the phone run meanwhile
        if size == 1:
            view = await get_json(client, CHAT)
            reads.append("\n".join(text for _id, text, _final, _cut in shown(view)))
    agent.finish(item)
    try:
        final: list[Any] = []

        async def both_final() -> bool:
            final[:] = shown(await get_json(client, CHAT))
            return bool(final) and final[0][2] is True and phone.shown() == final

        await eventually(both_final)
    finally:
        await phone.stop()
        await agent.stop()
    assert phone.misses == 0
    return phone, reads, final


async def test_X1_a_secret_streamed_in_pieces_never_reaches_the_phone(rig: Rig) -> None:
    phone, reads, final = await stream_reply(rig, redact=True)
    assert len(phone.screens) >= 5  # (deltas read in one chunk reach it as one)
    assert len(reads) > 20
    for screen in [*phone.screens, *reads]:
        assert shows_a_secret(screen) == [], screen
    assert final == [("i0", Redactor().mask(REPLY), True, None)]
    assert f"sk_live_{MASK}" in final[0][1]
    assert f"ghp_{MASK}" in final[0][1]
    # While written, the phone saw the text grow with masks in it (not only at the end).
    assert any(f"sk_live_{MASK}" in s and "Done." not in s for s in phone.screens)
    assert any(f"ghp_{MASK}" in s and "Done." not in s for s in reads)


async def test_X1_redaction_off_streams_every_character(rig: Rig) -> None:
    phone, reads, final = await stream_reply(rig, redact=False)
    assert final == [("i0", REPLY, True, None)]
    assert any(STRIPE in s and "Done." not in s for s in phone.screens)
    assert any(KEY_LINES[0] in s for s in reads)


async def test_wire_10_a_chat_dropped_from_memory_shows_the_agents_text_after_reset(
    rig: Rig,
) -> None:
    """With one chat kept in memory, c1 is dropped when c2 opens; a phone still shows c1.
    The gateway's link goes; meanwhile the agent streams "LOST-1 ", "LOST-2 ", appends a reply
    and cuts its log; back, the gateway gets ``reset``. The phone is told to read c1 again,
    and a read shows exactly the agent's text."""
    agent = LogAgent(others=("c2",))
    sock = rig.tmp / "log.sock"
    await agent.serve(sock)
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    gw.chats.kept = 1
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    item = agent.append()
    agent.delta(item, "one two ")
    phone = PhoneChat(client, CHAT)
    await phone.start()
    await eventually(lambda: phone.shown() == [("i0", "one two ", False, None)])
    await get_json(client, "/api/v1/agents/desk/conversations/c2")
    assert ("desk", "c1") not in gw.chats.chats  # dropped from memory
    await agent.stop()
    await eventually(lambda: gw.mirrors["desk"].state is not LinkState.READY)
    agent.delta(item, "LOST-1 ")
    agent.delta(item, "LOST-2 ")
    agent.append(text="A reply the phone must see", final=True)
    agent.cut_log()
    await agent.serve(sock)
    try:
        await eventually(lambda: agent.resets > 0)
        agent.delta(item, "three ")
        want = [
            ("i0", "one two LOST-1 LOST-2 three ", False, None),
            ("i1", "A reply the phone must see", True, None),
        ]

        async def read_equals() -> bool:
            return shown(await get_json(client, CHAT)) == want

        await eventually(read_equals)
        await eventually(lambda: phone.shown() == want)
        assert phone.reloads >= 1  # told to read it again
        assert phone.misses == 0
    finally:
        await phone.stop()
        await agent.stop()
