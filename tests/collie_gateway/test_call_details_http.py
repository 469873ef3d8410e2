"""S1 on the phone: a permission card from an SDK agent shows what the call will use (each
argument with its origin in words), why it needs the person, and the irreversible warning.

Through ``GET /api/v1/agents/desk/conversations/c1`` (the card's ``call``) and the answer
route, against an SDK agent on a real socket.
"""

from __future__ import annotations

from typing import Any

from tests.collie_gateway.conftest import Rig
from tests.collie_gateway.test_cards_http import (
    PERMISSION,
    SHORTENED,
    TOOL,
    Desk,
    desk,
    labels,
)
from wire.agent import Argument, AskHandle

CANNOT = "This ask cannot be answered from the phone."
SECRET = "ghp_KBJHFhMpKYolVviUsb6QL4PC6TMF3ctIJnlg"


async def permission(d: Desk, *arguments: Argument, title: str = "Run it?", **kw: Any) -> AskHandle:
    """Raise the permission ask ``p`` about ``arguments``."""
    return await d.ask(
        id="p",
        kind="permission",
        title=title,
        tool=TOOL,
        options=PERMISSION,
        arguments=list(arguments),
        **kw,
    )


def rows(card: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(a["name"], a["value"], a["origin_label"]) for a in card["call"]["arguments"]]


async def test_S1_every_origin_in_words_the_reasons_and_the_irreversible_warning(
    rig: Rig,
) -> None:
    d = await desk(rig)
    arguments = [
        Argument(name="amount", value=40, origin="typed"),
        Argument(name="order_id", value="4411", origin="reply"),
        Argument(name="customer", value="c-208", origin="context"),
        Argument(name="total", value=40.5, origin="computed"),
        Argument(name="card", value="visa-0019", origin="result:lookup_customer"),
        Argument(name="memo", value="Thanks!", origin="model"),
        Argument(name="split", value={"parts": [1, 2], "ok": True}, origin="agent"),
        Argument(name="cc", value=None, origin="calendar"),  # an origin Collie has no words for
    ]
    reasons = ["write", "argument_origin: amount", "tainted_call: untrusted:read_inbox"]
    await d.ask(
        id="p",
        kind="permission",
        title="Run charge_card?",
        tool=TOOL,
        options=PERMISSION,
        arguments=arguments,
        reasons=reasons,
        irreversible=True,
    )
    card = await d.card("p")
    call = card["call"]
    assert call["arguments_title"] == "What it will use"
    assert rows(card) == [
        ("amount", "40", "you typed it"),
        ("order_id", "4411", "you answered it"),
        ("customer", "c-208", "from your account"),
        ("total", "40.5", "calculated"),
        ("card", "visa-0019", "from an earlier step"),
        ("memo", "Thanks!", "the assistant wrote it"),
        ("split", '{"parts":[1,2],"ok":true}', "from another assistant"),
        ("cc", "null", None),
    ]
    assert [a["origin"] for a in call["arguments"]][4] == "result:lookup_customer"
    assert call["reasons_title"] == "Why this needs you"
    assert call["reasons"] == reasons  # verbatim
    assert call["irreversible"] == "Nothing can undo this step once it runs."
    assert card["notices"] == []
    assert labels(card) == ["Allow", "Always allow", "Deny", "Cancel"]


async def test_S1_a_reversible_call_has_no_warning_and_a_plain_ask_no_call_part(rig: Rig) -> None:
    d = await desk(rig)
    await permission(d, Argument(name="path", value="~/notes", origin="typed"), title="Run ls?")
    await d.ask(id="plain", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    call = (await d.card("p"))["call"]
    assert call["irreversible"] is None
    assert call["reasons_title"] is None
    assert call["reasons"] == []
    assert (await d.card("plain"))["call"] is None


async def test_S1_A6_a_value_cut_for_the_phone_counts_as_shortened_no_always_allow(
    rig: Rig,
) -> None:
    d = await desk(rig)
    await permission(
        d, Argument(name="note", value="x" * 500, origin="model"), title="Run charge_card?"
    )
    card = await d.card("p")
    value = card["call"]["arguments"][0]["value"]
    assert len(value) == 200
    assert value.endswith("…")
    assert card["notices"] == [SHORTENED]
    assert labels(card) == ["Allow", "Deny", "Cancel"]  # A6: the whole text was not shown


async def test_S1_A6_a_value_with_hidden_characters_is_cleaned_and_shortened(rig: Rig) -> None:
    d = await desk(rig)
    await permission(
        d, Argument(name="to", value="acct\u202e9100", origin="model"), title="Run transfer?"
    )
    card = await d.card("p")
    assert card["call"]["arguments"][0]["value"] == "acct9100"
    assert card["notices"] == [SHORTENED]
    assert "Always allow" not in labels(card)


async def test_S1_X1_a_secret_in_a_value_is_masked(rig: Rig) -> None:
    d = await desk(rig)
    await permission(
        d, Argument(name="token", value=SECRET, origin="context"), title="Run git push?"
    )
    card = await d.card("p")
    value = card["call"]["arguments"][0]["value"]
    assert SECRET not in value
    assert value == "ghp_••••"
    assert card["notices"] == [SHORTENED]
    assert "Always allow" not in labels(card)


async def test_S1_A7_more_arguments_than_a_card_shows_is_unanswerable(rig: Rig) -> None:
    d = await desk(rig)
    many = [Argument(name=f"a{i}", value=i, origin="typed") for i in range(21)]
    ask = await d.ask(
        id="p", kind="permission", title="Run it?", tool=TOOL, options=PERMISSION, arguments=many
    )
    card = await d.card("p")
    assert card["body"] is None
    assert card["answerable"] is False
    assert CANNOT in card["notices"]
    # And the answer route refuses it: nothing reaches the agent.
    result = await d.answer("p", "r1", {"option": "allow"})
    assert result["outcome"] != "accepted"
    assert ask.open


async def test_S1_S2_a_changed_argument_asks_again(rig: Rig) -> None:
    d = await desk(rig)
    ask = await permission(
        d, Argument(name="amount", value=40, origin="typed"), title="Run charge_card?"
    )
    await ask.change(arguments=[Argument(name="amount", value=4000, origin="model")])
    result = await d.answer("p", "r1", {"option": "allow"}, version=1)
    assert result["outcome"] == "changed"
    assert result["card"]["line"] == "This ask changed. Read it again, then tap an answer."
    card = await d.card("p")
    assert card["version"] == 2
    assert rows(card) == [("amount", "4000", "the assistant wrote it")]
    assert (await d.answer("p", "r2", {"option": "allow"}, version=2))["outcome"] == "accepted"
    resolution = await ask.wait()
    assert resolution.answer is not None
    assert resolution.answer.option == "allow"
