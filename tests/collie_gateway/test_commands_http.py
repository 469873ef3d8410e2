"""The bottom bar, the pane menu and starters through the phone API, against SDK agents on
real sockets (spec B1–B3, G1, G2, N1–N3, L4's Reopen). Every command carries a request id."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from collie_gateway.core.mirror import LinkState
from collie_gateway.gateway import Gateway
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import Rig, eventually, get_json, post_json
from wire.agent import Agent, Button, ConversationHandle, SendMessage, Starter

Client = TestClient[Any, Any]
AGENT = "/api/v1/agents/desk"
LIST = AGENT + "/conversations"
CHAT = LIST + "/c1"
ALL = ["history", "steer", "stop", "buttons", "progress", "close", "reopen", "starters"]
MOVED_ON = "The conversation moved on, so the action did not run."
ICONS = ["play", "pause", "check", "x", "refresh", "archive"]
ICONS += ["flag", "star", "send", "note", "search", "more"]


class Turn:
    """A turn that records what reaches it and runs until ``done`` is set."""

    def __init__(self, agent: Agent) -> None:
        self.messages: list[str] = []
        self.steered: list[str] = []
        self.pressed: list[str] = []
        self.done = asyncio.Event()

        @agent.on_message
        async def turn(conv: ConversationHandle, msg: SendMessage) -> None:
            self.messages.append(msg.text)
            while not self.done.is_set():
                waiting = asyncio.ensure_future(conv.steered.get())
                finished = asyncio.ensure_future(self.done.wait())
                await asyncio.wait({waiting, finished}, return_when=asyncio.FIRST_COMPLETED)
                finished.cancel()
                if waiting.done():
                    self.steered.append(waiting.result().text)
                else:
                    waiting.cancel()
            await conv.append(kind="reply", text="Finished")

        @agent.on_button
        async def press(conv: ConversationHandle, button: str) -> None:
            self.pressed.append(button)


async def start(
    rig: Rig, *, features: list[str] | None = None, **agent_args: Any
) -> tuple[Client, Gateway, Agent, ConversationHandle]:
    """The agent "desk" with conversation c1, and a gateway that has it Ready."""
    agent = rig.agent(
        "desk", runtime="desk", features=ALL if features is None else features, **agent_args
    )
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Notes")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return client, gw, agent, conv


async def controls(client: Client) -> list[dict[str, Any]]:
    bar = (await get_json(client, CHAT))["bar"]
    assert bar is not None
    shown: list[dict[str, Any]] = bar["controls"]
    return shown


async def until_turn(gw: Gateway, turn: int, state: str) -> None:
    def there() -> bool:
        conv = gw.mirrors["desk"].conversations.get("c1")
        return conv is not None and (conv.turn, conv.state) == (turn, state)

    await eventually(there)


def labels(shown: list[dict[str, Any]]) -> list[str]:
    return [c["label"] for c in shown]


# --- B1, B2: the bar -----------------------------------------------------------------------------


async def test_B1_B2_steer_stop_then_up_to_four_buttons(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig)
    await conv.update(
        buttons=[
            Button(id="a", label="Archive", icon="archive"),
            Button(id="b", label="Sparkle", icon="sparkle"),
            Button(id="c", label="Busy one", icon="refresh", busy=True),
            Button(id="d", label="Off", disabled=True),
            Button(id="e", label="Fifth"),
        ]
    )
    await eventually(lambda: len(gw.mirrors["desk"].conversations["c1"].buttons) == 5)
    shown = await controls(client)
    assert labels(shown) == ["Steer", "Stop", "Archive", "Sparkle", "Busy one", "Off"]
    assert [c["kind"] for c in shown] == ["steer", "stop"] + ["button"] * 4
    assert [c.get("button_id") for c in shown[2:]] == ["a", "b", "c", "d"]
    archive, sparkle, busy, off = shown[2:]
    assert (archive["icon"], archive["tappable"], archive.get("dimmed")) == ("archive", True, False)
    assert sparkle.get("icon") is None  # not one of the 12: no icon
    assert (busy["busy"], busy["tappable"], busy.get("dimmed")) == (True, False, False)
    assert (off["dimmed"], off["tappable"]) == (True, False)
    assert all(c["turn"] == 0 for c in shown)  # every tap carries the turn the phone saw


async def test_B1_steer_and_stop_usable_only_while_a_turn_runs(rig: Rig) -> None:
    client, gw, agent, conv = await start(rig)
    turn = Turn(agent)
    steer, stop = await controls(client)
    assert (steer["dimmed"], steer["tappable"], stop["dimmed"], stop["tappable"]) == (
        True,
        False,
        True,
        False,
    )
    await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Sort"})
    await until_turn(gw, 1, "working")
    steer, stop = await controls(client)
    assert (steer.get("dimmed"), steer["tappable"], stop["tappable"]) == (False, True, True)
    assert steer["turn"] == stop["turn"] == 1
    turn.done.set()
    await until_turn(gw, 1, "idle")
    steer, stop = await controls(client)
    assert (steer["dimmed"], stop["dimmed"]) == (True, True)
    del conv


async def test_B1_a_button_that_cannot_be_used_is_dimmed_in_place(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig)
    buttons = [Button(id=b, label=b.upper(), icon="check") for b in ("a", "b", "c")]
    await conv.update(buttons=buttons)
    await eventually(lambda: len(gw.mirrors["desk"].conversations["c1"].buttons) == 3)
    before = await controls(client)
    await conv.update(buttons=[buttons[0], Button(id="b", label="B", disabled=True), buttons[2]])
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].buttons[1].disabled)
    after = await controls(client)
    place = [(c["kind"], c.get("button_id"), c["label"]) for c in after]
    assert place == [(c["kind"], c.get("button_id"), c["label"]) for c in before]  # no shift
    assert (after[3]["dimmed"], after[3]["tappable"]) == (True, False)
    assert (after[2]["tappable"], after[4]["tappable"]) == (True, True)


async def test_B2_icons_and_label_length(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig, features=["buttons"])
    shown_icons: list[str | None] = []
    for group in range(3):
        names = ICONS[group * 4 : group * 4 + 4]
        await conv.update(buttons=[Button(id=n, label=n, icon=n) for n in names])
        await eventually(
            lambda names=names: (
                [b.id for b in gw.mirrors["desk"].conversations["c1"].buttons] == names
            )
        )
        shown_icons += [c.get("icon") for c in await controls(client)]
    assert shown_icons == ICONS  # each of the 12 shows
    await conv.update(
        buttons=[
            Button(id="long", label="Archive every old note", icon="Archive"),
            Button(id="sixteen", label="Exactly sixteen!", icon="trash"),
        ]
    )
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].buttons[0].id == "long")
    long, sixteen = await controls(client)
    assert long["label"] == "Archive every o…"  # at most 16 characters
    assert len(long["label"]) == 16
    assert long.get("icon") is None  # names are exact
    assert (sixteen["label"], sixteen.get("icon")) == ("Exactly sixteen!", None)


async def test_B1_steer_sends_into_the_running_turn(rig: Rig) -> None:
    client, gw, agent, _conv = await start(rig)
    turn = Turn(agent)
    await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Sort the notes"})
    await until_turn(gw, 1, "working")
    steer = {"request_id": "m2", "text": "Only the pdfs", "steer": True, "turn": 1}
    result = await post_json(client, CHAT + "/messages", steer)
    assert (result["outcome"], result["label"]) == ("accepted", "Sent")
    await eventually(lambda: turn.steered == ["Only the pdfs"])
    assert turn.messages == ["Sort the notes"]  # no new turn
    assert gw.mirrors["desk"].conversations["c1"].turn == 1
    turn.done.set()


# --- B3: a stale turn ----------------------------------------------------------------------------


async def test_B3_stop_with_a_stale_turn_does_not_run(rig: Rig) -> None:
    client, gw, agent, _conv = await start(rig)
    turn = Turn(agent)
    seen = await get_json(client, CHAT)  # the phone saw turn 0
    assert seen["turn"] == 0
    await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Sort"})
    await until_turn(gw, 1, "working")
    stale = await post_json(client, CHAT + "/stop", {"request_id": "s1", "turn": seen["turn"]})
    assert stale == {"outcome": "moved_on", "message": MOVED_ON, "conversation_id": None}
    view = await get_json(client, CHAT)
    assert view["lines"][-1]["kind"] != "stopped"  # nothing ran: the turn goes on
    assert gw.mirrors["desk"].conversations["c1"].state == "working"
    stop = view["bar"]["controls"][1]
    assert (stop["label"], stop["tappable"], stop["turn"]) == ("Stop", True, 1)  # still usable
    fresh = await post_json(client, CHAT + "/stop", {"request_id": "s2", "turn": stop["turn"]})
    assert fresh["outcome"] == "accepted"

    async def stopped() -> bool:
        return bool((await get_json(client, CHAT))["lines"][-1]["kind"] == "stopped")

    await eventually(stopped)
    assert turn.messages == ["Sort"]


async def test_B3_button_with_a_stale_turn_does_not_run(rig: Rig) -> None:
    client, gw, agent, conv = await start(rig)
    turn = Turn(agent)
    await conv.update(buttons=[Button(id="a", label="Archive"), Button(id="b", label="Flag")])
    await eventually(lambda: len(gw.mirrors["desk"].conversations["c1"].buttons) == 2)
    seen = await controls(client)
    await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Sort"})
    await until_turn(gw, 1, "working")
    stale = await post_json(
        client, CHAT + "/buttons/a", {"request_id": "b1", "turn": seen[2]["turn"]}
    )
    assert (stale["outcome"], stale["message"]) == ("moved_on", MOVED_ON)
    # The same request id again gets the same answer: still nothing runs.
    again = await post_json(
        client, CHAT + "/buttons/a", {"request_id": "b1", "turn": seen[2]["turn"]}
    )
    assert again["outcome"] == "moved_on"
    now = await controls(client)
    assert (now[2]["tappable"], now[2]["turn"]) == (True, 1)  # the button stays usable
    fresh = await post_json(client, CHAT + "/buttons/b", {"request_id": "b2", "turn": 1})
    assert fresh["outcome"] == "accepted"
    await eventually(lambda: turn.pressed == ["b"])  # "a" never ran
    turn.done.set()


async def test_B2_busy_and_disabled_buttons_do_not_run(rig: Rig) -> None:
    client, gw, agent, conv = await start(rig)
    turn = Turn(agent)
    busy, off = (
        Button(id="busy", label="Busy", busy=True),
        Button(id="off", label="Off", disabled=True),
    )
    await conv.update(buttons=[busy, off])
    await eventually(lambda: len(gw.mirrors["desk"].conversations["c1"].buttons) == 2)
    for button in ("busy", "off"):
        result = await post_json(
            client, CHAT + f"/buttons/{button}", {"request_id": f"t-{button}", "turn": 0}
        )
        assert result["outcome"] == "refused"
    await conv.update(buttons=[Button(id="busy", label="Busy")])
    await eventually(lambda: not gw.mirrors["desk"].conversations["c1"].buttons[0].busy)
    ok = await post_json(client, CHAT + "/buttons/busy", {"request_id": "t3", "turn": 0})
    assert ok["outcome"] == "accepted"
    await eventually(lambda: turn.pressed == ["busy"])


# --- G1, G2: controls only for declared features, the pane menu ----------------------------------


@pytest.mark.parametrize(
    ("features", "bar", "menu"),
    [
        ([], [], []),
        (["steer"], ["Steer"], []),
        (["stop"], ["Stop"], []),
        (["buttons"], ["Archive"], []),
        (["close"], [], ["Close conversation"]),
        (
            ["steer", "stop", "buttons", "close"],
            ["Steer", "Stop", "Archive"],
            ["Close conversation"],
        ),
    ],
)
async def test_G1_a_control_only_for_a_declared_feature(
    rig: Rig, features: list[str], bar: list[str], menu: list[str]
) -> None:
    client, gw, _agent, conv = await start(rig, features=features)
    await conv.update(buttons=[Button(id="a", label="Archive")])
    await eventually(lambda: len(gw.mirrors["desk"].conversations["c1"].buttons) == 1)
    view = await get_json(client, CHAT)
    assert labels(view["bar"]["controls"]) == bar
    assert [i["label"] for i in view["menu"]["items"]] == menu
    await conv.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 0)
    closed = await get_json(client, CHAT)
    assert closed["menu"]["reopen"] is None  # no "reopen" declared


async def test_G1_no_starters_without_the_feature(rig: Rig) -> None:
    client, _gw, _agent, _conv = await start(
        rig, features=["history"], starters=[Starter(id="tidy", label="Tidy up")]
    )
    page = await get_json(client, AGENT + "/new")
    assert page["starters"] == []
    assert page["empty"] == "This machine's durable agent offers no starters yet."


async def test_G2_pane_menu_close_conversation_then_reopen(rig: Rig) -> None:
    client, gw, agent, _conv = await start(rig)
    Turn(agent)
    view = await get_json(client, CHAT)
    close = {"action": "close", "label": "Close conversation"}
    assert view["menu"] == {"items": [close], "reopen": None}
    shown = str(view).lower()
    for absent in ("history", "pane settings", "pin to top row", "terminal", "quick"):
        assert absent not in shown  # G2: nothing of a terminal pane
    await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Sort"})
    await until_turn(gw, 1, "working")
    closed = await post_json(client, CHAT + "/close", {"request_id": "x1"})
    assert (closed["outcome"], closed["conversation_id"]) == ("accepted", "c1")
    await eventually(lambda: gw.mirrors["desk"].open_count == 0)
    listing = await get_json(client, LIST)
    assert listing["rows"] == []
    assert [r["conversation_id"] for r in listing["closed"]] == ["c1"]
    view = await get_json(client, CHAT)
    assert (view["read_only"], view["bar"]) == (True, None)
    assert view["lines"][-1]["kind"] == "stopped"  # closing stopped the running turn
    assert view["menu"] == {"items": [], "reopen": {"action": "reopen", "label": "Reopen"}}
    again = await post_json(client, CHAT + "/close", {"request_id": "x1"})  # a retried tap
    assert again["outcome"] == "accepted"
    reopened = await post_json(client, CHAT + "/reopen", {"request_id": "x2"})
    assert reopened["outcome"] == "accepted"
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    listing = await get_json(client, LIST)
    assert [r["conversation_id"] for r in listing["rows"]] == ["c1"]
    assert listing["closed"] is None
    view = await get_json(client, CHAT)
    assert view["read_only"] is False
    assert [i["label"] for i in view["menu"]["items"]] == ["Close conversation"]


async def test_G2_close_refused_without_the_feature(rig: Rig) -> None:
    client, gw, _agent, _conv = await start(rig, features=["history"])
    result = await post_json(client, CHAT + "/close", {"request_id": "x1"})
    assert result["outcome"] == "refused"
    assert gw.mirrors["desk"].open_count == 1


# --- N1–N3: New conversation and starters -----------------------------------------------------


async def test_N1_N2_starters_and_a_tap_opens_a_conversation(rig: Rig) -> None:
    starters = [
        Starter(id="tidy", label="Tidy my notes", description="Sorts them into folders"),
        Starter(id="plan", label="Plan the week"),
    ]
    client, gw, agent, _conv = await start(rig, starters=starters)
    listing = await get_json(client, LIST)
    assert listing["new"] == AGENT + "/new"
    page = await get_json(client, listing["new"])
    assert page == {
        "title": "New conversation",
        "starters": [
            {"id": "tidy", "label": "Tidy my notes", "description": "Sorts them into folders"},
            {"id": "plan", "label": "Plan the week", "description": None},
        ],
        "empty": None,
        "error": None,
    }  # N2: no folder, no text, no agent, shell or machine command
    tap = {"request_id": "n1", "starter": "plan"}
    started = await post_json(client, LIST, tap)
    assert started["outcome"] == "accepted"
    new_id = started["conversation_id"]
    assert (await post_json(client, LIST, tap))["conversation_id"] == new_id  # a retried tap
    await eventually(lambda: new_id in gw.mirrors["desk"].conversations)
    listing = await get_json(client, LIST)
    row = next(r for r in listing["rows"] if r["conversation_id"] == new_id)
    assert row["title"] == "Plan the week"
    assert len(agent.conversations) == 2  # one new conversation
    chat = await get_json(client, row["href"])
    assert chat["header"]["title"] == "Plan the week"
    folder = await client.post(LIST, json={"request_id": "n2", "starter": "plan", "folder": "/"})
    assert folder.status == 400  # a starter takes no folder


async def test_N2_the_agent_decides_what_a_starter_opens(rig: Rig) -> None:
    client, gw, agent, _conv = await start(rig, starters=[Starter(id="tidy", label="Tidy")])

    @agent.on_start
    async def begin(starter: str) -> ConversationHandle:
        conv = await agent.open_conversation(title="Tidying ~/notes", workspace="~/notes")
        await conv.append(kind="reply", text="Starting with the oldest.")
        return conv

    started = await post_json(client, LIST, {"request_id": "n1", "starter": "tidy"})
    new_id = started["conversation_id"]
    await eventually(lambda: new_id in gw.mirrors["desk"].conversations)
    chat = await get_json(client, f"{LIST}/{new_id}")
    assert chat["header"]["title"] == "Tidying ~/notes"
    assert [line["text"] for line in chat["lines"]] == ["Starting with the oldest."]


async def test_N3_no_starters(rig: Rig) -> None:
    client, _gw, _agent, _conv = await start(rig)
    page = await get_json(client, AGENT + "/new")
    assert page["title"] == "New conversation"
    assert page["starters"] == []
    assert page["empty"] == "This machine's durable agent offers no starters yet."
