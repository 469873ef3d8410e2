"""hello: a durable agent in one file, the one docs/agents.md walks through.

On a Unix socket:
    python docs/examples/hello_agent.py --socket /tmp/hello.sock --state /tmp/hello.db
Over HTTP, with a token:
    AGENT_TOKEN=s3cret python docs/examples/hello_agent.py --port 8711 --state /tmp/hello-http.db
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

from wire.agent import (
    Agent,
    AgentRunner,
    AskHandle,
    ConversationHandle,
    FormField,
    Option,
    SendMessage,
    ToolRef,
)


def build(state: Path, token: str | None) -> Agent:
    """The agent: who it is, what it can do, where it keeps its state, how it answers."""
    agent = Agent(
        runtime="hello",
        features=["history", "stop"],  # the phone shows a Stop control
        state_path=state,  # conversations, asks, answers: all survive a restart
        token=token,  # None: no token (fine on a Unix socket)
    )

    @agent.on_message
    async def reply(conv: ConversationHandle, msg: SendMessage) -> None:
        # A streamed reply: the phone sees it grow. Stop cancels this task at an await;
        # the SDK then marks the item final and tells the phone the turn stopped.
        item = await conv.append(kind="reply", final=False)
        for word in f"You said: {msg.text}".split():
            await item.delta(word + " ")
            await asyncio.sleep(0.2)
        await item.finish()

    return agent


async def setup(agent: Agent) -> None:
    """At start-up (and again after every restart): one conversation, one ask of each kind.

    The ids are fixed, so a restart raises the same asks again instead of new ones; an ask
    answered in an earlier run is not raised again, and its handle holds the answer.
    """
    conv = await agent.open_conversation(id="hello", title="Getting to know you")
    asks = [
        await conv.ask(
            id="hello-permission",
            kind="permission",
            title="May I read your notes?",
            tool=ToolRef(call_id="call-1", name="read_notes"),
            options=[
                Option(id="yes", label="Read them", role="allow"),
                Option(id="no", label="Don't", role="deny"),
            ],
        ),
        await conv.ask(
            id="hello-choice",
            kind="choice",
            title="Tea or coffee?",
            options=[Option(id="tea", label="Tea"), Option(id="coffee", label="Coffee")],
        ),
        await conv.ask(id="hello-name", kind="text", title="What shall I call you?", max_length=40),
        await conv.ask(
            id="hello-form",
            kind="form",
            title="Remind you of what?",
            fields=[
                FormField(id="what", kind="text", label="What", required=True),
                FormField(id="loud", kind="switch", label="With sound"),
            ],
        ),
    ]
    for ask in asks:
        # Never wait for an answer here: setup would not return. Wait in the background.
        agent.spawn(act_on(ask))


async def act_on(ask: AskHandle) -> None:
    """Wait for the answer and act on it once, even across restarts."""
    resolution = await ask.wait()  # after a restart: at once, with the recorded answer
    answer = resolution.answer
    said = ""
    if answer is not None:
        # A form's values as JSON, as the phone sent them: {"what": "milk", "loud": true}.
        said = ": " + (answer.option or answer.text or json.dumps(answer.fields))
    # follow_up appends this notice once: a restart does not add it again.
    await ask.follow_up(f"{ask.ask.title} {resolution.how}{said}")


def main() -> None:
    """Parse the command line and serve until Ctrl-C."""
    parser = argparse.ArgumentParser(description="hello, a durable agent")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", type=Path, help="listen on this Unix socket (0600)")
    where.add_argument("--port", type=int, help="listen on 127.0.0.1:PORT")
    parser.add_argument("--state", type=Path, required=True, help="the agent's SQLite file")
    args = parser.parse_args()
    agent = build(args.state, token=os.environ.get("AGENT_TOKEN"))

    def ready(runner: AgentRunner) -> None:
        print("hello listens on", runner.socket_path or runner.url, flush=True)

    agent.run(socket=args.socket, port=args.port or 0, setup=setup, ready=ready)


if __name__ == "__main__":
    main()
