"""Markdown while it is written (issue 25.2): a ``markdown`` item still streaming carries
``html`` of its text so far, rendered as safely as its final text, at most once per
``RENDER_EVERY`` per item (the clock is the gateway's, moved by the test); the live chat
equals the reloaded chat, line for line with its html, and the deltas still add up to the
text exactly for a phone that appends them (C2, C3)."""

from __future__ import annotations

from typing import Any

from collie_gateway.core.markdown import render
from collie_gateway.core.mirror import LinkState
from collie_gateway.services.chats import RENDER_EVERY
from collie_gateway.sources import Source
from tests.collie_gateway.chat_phone import PhoneChat
from tests.collie_gateway.conftest import Rig, eventually, get_json

CHAT = "/api/v1/agents/desk/conversations/c1"


class CountingPhone(PhoneChat):
    """A phone that also counts the ``chat.item`` events of each line and keeps its deltas."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.items: dict[str, int] = {}
        self.deltas: dict[str, str] = {}

    async def _apply(self, event_id: str, kind: str, data: dict[str, Any]) -> None:
        fresh = self.events
        await super()._apply(event_id, kind, data)
        if self.events == fresh:
            return  # not this chat's, or held by the read
        if kind == "chat.item":
            line_id = data["item"]["id"]
            self.items[line_id] = self.items.get(line_id, 0) + 1
        elif kind == "chat.delta":
            self.deltas[data["item_id"]] = self.deltas.get(data["item_id"], "") + data["text"]


def _line(view: dict[str, Any], line_id: str) -> dict[str, Any]:
    lines: list[dict[str, Any]] = [x for x in view["lines"] if x["id"] == line_id]
    [line] = lines
    return line


async def test_C2_C3_markdown_renders_while_written_at_a_bounded_rate_live_equals_reload(
    rig: Rig,
) -> None:
    agent = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Plan")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    phone = CountingPhone(client, CHAT)
    await phone.start()
    item = await conv.append(kind="markdown", final=False)
    iid = item.id

    async def read_text_is(text: str) -> bool:
        lines = (await get_json(client, CHAT))["lines"]
        return bool(lines) and lines[0].get("text") == text

    async def phone_equals_read() -> bool:
        return phone.lines.get(iid) == _line(await get_json(client, CHAT), iid)

    # The first piece is rendered at once.
    await item.delta("# Plan\n\n")
    await eventually(lambda: read_text_is("# Plan\n\n"))
    await eventually(phone_equals_read)
    line = _line(await get_json(client, CHAT), iid)
    assert (line["html"], line["final"], line["cursor"]) == ("<h1>Plan</h1>\n", False, True)

    # More pieces within RENDER_EVERY: the text grows, the render waits (bounded rate).
    # (Each piece ends a word: an unfinished word waits, as it might be a secret, X1.)
    pieces = ["- **one** ", "and <b>x</b>\n", "- [two](javascript:alert(1))\n"]
    for piece in pieces:
        await item.delta(piece)
    so_far = "# Plan\n\n" + "".join(pieces)
    await eventually(lambda: read_text_is(so_far))
    await eventually(phone_equals_read)
    assert _line(await get_json(client, CHAT), iid)["html"] == "<h1>Plan</h1>\n"
    assert phone.items.get(iid, 0) <= 2  # appended, one render: not one per delta

    # Past RENDER_EVERY, the text that waited is rendered, with no delta after it (the agent
    # paused), safely as the final text is.
    rig.clock.advance(seconds=RENDER_EVERY.total_seconds())

    async def rendered(text: str) -> bool:
        return bool(_line(await get_json(client, CHAT), iid)["html"] == render(text))

    await eventually(lambda: rendered(so_far))
    await eventually(phone_equals_read)
    html = _line(await get_json(client, CHAT), iid)["html"]
    assert "<strong>one</strong>" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html
    assert "<a " not in html, "a javascript: link made a link"
    renders = phone.items[iid]

    # The next piece, past RENDER_EVERY again: rendered as it comes.
    rig.clock.advance(seconds=RENDER_EVERY.total_seconds())
    await item.delta("\n`code` ")
    so_far += "\n`code` "
    await eventually(lambda: rendered(so_far))
    await eventually(phone_equals_read)
    assert phone.items[iid] == renders + 1
    assert phone.deltas[iid] == so_far, "the deltas no longer add up to the text"

    await item.finish()

    async def final() -> bool:
        return bool(_line(await get_json(client, CHAT), iid).get("final", True))

    await eventually(final)
    await eventually(phone_equals_read)
    done = _line(await get_json(client, CHAT), iid)
    assert done["html"] == render(so_far)
    assert "text" not in done
    assert phone.misses == 0
    assert phone.reads == 1
    await phone.stop()


async def test_C2_a_reply_streams_as_text_without_html(rig: Rig) -> None:
    agent = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Plan")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    item = await conv.append(kind="reply", final=False)
    await item.delta("**not markdown here** ")

    async def streamed() -> bool:
        lines = (await get_json(client, CHAT))["lines"]
        return bool(lines) and lines[0].get("text") == "**not markdown here** "

    await eventually(streamed)
    assert "html" not in (await get_json(client, CHAT))["lines"][0]
