"""The crew's pure parts: the lead's dashboard with members' sections (W1–W3), the ``crew``
list of sources.json (and where a member's token may travel), and URL rewriting."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from collie_gateway.crew import rewrite_urls
from collie_gateway.errors import SourcesError
from collie_gateway.sources import load_crew, load_sources
from collie_gateway.strings import Catalogue
from collie_gateway.views.dashboard import AgentRow, RightEdge, Section, build_dashboard

CAT = Catalogue()


def row(agent: str, *, waiting: bool = False, machine: str | None = None) -> AgentRow:
    return AgentRow(
        agent=agent,
        line1=agent,
        badge="Experimental",
        line2="durable, local",
        state="ready",
        right=RightEdge(open=1, waiting=1 if waiting else None),
        waiting=waiting,
        href=f"/api/v1/agents/{agent}/conversations",
        machine=machine,
    )


def member(machine: str, *rows: AgentRow) -> Section:
    return Section(kind="durable_agents", title=machine, rows=list(rows), machine=machine)


def order(board: object) -> list[tuple[str, str | None]]:
    data = msgspec.to_builtins(board)
    return [(s["kind"], s.get("machine")) for s in data["sections"]]


def test_W1_own_section_first_naming_no_machine_then_crew_order() -> None:
    members = [member("workshop", row("pi")), member("attic", row("desk"))]
    board = build_dashboard([row("mine")], ["home"], CAT, members=members)
    assert order(board) == [
        ("spaces", None),
        ("durable_agents", None),
        ("durable_agents", "workshop"),
        ("durable_agents", "attic"),
    ]
    assert board.durable_agents_position == "below"


def test_W1_a_lead_with_no_agents_of_its_own_shows_only_its_members() -> None:
    board = build_dashboard([], ["home"], CAT, members=[member("workshop", row("pi"))])
    assert order(board) == [("spaces", None), ("durable_agents", "workshop")]
    assert board.durable_agents_position is None


def test_W3_only_the_machine_with_a_waiting_ask_moves_above_the_spaces() -> None:
    members = [member("workshop", row("pi")), member("attic", row("desk", waiting=True))]
    board = build_dashboard([row("mine")], ["home"], CAT, members=members)
    assert order(board) == [
        ("durable_agents", "attic"),
        ("spaces", None),
        ("durable_agents", None),
        ("durable_agents", "workshop"),
    ]
    both = build_dashboard([row("mine", waiting=True)], ["home"], CAT, members=members)
    assert order(both)[:3] == [
        ("durable_agents", None),
        ("durable_agents", "attic"),
        ("spaces", None),
    ]
    assert both.durable_agents_position == "above"


def test_W3_pending_only_keeps_waiting_rows_across_machines() -> None:
    members = [
        member("workshop", row("pi"), row("pi2", waiting=True)),
        member("attic", row("desk")),
    ]
    board = build_dashboard([row("mine")], ["home"], CAT, pending_only=True, members=members)
    assert order(board) == [("durable_agents", "workshop"), ("spaces", None)]
    data = msgspec.to_builtins(board)
    assert [r["agent"] for r in data["sections"][0]["rows"]] == ["pi2"]
    assert board.durable_agents_position is None


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "sources.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_W1_crew_list_in_order_token_from_env_and_kept_out_of_repr(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "durable_agents": [{"name": "desk", "socket": "/run/desk.sock"}],
            "crew": [
                {"name": "workshop", "url": "https://workshop.example:8765/", "token_env": "W"},
                {"name": "attic", "url": "http://127.0.0.1:9000"},
                {"name": "v6", "url": "http://[::1]:9001"},
            ],
        },
    )
    crew = load_crew(path, {"W": "s3cret-token"})
    assert [m.name for m in crew] == ["workshop", "attic", "v6"]
    assert crew[0].url == "https://workshop.example:8765"
    assert crew[0].token == "s3cret-token"
    assert "s3cret-token" not in repr(crew)
    assert [s.name for s in load_sources(path, {})] == ["desk"]


@pytest.mark.parametrize(
    ("entry", "fault"),
    [
        (
            {"name": "w", "url": "http://workshop.example:8765"},
            "crew member 1 ('w'): url 'http://workshop.example:8765' must be https:// off loopback",
        ),
        ({"name": "w"}, "crew member 1 ('w'): \"url\" is required"),
        ({"name": "w", "url": "https://w", "token_env": "NOPE"}, "NOPE is not set or empty"),
        ({"name": "w", "url": "https://w", "socket": "/x"}, "unknown key 'socket'"),
        ({"name": "a/b", "url": "https://w"}, "no '/'"),
    ],
)
def test_W4_a_bad_crew_entry_is_one_clear_error(tmp_path: Path, entry: object, fault: str) -> None:
    path = write(tmp_path, {"crew": [entry]})
    with pytest.raises(SourcesError) as caught:
        load_crew(path, {})
    assert fault in str(caught.value)
    assert str(caught.value).startswith(str(path))


def test_W4_duplicate_member_names_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, {"crew": [{"name": "w", "url": "https://a"}] * 2})
    with pytest.raises(SourcesError, match="duplicate name 'w'"):
        load_crew(path, {})


def test_W4_a_members_urls_become_the_leads_and_texts_stay() -> None:
    member_json = {
        "href": "/api/v1/agents/pi/conversations",
        "rows": [{"href": "/api/v1/agents/pi/conversations/c1", "title": "/api/v1/agents/x"}],
        "cards": {"cards": [{"answer_url": "/api/v1/agents/pi/asks/a1/answer"}]},
        "new": "/api/v1/agents/pi/new",
    }
    out = rewrite_urls(member_json, "/api/v1/machines/workshop/")
    assert out == {
        "href": "/api/v1/machines/workshop/agents/pi/conversations",
        "rows": [
            {
                "href": "/api/v1/machines/workshop/agents/pi/conversations/c1",
                "title": "/api/v1/agents/x",
            }
        ],
        "cards": {"cards": [{"answer_url": "/api/v1/machines/workshop/agents/pi/asks/a1/answer"}]},
        "new": "/api/v1/machines/workshop/agents/pi/new",
    }
