"""The MCP bridge end to end: the ``mcp`` package's own client over Streamable HTTP, the
bridge, and a real gateway; every ask answered through the phone API (spec A1, A4, S1, T1,
R3, R4; issue 24)."""

from __future__ import annotations

import asyncio

from mcp.client.client import Client
from mcp.client.session import ClientRequestContext
from mcp_types import Implementation, ListRootsResult, Root

from bridges.mcp.bridge import NO_MESSAGES
from bridges.mcp.tools import NOT_ANSWERED, TOOLS
from tests.bridges.mcp_rig import (
    Mcp,
    call_soon,
    tool_json,
)
from tests.collie_gateway.conftest import eventually, post_json


async def test_tools_listed_with_exact_described_schemas(mcp: Mcp) -> None:
    async with mcp.session() as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == [
        "ask_permission",
        "ask_choice",
        "ask_text",
        "ask_form",
        "notify",
        "permission_prompt",
    ]
    for tool in listed:
        schema = tool.input_schema
        assert tool.description
        assert schema["type"] == "object"
        assert "$ref" not in str(schema)
        assert all(p.get("description") for p in schema["properties"].values()), tool.name
        if tool.name != "permission_prompt":  # Claude Code may add keys of its own
            assert schema["additionalProperties"] is False
    by_name = {t.name: t.input_schema for t in listed}
    assert by_name["ask_permission"]["required"] == ["tool_name"]
    assert by_name["ask_choice"]["required"] == ["question", "options"]
    assert by_name["ask_choice"]["properties"]["options"]["maxItems"] == 8
    assert by_name["ask_text"]["properties"]["max_length"]["maximum"] == 2000
    assert by_name["ask_form"]["properties"]["fields"]["maxItems"] == 6
    field = by_name["ask_form"]["properties"]["fields"]["items"]
    assert field["properties"]["kind"]["enum"] == ["select", "switch", "text"]
    assert by_name["permission_prompt"]["required"] == ["tool_name"]
    assert by_name == {name: spec.schema for name, spec in TOOLS.items()}


async def test_A1_A4_S1_ask_permission_card_under_its_tool_item_allow(mcp: Mcp) -> None:
    args = {
        "tool_name": "Bash",
        "arguments": {"command": "rm -rf build/"},
        "reasons": ["It deletes files."],
        "irreversible": True,
    }
    async with mcp.session() as client:
        task = await call_soon(client, "ask_permission", args)
        [(conv, ask)] = await mcp.wait_asks(1)
        card = await mcp.card(conv)
        items = await mcp.items(conv)
        assert [(i["kind"], i["name"], i["status"]) for i in items] == [("tool", "Bash", "running")]
        assert card["tool_call_id"] == items[0]["call_id"]  # A1: under the call it is about
        assert card["title"] == "Allow Bash?"
        assert card["kind"] == "permission"
        handle = mcp.bridge.agent._open_asks[ask]
        assert [(o.id, o.role) for o in handle.ask.options] == [
            ("allow", "allow"),
            ("always", "always"),
            ("deny", "deny"),
        ]
        assert [(a.name, a.value, a.origin) for a in handle.ask.arguments] == [
            ("command", "rm -rf build/", "model")
        ]
        assert handle.ask.reasons == ["It deletes files."]
        assert handle.ask.irreversible is True
        assert (await mcp.answer(ask, {"option": "allow"}))["outcome"] == "accepted"
        result = await asyncio.wait_for(task, 10)
    assert tool_json(result) == {"outcome": "answered", "decision": "allow"}
    assert result.structured_content == {"outcome": "answered", "decision": "allow"}
    assert result.is_error is False
    assert [i["status"] for i in await mcp.items(conv) if i["kind"] == "tool"] == ["done"]


async def test_A4_ask_permission_denied(mcp: Mcp) -> None:
    async with mcp.session() as client:
        task = await call_soon(client, "ask_permission", {"tool_name": "deploy"})
        [(conv, ask)] = await mcp.wait_asks(1)
        await mcp.answer(ask, {"option": "deny"})
        result = await asyncio.wait_for(task, 10)
    assert tool_json(result) == {"outcome": "answered", "decision": "deny"}
    assert [i["status"] for i in await mcp.items(conv) if i["kind"] == "tool"] == ["denied"]


async def test_A4_ask_choice_one_and_multiple(mcp: Mcp) -> None:
    async with mcp.session() as client:
        one = await call_soon(
            client, "ask_choice", {"question": "Which branch?", "options": ["main", "dev"]}
        )
        [(conv, ask)] = await mcp.wait_asks(1)
        card = await mcp.card(conv)
        assert card["title"] == "Which branch?"
        assert card["body"]["rows"] == [
            {"option_id": "o1", "label": "main"},
            {"option_id": "o2", "label": "dev"},
        ]
        await mcp.answer(ask, {"option": "o2"})
        assert tool_json(await asyncio.wait_for(one, 10)) == {
            "outcome": "answered",
            "choice": "dev",
        }
        many = await call_soon(
            client,
            "ask_choice",
            {"question": "Which checks?", "options": ["lint", "types", "tests"], "multiple": True},
        )
        [(_, ask2)] = await mcp.wait_asks(1)
        await mcp.answer(ask2, {"options": ["o1", "o3"]}, request_id="r2")
        assert tool_json(await asyncio.wait_for(many, 10)) == {
            "outcome": "answered",
            "choices": ["lint", "tests"],
        }


async def test_A4_ask_text_within_its_limit(mcp: Mcp) -> None:
    async with mcp.session() as client:
        task = await call_soon(
            client, "ask_text", {"question": "Commit message?", "max_length": 20}
        )
        [(_, ask)] = await mcp.wait_asks(1)
        assert mcp.bridge.agent._open_asks[ask].ask.max_length == 20
        too_long = await mcp.answer(ask, {"text": "x" * 21}, request_id="r-long", status=400)
        assert too_long == {"error": "bad_request", "message": "The text is over 20 characters."}
        await mcp.answer(ask, {"text": "Fix the build"}, request_id="r-ok")
        result = await asyncio.wait_for(task, 10)
    assert tool_json(result) == {"outcome": "answered", "text": "Fix the build"}


async def test_A4_ask_form_text_select_switch(mcp: Mcp) -> None:
    form = {
        "title": "Release",
        "fields": [
            {"id": "version", "label": "Version", "kind": "text", "required": True},
            {"id": "channel", "label": "Channel", "kind": "select", "options": ["beta", "stable"]},
            {"id": "notify", "label": "Tell the team", "kind": "switch"},
        ],
    }
    async with mcp.session() as client:
        task = await call_soon(client, "ask_form", form)
        [(_, ask)] = await mcp.wait_asks(1)
        fields = mcp.bridge.agent._open_asks[ask].ask.fields
        assert [(f.id, f.kind, f.required) for f in fields] == [
            ("version", "text", True),
            ("channel", "select", False),
            ("notify", "switch", False),
        ]
        answer = {"fields": {"version": "1.2.0", "channel": "o2", "notify": True}}
        assert (await mcp.answer(ask, answer))["outcome"] == "accepted"
        result = await asyncio.wait_for(task, 10)
    assert tool_json(result) == {
        "outcome": "answered",
        "values": {"version": "1.2.0", "channel": "stable", "notify": True},
    }


async def test_notify_is_a_notice_and_returns_at_once(mcp: Mcp) -> None:
    async with mcp.session("Codex") as client:
        result = await asyncio.wait_for(
            client.call_tool("notify", {"text": "Build finished: 12 tests passed."}), 10
        )
        assert tool_json(result) == {"outcome": "shown"}
        [conv] = list(mcp.bridge.agent._open)
        assert await mcp.texts(conv, "notice") == ["Build finished: 12 tests passed."]
        snapshot, _ = await mcp.bridge.agent.read_conversation(conv)
        assert snapshot is not None
        assert snapshot.title == "Codex"
    assert mcp.open_asks() == []


async def test_R3_a_deadline_expiring_returns_expired(mcp: Mcp) -> None:
    async with mcp.session() as client:
        task = await call_soon(client, "ask_text", {"question": "Name?", "deadline_seconds": 60})
        [(conv, ask)] = await mcp.wait_asks(1)
        card = await mcp.card(conv)
        assert card["deadline_label"] == "Expires in 1 min"
        mcp.rig.clock.advance(seconds=61)
        result = await asyncio.wait_for(task, 10)
        assert tool_json(result) == {"outcome": "expired", "message": NOT_ANSWERED["expired"]}
        late = await mcp.answer(ask, {"text": "late"}, request_id="r-late")
        assert late["outcome"] == "expired"
        assert [i["status"] for i in await mcp.items(conv) if i["kind"] == "tool"] == ["failed"]


async def test_two_sessions_at_once_are_two_conversations(mcp: Mcp) -> None:
    async with mcp.session("host-a") as a, mcp.session("host-b") as b:
        task_a = await call_soon(a, "ask_text", {"question": "For A?"})
        task_b = await call_soon(b, "ask_text", {"question": "For B?"})
        asks = await mcp.wait_asks(2)
        convs = {c for c, _ in asks}
        assert len(convs) == 2
        titles = {}
        for conv in convs:
            snapshot, _ = await mcp.bridge.agent.read_conversation(conv)
            assert snapshot is not None
            titles[snapshot.title] = conv
        assert set(titles) == {"host-a", "host-b"}
        by_conv = dict(asks)
        # Answered in reverse order, each to its own session.
        await mcp.answer(by_conv[titles["host-b"]], {"text": "bee"}, request_id="rb")
        await mcp.answer(by_conv[titles["host-a"]], {"text": "ay"}, request_id="ra")
        assert tool_json(await asyncio.wait_for(task_a, 10))["text"] == "ay"
        assert tool_json(await asyncio.wait_for(task_b, 10))["text"] == "bee"


async def test_progress_notifications_while_the_person_has_not_answered(mcp: Mcp) -> None:
    mcp.bridge.progress_every = 0.05
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with mcp.session() as client:
        task = asyncio.create_task(
            client.call_tool("ask_text", {"question": "Slow?"}, progress_callback=on_progress)
        )
        [(_, ask)] = await mcp.wait_asks(1)
        await eventually(lambda: len(seen) >= 2)
        await mcp.answer(ask, {"text": "done"})
        assert tool_json(await asyncio.wait_for(task, 10))["text"] == "done"
    assert [v for v, _ in seen[:2]] == [1, 2]
    assert seen[0][1] == "Waiting for the person's answer on their phone"


async def test_R4_closed_on_the_phone_the_call_returns_stopped_and_the_session_goes_on(
    mcp: Mcp,
) -> None:
    async with mcp.session("host") as client:
        task = await call_soon(client, "ask_text", {"question": "Wait?"})
        [(conv, _)] = await mcp.wait_asks(1)
        result = await post_json(
            mcp.client,
            f"/api/v1/agents/asks/conversations/{conv}/close",
            {"request_id": "close-1"},
        )
        assert result["outcome"] == "accepted"
        assert tool_json(await asyncio.wait_for(task, 10)) == {
            "outcome": "stopped",
            "message": NOT_ANSWERED["stopped"],
        }
        # The next call reopens the session's conversation.
        shown = await client.call_tool("notify", {"text": "Back again."})
        assert tool_json(shown) == {"outcome": "shown"}
        snapshot, _ = await mcp.bridge.agent.read_conversation(conv)
        assert snapshot is not None
        assert snapshot.state == "idle"
        assert "Back again." in await mcp.texts(conv, "notice")


async def test_a_message_from_the_phone_is_answered_with_a_notice(mcp: Mcp) -> None:
    async with mcp.session("host") as client:
        await client.call_tool("notify", {"text": "Hello."})
        [conv] = list(mcp.bridge.agent._open)
        result = await post_json(
            mcp.client,
            f"/api/v1/agents/asks/conversations/{conv}/messages",
            {"request_id": "m1", "text": "are you there?"},
        )
        assert result["outcome"] == "accepted"
        await mcp.wait_text(conv, "notice", NO_MESSAGES)


async def test_title_from_the_clients_first_root_folder(mcp: Mcp) -> None:
    shop = mcp.rig.tmp / "shop"

    async def roots(context: ClientRequestContext) -> ListRootsResult:
        return ListRootsResult(roots=[Root.model_validate({"uri": shop.as_uri(), "name": "shop"})])

    info = Implementation(name="cursor", version="1")
    async with Client(
        mcp.bridge.url, mode="legacy", client_info=info, list_roots_callback=roots
    ) as client:
        await client.call_tool("notify", {"text": "Started."})
        [conv] = list(mcp.bridge.agent._open)
        snapshot, _ = await mcp.bridge.agent.read_conversation(conv)
    assert snapshot is not None
    assert (snapshot.title, snapshot.workspace) == ("cursor · shop", str(shop))
