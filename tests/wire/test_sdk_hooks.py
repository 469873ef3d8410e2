"""The SDK's hooks for bridges: an agent's own answer check (400, nothing recorded) and an ask
withdrawn without an answer (a later reply is ``not_open``)."""

from __future__ import annotations

from fixtures.agents.harness import serve_agent
from tests.wire.conftest import AgentFactory, Client, eventually
from wire.agent import ConversationHandle, Option
from wire.messages import Answer, Ask


async def test_an_agents_own_check_refuses_with_400_and_records_nothing(
    make_agent: AgentFactory,
) -> None:
    def no_short_names(ask: Ask, answer: Answer) -> str | None:
        return "Name: at least 2 characters." if len(answer.text or "") < 2 else None

    async with serve_agent(make_agent(answer_check=no_short_names)) as served:
        conv = await served.agent.open_conversation(id="c1")
        ask = await conv.ask(id="a1", kind="text", title="Name?")
        client = Client(served.address)
        try:
            body = {"request_id": "r1", "version": 1, "answer": {"text": "A"}}
            refused = await client.post("/asks/a1/reply", body)
            assert (refused.status, refused.body["error"]) == (400, "bad_request")
            assert refused.body["message"] == "Name: at least 2 characters."
            assert ask.open
            # Nothing was recorded: the same request id may carry the corrected answer.
            body["answer"] = {"text": "Ada"}
            assert await client.outcome("/asks/a1/reply", body) == "accepted"
        finally:
            await client.close()


async def test_a_withdrawn_ask_answers_not_open_with_its_reason(make_agent: AgentFactory) -> None:
    async with serve_agent(make_agent()) as served:
        conv = await served.agent.open_conversation(id="c1")
        ask = await conv.ask(
            id="a1", kind="permission", options=[Option(id="y", label="Yes", role="allow")]
        )
        withdrawn = await ask.withdraw()
        assert withdrawn.how == "stopped"
        assert await ask.withdraw() == withdrawn  # already ended: the same resolution
        client = Client(served.address)
        try:
            body = {"request_id": "r1", "version": 1, "answer": {"option": "y"}}
            answer = await client.post("/asks/a1/reply", body)
            assert (answer.body["outcome"], answer.body["reason"]) == ("not_open", "stopped")
        finally:
            await client.close()
        assert conv.state == "idle"


async def test_on_close_runs_once_after_a_close_command(make_agent: AgentFactory) -> None:
    agent = make_agent()
    closed: list[str] = []

    @agent.on_close
    async def gone(conv: ConversationHandle) -> None:
        closed.append(conv.id)

    async with serve_agent(agent) as served:
        await served.agent.open_conversation(id="c1")
        client = Client(served.address)
        try:
            for _ in range(2):  # a retry, and a second close of a closed one, run nothing
                assert await client.outcome("/conversations/c1/close", {"request_id": "x"}) == (
                    "accepted"
                )
            assert await client.outcome("/conversations/c1/close", {"request_id": "y"}) == (
                "accepted"
            )
            await eventually(lambda: closed == ["c1"])
        finally:
            await client.close()
    assert closed == ["c1"]
