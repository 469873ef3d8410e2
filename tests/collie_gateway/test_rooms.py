"""What the gateway keeps in memory for an open conversation goes when it closes: each card's
last tap (T1), the person's lines not yet echoed (C4), the newest item a note follows (R3).
A gateway that runs for months must not grow with every conversation it ever saw."""

from __future__ import annotations

from datetime import UTC, datetime

from collie_gateway.views.chat import LineState, MyLine
from tests.collie_gateway.conftest import Rig, eventually
from tests.collie_gateway.test_answers_http import PERMISSION, TOOL, desk


async def test_T1_an_ask_resolved_leaves_no_tap_in_memory(rig: Rig) -> None:
    """A conversation that stays open and asks all day keeps only its open cards' taps."""
    d = await desk(rig)
    key = ("desk", "c1")
    await d.chat()
    for n in range(3):
        handle = await d.ask(id=f"p{n}", kind="permission", title="Run ls?", options=PERMISSION)
        refused = await d.answer(f"p{n}", f"r{n}", {"option": "always"})
        assert refused["outcome"] == "refused"
        assert set(d.gw.answers.cards.of(*key)) == {f"p{n}"}
        await handle.decide()  # the person answered at the desk
        await eventually(lambda: not d.gw.answers.cards.of(*key))
    assert len(d.gw.answers.cards) == 0
    assert (await d.chat())["cards"]["cards"] == []


async def test_T1_C4_a_closed_conversation_leaves_nothing_in_memory(rig: Rig) -> None:
    d = await desk(rig)
    key = ("desk", "c1")
    await d.chat()  # the chat is read and followed live
    item = await d.conv.append(kind="reply", text="Tidying now.")
    await eventually(lambda: d.gw.chats.after_item("desk", "c1") == item.id)
    await d.ask(id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    # "Always allow" without its second tap: refused, and the card remembers the tap.
    refused = await d.answer("p", "r1", {"option": "always"})
    assert refused["outcome"] == "refused"
    assert set(d.gw.answers.cards.of(*key)) == {"p"}
    line = MyLine(
        request_id="m1",
        text="not echoed",
        sent_at=datetime(2026, 12, 4, tzinfo=UTC),
        state=LineState.SENT,
    )
    d.gw.chats.line_sent("desk", "c1", line)
    assert d.gw.chats.mine[key] == [line]

    await d.conv.close()
    await eventually(lambda: d.gw.mirrors["desk"].conversations.get("c1") is None)
    await eventually(lambda: key not in d.gw.chats.last_item)
    assert d.gw.answers.cards.of(*key) == {}
    assert len(d.gw.answers.cards) == 0
    assert key not in d.gw.chats.mine
    assert key not in d.gw.chats.writing
