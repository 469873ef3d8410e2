"""The dashboard's Durable agents section through the HTTP API, against SDK agents on real
sockets (spec D1–D10, V1, R5)."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from collie_gateway.core.mirror import LinkState
from collie_gateway.sources import Source
from collie_gateway.views.dashboard import agent_row, build_dashboard
from tests.collie_gateway.conftest import Rig, eventually, get_json
from wire.agent import Option, ToolRef

PERMISSION = [
    Option(id="yes", label="Yes, run it", role="allow"),
    Option(id="no", label="No", role="deny"),
]


def section(dash: dict[str, Any]) -> dict[str, Any] | None:
    return next((s for s in dash["sections"] if s["kind"] == "durable_agents"), None)


def row(dash: dict[str, Any], name: str) -> dict[str, Any]:
    sec = section(dash)
    assert sec is not None
    return next(r for r in sec["rows"] if r["agent"] == name)


async def test_D1_D2_D3_D5_rows_in_their_section(rig: Rig) -> None:
    desk = rig.agent("desk", runtime="desk", features=["history"])
    sock = await rig.serve("desk")
    pi = rig.agent("pi", runtime=None)
    url = await rig.serve_tcp("pi", pi)
    await desk.open_conversation("c1", title="Notes")
    c2 = await desk.open_conversation("c2", title="Plan")
    await c2.ask(
        kind="permission",
        id="a1",
        title="Run ls?",
        tool=ToolRef(call_id="t1", name="shell"),
        options=PERMISSION,
    )
    client, gw = await rig.gateway(
        [Source(name="desk", socket=sock), Source(name="pi-durable", url=url)],
        spaces=("main", "work"),
    )
    await eventually(lambda: all(m.state is LinkState.READY for m in gw.mirrors.values()))
    dash = await get_json(client, "/api/v1/dashboard")
    sec = section(dash)
    assert sec is not None
    assert sec["title"] == "Durable agents"
    assert [r["agent"] for r in sec["rows"]] == ["desk", "pi-durable"]
    desk_row = row(dash, "desk")
    assert desk_row["line1"] == "desk"
    assert desk_row["badge"] == "Experimental"
    assert desk_row["line2"] == "desk, local"
    assert desk_row["right"] == {"open": 2, "waiting": 1, "waiting_color": "attention"}
    pi_row = row(dash, "pi-durable")
    assert pi_row["line2"] == "durable, local"  # D3: no runtime in its hello
    assert pi_row["right"] == {"open": 0}  # D5: the waiting count is hidden at zero
    spaces = next(s for s in dash["sections"] if s["kind"] == "spaces")
    assert [s["name"] for s in spaces["spaces"]] == ["main", "work"]


async def test_D4_remote_url(rig: Rig) -> None:
    client, _gw = await rig.gateway(
        [Source(name="far", url="https://agents.example.invalid:9")],
    )
    dash = await get_json(client, "/api/v1/dashboard")
    assert row(dash, "far")["line2"] == "durable, remote"


async def test_D6_starting_then_unreachable_without_counts(rig: Rig) -> None:
    client, gw = await rig.gateway([Source(name="gone", socket=rig.tmp / "none.sock")])
    first = row(await get_json(client, "/api/v1/dashboard"), "gone")
    assert first["right"] in ({"label": "Starting"}, {"label": "Unreachable"})
    await eventually(lambda: gw.mirrors["gone"].state is LinkState.UNREACHABLE)
    r = row(await get_json(client, "/api/v1/dashboard"), "gone")
    assert r["right"] == {"label": "Unreachable"}
    assert r["state"] == "unreachable"


async def test_D6_link_states_agent_killed_and_back(rig: Rig) -> None:
    agent = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    await agent.open_conversation("c1", title="Notes")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    await rig.stop("desk")
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.UNREACHABLE)
    r = row(await get_json(client, "/api/v1/dashboard"), "desk")
    assert r["right"] == {"label": "Unreachable"}
    again = rig.agent("desk", runtime="desk")
    await rig.serve("desk", again)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    r = row(await get_json(client, "/api/v1/dashboard"), "desk")
    assert r["right"] == {"open": 1}  # its state file kept the conversation


async def test_D7_section_moves_above_while_waiting_and_back_below(rig: Rig) -> None:
    agent = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Notes")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], spaces=("main",))
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    dash = await get_json(client, "/api/v1/dashboard")
    assert [s["kind"] for s in dash["sections"]] == ["spaces", "durable_agents"]
    assert dash["durable_agents_position"] == "below"
    ask = await conv.ask(kind="text", id="a1", title="Name?")
    await eventually(lambda: gw.mirrors["desk"].waiting_count == 1)
    dash = await get_json(client, "/api/v1/dashboard")
    assert [s["kind"] for s in dash["sections"]] == ["durable_agents", "spaces"]
    assert dash["durable_agents_position"] == "above"
    await ask.decide()
    await eventually(lambda: gw.mirrors["desk"].waiting_count == 0)
    dash = await get_json(client, "/api/v1/dashboard")
    assert [s["kind"] for s in dash["sections"]] == ["spaces", "durable_agents"]


async def test_D8_no_agents_no_section(rig: Rig) -> None:
    client, _ = await rig.gateway([], spaces=("main",))
    dash = await get_json(client, "/api/v1/dashboard")
    assert section(dash) is None
    assert [s["kind"] for s in dash["sections"]] == ["spaces"]


async def test_D8_unreachable_agent_still_has_its_row(rig: Rig) -> None:
    client, gw = await rig.gateway([Source(name="gone", socket=rig.tmp / "none.sock")])
    await eventually(lambda: gw.mirrors["gone"].state is LinkState.UNREACHABLE)
    assert section(await get_json(client, "/api/v1/dashboard")) is not None


async def test_D9_pending_only_lists_waiting_agents(rig: Rig) -> None:
    a = rig.agent("a", runtime="a")
    b = rig.agent("b", runtime="b")
    sa, sb = await rig.serve("a"), await rig.serve("b")
    conv = await a.open_conversation("c1")
    await b.open_conversation("c2")
    await conv.ask(kind="text", id="q", title="Name?")
    client, gw = await rig.gateway([Source(name="a", socket=sa), Source(name="b", socket=sb)])
    await eventually(
        lambda: gw.mirrors["a"].waiting_count == 1 and gw.mirrors["b"].state is LinkState.READY
    )
    dash = await get_json(client, "/api/v1/dashboard?pending_only=true")
    sec = section(dash)
    assert sec is not None
    assert [r["agent"] for r in sec["rows"]] == ["a"]
    assert dash["pending_only"] is True
    all_rows = section(await get_json(client, "/api/v1/dashboard?pending_only=false"))
    assert all_rows is not None
    assert len(all_rows["rows"]) == 2
    bad = await get_json(client, "/api/v1/dashboard?pending_only=maybe", status=400)
    assert bad["error"] == "bad_request"


async def test_D10_every_row_opens_its_list(rig: Rig) -> None:
    agent = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    client, gw = await rig.gateway(
        [Source(name="desk", socket=sock), Source(name="gone", socket=rig.tmp / "x.sock")]
    )
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    await eventually(lambda: gw.mirrors["gone"].state is LinkState.UNREACHABLE)
    sec = section(await get_json(client, "/api/v1/dashboard"))
    assert sec is not None
    for r in sec["rows"]:
        listing = await get_json(client, r["href"])
        assert listing["agent"] == r["agent"]
    del agent


async def test_V1_R5_wire2_agent_version_mismatch(rig: Rig) -> None:
    agent = rig.agent("w2", runtime="future", wire_version=2)
    sock = await rig.serve("w2")
    client, gw = await rig.gateway([Source(name="w2", socket=sock)])
    await eventually(lambda: gw.mirrors["w2"].state is LinkState.VERSION_MISMATCH)
    r = row(await get_json(client, "/api/v1/dashboard"), "w2")
    assert r["right"] == {"label": "Version mismatch"}
    home = await get_json(client, "/api/v1/agents/w2")
    assert home["warning"] == (
        "Program speaks wire v2, this Collie speaks v1. Update Collie, or the durable agent's SDK."
    )
    listing = await get_json(client, "/api/v1/agents/w2/conversations")
    assert listing["footer"]["text"] == home["warning"]
    assert listing["warning"] == home["warning"]
    del agent


async def test_R5_survives_restart_from_sqlite(rig: Rig) -> None:
    """The dashboard answers from SQLite at once after a restart (L5)."""
    agent = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Notes")
    await conv.ask(kind="text", id="q", title="Name?")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].waiting_count == 1)
    await gw.mirrors_repo.flush()
    await client.close()
    await rig.stop("desk")
    client2, gw2 = await rig.gateway([Source(name="desk", socket=sock)])
    assert gw2.mirrors["desk"].open_count == 1
    assert gw2.mirrors["desk"].waiting_count == 1
    stored = await get_json(client2, "/api/v1/agents/desk/conversations?poll=true")
    assert [r["conversation_id"] for r in stored["rows"]] == ["c1"]
    assert json.dumps(stored["rows"][0]["line"]) == json.dumps("Name?")


async def test_D1_D5_D6_D7_dashboard_from_the_live_rows_is_what_a_fresh_build_says(
    rig: Rig,
) -> None:
    """Issue 16: the dashboard is assembled from the rows encoded for the live stream, and its
    JSON kept until a row changes; after every kind of change it says what building it
    afresh from the mirrors says."""
    desk = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    pi = rig.agent("pi", runtime="pi")
    psock = await rig.serve("pi", pi)
    conv = await desk.open_conversation("c1", title="Notes")
    sources = [Source(name="desk", socket=sock), Source(name="pi", socket=psock)]
    client, gw = await rig.gateway(sources, spaces=("main",))

    async def same() -> dict[str, Any]:
        cat = gw.settings.catalogue
        for pending_only in (False, True):
            # in-process, with no await between: the same moment of the mirrors
            served = gw.rows.dashboard_json(pending_only=pending_only)
            assert served == msgspec.json.encode(gw.rows.dashboard(pending_only=pending_only))
            fresh = build_dashboard(
                [agent_row(s, gw.mirrors[s.name], cat) for s in sources],
                ("main",),
                cat,
                pending_only=pending_only,
            )
            assert json.loads(served) == json.loads(msgspec.json.encode(fresh))
        dash: dict[str, Any] = await get_json(client, "/api/v1/dashboard")
        return dash

    await same()  # maybe still starting
    await eventually(lambda: all(m.state is LinkState.READY for m in gw.mirrors.values()))
    assert row(await same(), "desk")["right"] == {"open": 1}
    ask = await conv.ask(kind="text", id="a1", title="Name?")
    await eventually(lambda: gw.mirrors["desk"].waiting_count == 1)
    assert (await same())["durable_agents_position"] == "above"
    await ask.decide()
    c2 = await desk.open_conversation("c2", title="Plan")
    await eventually(lambda: gw.mirrors["desk"].open_count == 2)
    await c2.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    assert row(await same(), "desk")["right"] == {"open": 1}
    await rig.stop("pi")
    await eventually(lambda: gw.mirrors["pi"].state is LinkState.UNREACHABLE)
    assert row(await same(), "pi")["right"] == {"label": "Unreachable"}
