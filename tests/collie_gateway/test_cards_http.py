"""Ask cards as the chat returns them, against an SDK agent on a real socket (spec A1–A8, R1).

``GET /api/v1/agents/desk/conversations/c1`` carries ``cards``: the first five asks as cards
and a "Show N more" row (``?all_cards=true`` shows all). Where a card offers an answer, the
answer is sent through ``POST …/asks/{ask}/answer`` and the agent's resolution checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from collie_gateway.core.mirror import LinkState
from collie_gateway.gateway import Gateway
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import Rig, eventually, get_json, post_json
from wire.agent import Agent, AskHandle, ConversationHandle, FormField, Option, ToolRef

PERMISSION = [
    Option(id="allow", label="Yes, run it", role="allow"),
    Option(id="always", label="Always for ls", role="always"),
    Option(id="deny", label="No", role="deny"),
    Option(id="cancel", label="Stop all", role="cancel"),
]
TOOL = ToolRef(call_id="t1", name="shell")
CANNOT = "This ask cannot be answered from the phone."
SHORTENED = "Text shortened"


@dataclass
class Desk:
    """The SDK agent ``desk`` with conversation ``c1``, and a gateway following it."""

    client: TestClient[Any, Any]
    gw: Gateway
    agent: Agent
    conv: ConversationHandle

    async def ask(self, **ask: Any) -> AskHandle:
        handle = await self.conv.ask(**ask)
        await eventually(lambda: self.gw.agents.find_ask("desk", handle.id) is not None)
        return handle

    async def cards(self, *, show_all: bool = False) -> dict[str, Any]:
        path = "/api/v1/agents/desk/conversations/c1" + ("?all_cards=true" if show_all else "")
        cards: dict[str, Any] = (await get_json(self.client, path))["cards"]
        return cards

    async def card(self, ask_id: str) -> dict[str, Any]:
        cards = (await self.cards(show_all=True))["cards"]
        return next(c for c in cards if c["ask_id"] == ask_id)

    async def answer(
        self, ask: str, request_id: str, body: dict[str, Any], version: int = 1
    ) -> dict[str, Any]:
        payload = {"request_id": request_id, "version": version, "answer": body}
        result: dict[str, Any] = await post_json(
            self.client, f"/api/v1/agents/desk/asks/{ask}/answer", payload
        )
        return result


async def desk(rig: Rig, **agent_args: Any) -> Desk:
    agent = rig.agent("desk", runtime="desk", features=["history"], **agent_args)
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Tidy up")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return Desk(client, gw, agent, conv)


def labels(card: dict[str, Any]) -> list[str]:
    return [b["label"] for b in card["body"]["buttons"]]


# --- A1, A2, A4: permission -------------------------------------------------------------------


async def test_A1_A2_A4_permission_card(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    card = await d.card("p")
    assert card["caption"] == "Needs your answer · desk"
    assert card["tool_call_id"] == "t1"  # A1: the tool call it sits under
    assert card["kind"] == "permission"
    assert card["title"] == "Run ls?"
    assert card["answerable"] is True
    assert card["notices"] == []
    assert card["deadline_label"] is None
    buttons = card["body"]["buttons"]
    assert [b["label"] for b in buttons] == ["Allow", "Always allow", "Deny", "Cancel"]
    assert [b["secondary"] for b in buttons] == ["Yes, run it", "Always for ls", "No", "Stop all"]
    assert [b["option_id"] for b in buttons] == ["allow", "always", "deny", "cancel"]


async def test_A4_permission_up_to_six_options(rig: Rig) -> None:
    d = await desk(rig)
    roles = ["allow", "deny", "cancel", "allow", "deny", "cancel", "deny"]
    six = [Option(id=f"o{i}", label=f"Way {i}", role=r) for i, r in enumerate(roles[:6])]
    await d.ask(id="six", kind="permission", title="Run it?", options=six)
    seven = [Option(id=f"o{i}", label=f"Way {i}", role=r) for i, r in enumerate(roles)]
    await d.ask(id="seven", kind="permission", title="Run it?", text="Seven ways", options=seven)
    card = await d.card("six")
    assert labels(card) == ["Allow", "Deny", "Cancel", "Allow", "Deny", "Cancel"]
    assert [b["secondary"] for b in card["body"]["buttons"]] == [f"Way {i}" for i in range(6)]
    # A 7th option: never six of seven buttons, but no buttons and the words of A7.
    over = await d.card("seven")
    assert over["body"] is None
    assert over["answerable"] is False
    assert over["notices"] == [CANNOT]
    assert (over["title"], over["text"]) == ("Run it?", "Seven ways")


async def test_A4_permission_tap_sends_the_option(rig: Rig) -> None:
    d = await desk(rig)
    ask = await d.ask(id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    assert (await d.answer("p", "r1", {"option": "deny"}))["outcome"] == "accepted"
    resolution = await ask.wait()
    assert resolution.answer is not None
    assert resolution.answer.option == "deny"


# --- A4: choice -----------------------------------------------------------------------------------


async def test_A4_choice_single_one_tap_sends(rig: Rig) -> None:
    d = await desk(rig)
    options = [Option(id=f"o{i}", label=f"Colour {i}") for i in range(3)]
    ask = await d.ask(id="c", kind="choice", title="Which colour?", options=options)
    body = (await d.card("c"))["body"]
    assert body["kind"] == "choice"
    assert body["multiple"] is False
    assert [r["label"] for r in body["rows"]] == ["Colour 0", "Colour 1", "Colour 2"]
    assert body["hint"] is None  # a tap on a row sends it: no "Send"
    assert body["send"] is None
    assert (await d.answer("c", "r1", {"option": "o1"}))["outcome"] == "accepted"
    resolution = await ask.wait()
    assert resolution.answer is not None
    assert resolution.answer.option == "o1"


async def test_A4_choice_multiple_up_to_eight(rig: Rig) -> None:
    d = await desk(rig)
    options = [Option(id=f"o{i}", label=f"Option {i}") for i in range(8)]
    ask = await d.ask(id="m", kind="choice", title="Which?", multiple=True, options=options)
    body = (await d.card("m"))["body"]
    assert body["multiple"] is True
    assert body["hint"] == "Pick any number"
    assert body["send"] == "Send"
    assert [r["option_id"] for r in body["rows"]] == [f"o{i}" for i in range(8)]
    result = await d.answer("m", "r1", {"options": ["o0", "o7"]})
    assert result["outcome"] == "accepted"
    resolution = await ask.wait()
    assert resolution.answer is not None
    assert resolution.answer.options == ["o0", "o7"]


async def test_A4_A7_a_ninth_choice_option_is_never_dropped(rig: Rig) -> None:
    d = await desk(rig)
    for ask_id, multiple in (("single", False), ("multi", True)):
        nine = [Option(id=f"o{i}", label=f"Option {i}") for i in range(9)]
        await d.ask(
            id=ask_id, kind="choice", title="Which?", text="Nine", options=nine, multiple=multiple
        )
        card = await d.card(ask_id)
        assert card["body"] is None
        assert card["answerable"] is False
        assert card["notices"] == [CANNOT]
        assert card["text"] == "Nine"


# --- A4: text -----------------------------------------------------------------------------------


async def test_A4_text_counter_500_or_the_agents_limit_up_to_2000(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="t0", kind="text", title="Name?")
    await d.ask(id="t1", kind="text", title="Note?", max_length=1200)
    await d.ask(id="t2", kind="text", title="Essay?", max_length=5000)
    counters = {}
    for ask_id in ("t0", "t1", "t2"):
        body = (await d.card(ask_id))["body"]
        assert body["kind"] == "text"
        assert body["send"] == "Send"
        counters[ask_id] = (
            body["input"]["limit"],
            body["input"]["counter"],
            body["input"]["counter_template"],
        )
    assert counters == {
        "t0": (500, "0 of 500", "{n} of 500"),
        "t1": (1200, "0 of 1200", "{n} of 1200"),
        "t2": (2000, "0 of 2000", "{n} of 2000"),
    }
    # Collie holds the card's limit before sending (wire §8): 2000 characters go, 2001 are
    # refused with the reason, sent nowhere.
    payload = {"request_id": "r1", "version": 1, "answer": {"text": "x" * 2001}}
    over = await d.client.post("/api/v1/agents/desk/asks/t2/answer", json=payload)
    assert over.status == 400
    assert (await over.json())["message"] == "The text is over 2000 characters."
    assert (await d.answer("t2", "r2", {"text": "x" * 2000}))["outcome"] == "accepted"


# --- A4: form -----------------------------------------------------------------------------------

FIELDS = [
    FormField(id="name", kind="text", label="Name", required=True, max_length=40),
    FormField(
        id="colour",
        kind="select",
        label="Colour",
        options=[Option(id="r", label="Red"), Option(id="g", label="Green")],
    ),
    FormField(id="loud", kind="switch", label="Loud"),
]


async def test_A4_form_text_select_switch_required(rig: Rig) -> None:
    d = await desk(rig)
    ask = await d.ask(id="f", kind="form", title="Details", fields=FIELDS)
    body = (await d.card("f"))["body"]
    assert body["kind"] == "form"
    assert body["send"] == "Send"
    name, colour, loud = body["fields"]
    assert (name["kind"], name["label"], name["required_label"]) == ("text", "Name", "Required")
    assert name["input"]["counter"] == "0 of 40"
    assert (colour["kind"], colour["required_label"], colour["input"]) == ("select", None, None)
    assert [o["label"] for o in colour["options"]] == ["Red", "Green"]
    assert (loud["kind"], loud["required_label"], loud["input"], loud["options"]) == (
        "switch",
        None,
        None,
        [],
    )
    payload = {"request_id": "r1", "version": 1, "answer": {"fields": {"colour": "g"}}}
    missing = await d.client.post("/api/v1/agents/desk/asks/f/answer", json=payload)
    assert missing.status == 400  # Collie checks it before sending (wire §8)
    assert (await missing.json())["message"] == "The field 'Name' is required."
    answer = {"fields": {"name": "Ada", "colour": "g", "loud": True}}
    assert (await d.answer("f", "r2", answer))["outcome"] == "accepted"
    resolution = await ask.wait()
    assert resolution.answer is not None
    assert resolution.answer.fields == {"name": "Ada", "colour": "g", "loud": True}


async def test_A4_A7_form_up_to_six_fields_a_seventh_is_never_dropped(rig: Rig) -> None:
    d = await desk(rig)
    fields = [FormField(id=f"f{i}", kind="text", label=f"Field {i}") for i in range(7)]
    await d.ask(id="six", kind="form", title="Six", fields=fields[:6])
    await d.ask(id="seven", kind="form", title="Seven", text="Fill in all", fields=fields)
    six = await d.card("six")
    assert [f["label"] for f in six["body"]["fields"]] == [f"Field {i}" for i in range(6)]
    seven = await d.card("seven")
    assert seven["body"] is None
    assert seven["answerable"] is False
    assert seven["notices"] == [CANNOT]
    assert seven["text"] == "Fill in all"


# --- A3, R1: the countdown ------------------------------------------------------------------------


async def test_A3_R1_the_deadline_counts_down_then_expired_and_the_buttons_stay(rig: Rig) -> None:
    d = await desk(rig, expiry_interval=3600.0)  # the agent's sweep does not close it here
    deadline = rig.clock() + timedelta(minutes=4, seconds=30)
    await d.ask(
        id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION,
        deadline=deadline,
    )  # fmt: skip
    assert (await d.card("p"))["deadline_label"] == "Expires in 4 min"
    rig.clock.advance(minutes=3, seconds=50)
    assert (await d.card("p"))["deadline_label"] == "Expires in 40 s"
    rig.clock.advance(seconds=40)
    card = await d.card("p")
    assert card["deadline_label"] == "Expired"
    assert card["answerable"] is True  # the buttons stay; the agent answers a late tap
    assert labels(card) == ["Allow", "Always allow", "Deny", "Cancel"]
    late = await d.answer("p", "r1", {"option": "allow"})
    assert late["outcome"] == "expired"
    assert late["card"]["line"] == "Timed out before an answer."


async def test_A3_no_deadline_no_countdown(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="p", kind="text", title="Name?")
    card = await d.card("p")
    assert (card["deadline"], card["deadline_label"]) == (None, None)


# --- A5: "Always allow" -------------------------------------------------------------------------


async def test_A5_always_allow_takes_two_taps_and_names_the_tool(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    buttons = {b["role"]: b for b in (await d.card("p"))["body"]["buttons"]}
    assert buttons["always"]["confirm_label"] == "Tap again to always allow"
    assert buttons["always"]["tool_name"] == "shell"
    for role in ("allow", "deny", "cancel"):  # only "Always allow" takes two taps
        assert (buttons[role]["confirm_label"], buttons[role]["tool_name"]) == (None, None)


async def test_A5_never_always_allow_without_a_tool(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="p", kind="permission", title="Run it?", options=PERMISSION)
    card = await d.card("p")
    assert labels(card) == ["Allow", "Deny", "Cancel"]
    assert card["notices"] == []
    # An ask whose only option is "always", with no tool: nothing is left to tap.
    only = [Option(id="always", label="Always", role="always")]
    await d.ask(id="q", kind="permission", title="Run it?", options=only)
    lone = await d.card("q")
    assert lone["body"] is None
    assert lone["notices"] == [CANNOT]


async def test_A5_the_gateway_refuses_an_unconfirmed_always_answer(rig: Rig) -> None:
    d = await desk(rig)
    ask = await d.ask(id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    refused = await d.answer("p", "r1", {"option": "always"})
    assert refused["outcome"] == "refused"
    assert refused["card"]["line"] == '"Always allow" needs a second tap.'
    assert ask.open
    assert (await d.card("p"))["answerable"] is True  # the card stays to be tapped again
    result = await d.answer("p", "r2", {"option": "always", "confirmed": True})
    assert result["outcome"] == "accepted"


# --- A6: text cleaned or cut ----------------------------------------------------------------------


async def test_A6_cleaned_text_is_shortened_and_offers_no_always_allow(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="b", kind="permission", title="Run\u202e ls?", tool=TOOL, options=PERMISSION)
    await d.ask(id="c", kind="permission", title="Run ls?", text="rm\x1b[2K -rf", tool=TOOL,
                options=PERMISSION)  # fmt: skip
    sneaky = [*PERMISSION[:3], Option(id="cancel", label="Stop\u200b all", role="cancel")]
    await d.ask(id="o", kind="permission", title="Run ls?", tool=TOOL, options=sneaky)
    for ask_id in ("b", "c", "o"):
        card = await d.card(ask_id)
        assert card["notices"] == [SHORTENED], ask_id
        assert labels(card) == ["Allow", "Deny", "Cancel"], ask_id
    assert (await d.card("b"))["title"] == "Run ls?"
    assert (await d.card("c"))["text"] == "rm[2K -rf"
    assert (await d.card("o"))["body"]["buttons"][2]["secondary"] == "Stop all"


async def test_A6_cut_text_is_shortened_and_offers_no_always_allow(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="t", kind="permission", title="Run " + "x" * 300, tool=TOOL,
                options=PERMISSION)  # fmt: skip
    await d.ask(id="x", kind="permission", title="Run ls?", text="y" * 2500, tool=TOOL,
                options=PERMISSION)  # fmt: skip
    title = (await d.card("t"))["title"]
    assert len(title) == 200
    assert title.endswith("…")
    assert len((await d.card("x"))["text"]) == 2000
    for ask_id in ("t", "x"):
        card = await d.card(ask_id)
        assert card["notices"] == [SHORTENED]
        assert "Always allow" not in labels(card)


async def test_A6_a_shortened_card_of_another_kind_stays_answerable(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="t", kind="text", title="Name\u202e?")
    card = await d.card("t")
    assert card["notices"] == [SHORTENED]
    assert card["answerable"] is True
    assert card["body"]["input"]["counter"] == "0 of 500"


# --- A7: an unknown kind --------------------------------------------------------------------------


async def test_A7_an_unknown_kind_shows_its_text_cleaned_and_cannot_be_answered(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="v", kind="vote", title="Vote?", text="Pick one\u202e: a or b")
    card = await d.card("v")
    assert card["kind"] == "vote"
    assert card["text"] == "Pick one: a or b"
    assert card["body"] is None
    assert card["answerable"] is False
    assert card["notices"] == [SHORTENED, CANNOT]
    await d.ask(id="w", kind="poll", title="Poll", text="Plain")
    assert (await d.card("w"))["notices"] == [CANNOT]


# --- A8: "Show N more" ----------------------------------------------------------------------------


async def test_A8_five_cards_then_show_n_more(rig: Rig) -> None:
    d = await desk(rig)
    for i in range(7):
        await d.ask(id=f"q{i}", kind="text", title=f"Q{i}")
    first = await d.cards()
    assert [c["ask_id"] for c in first["cards"]] == [f"q{i}" for i in range(5)]
    assert first["more"] == {"label": "Show 2 more", "count": 2}
    every = await d.cards(show_all=True)
    assert [c["ask_id"] for c in every["cards"]] == [f"q{i}" for i in range(7)]
    assert every["more"] is None
    # An answered card closes and no longer counts.
    assert (await d.answer("q0", "r1", {"text": "done"}))["outcome"] == "accepted"
    await eventually(lambda: d.gw.agents.find_ask("desk", "q0") is None)
    after = await d.cards()
    assert [c["ask_id"] for c in after["cards"]] == [f"q{i}" for i in range(1, 6)]
    assert after["more"] == {"label": "Show 1 more", "count": 1}


async def test_A8_five_asks_have_no_more_row(rig: Rig) -> None:
    d = await desk(rig)
    for i in range(5):
        await d.ask(id=f"q{i}", kind="text", title=f"Q{i}")
    cards = await d.cards()
    assert len(cards["cards"]) == 5
    assert cards["more"] is None
