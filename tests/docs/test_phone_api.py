"""docs/phone-api.md's answer bodies are the ones the gateway takes (T1, A5): each body of its
table is sent to a real gateway for a card of its kind and reaches the agent as written;
"Always allow" without its second tap is refused with the sentence the page quotes."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from collie_gateway.sources import Source
from fixtures.agents.harness import REPO
from tests.collie_gateway.conftest import Rig, eventually, get_json, post_json
from wire.agent import FormField, Option, ToolRef

PAGE = REPO / "docs" / "phone-api.md"


def _answer_rows() -> list[tuple[str, list[str]]]:
    """The table under "Answer bodies": each row's ask kind and the answers in its cell."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Answer bodies", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        match = re.match(r"\| `(\w+)`[^|]*\| (.*) \|$", line)
        if match:
            rows.append((match[1], re.findall(r"`(\{.*?\})`", match[2])))
    return rows


OPTIONS = {
    "permission": [
        Option(id="yes", label="Read them", role="allow"),
        Option(id="always", label="Always read them", role="always"),
        Option(id="no", label="Don't", role="deny"),
    ],
    "choice": [Option(id="tea", label="Tea"), Option(id="milk", label="Milk")],
}
FIELDS = [
    FormField(id="what", kind="text", label="What", required=True),
    FormField(id="loud", kind="switch", label="With sound"),
]


async def test_T1_A5_the_documented_answer_bodies_are_accepted_always_needs_confirmed(
    rig: Rig,
) -> None:
    rows = _answer_rows()
    assert [kind for kind, _ in rows] == ["permission", "permission", "choice", "text", "form"]
    agent = rig.agent("desk", runtime="desk", features=["history"])
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Answers")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state.value == "ready")  # as the phone sees it
    n = 0
    for kind, answers in rows:
        for body in answers:
            n += 1
            answer: dict[str, Any] = json.loads(body)
            extra: dict[str, Any] = {"options": OPTIONS.get(kind)} if kind in OPTIONS else {}
            if kind == "permission":
                extra["tool"] = ToolRef(call_id=f"t{n}", name="read_notes")
            if "options" in answer:
                extra["multiple"] = True
            if kind == "form":
                extra["fields"] = FIELDS
            ask = await conv.ask(id=f"a{n}", kind=kind, title=f"Ask {n}?", **extra)
            await _card_shows(client, ask.id)
            path = f"/api/v1/agents/desk/asks/{ask.id}/answer"
            if answer.get("confirmed"):
                bare = {k: v for k, v in answer.items() if k != "confirmed"}
                refused = await post_json(client, path, _tap(f"r{n}-1", bare))
                assert refused["outcome"] == "refused"
                assert refused["card"]["line"] == '"Always allow" needs a second tap.'
                assert '"Always allow\\" needs a second tap."' in PAGE.read_text("utf-8")
            result = await post_json(client, path, _tap(f"r{n}", answer))
            assert result["outcome"] == "accepted", (body, result)
            resolution = await asyncio.wait_for(ask.wait(), 10)
            assert resolution.answer is not None
            got = {k: getattr(resolution.answer, k) for k in answer}
            assert got == answer
    assert n == 6


async def _card_shows(client: Any, ask_id: str) -> None:
    for _ in range(400):
        chat = await get_json(client, "/api/v1/agents/desk/conversations/c1?all_cards=true")
        if ask_id in [c["ask_id"] for c in chat["cards"]["cards"]]:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no card for {ask_id}")


def _tap(request_id: str, answer: dict[str, Any]) -> dict[str, Any]:
    return {"request_id": request_id, "version": 1, "answer": answer}
