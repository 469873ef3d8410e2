"""Helper process: SDK agents for the benchmarks, each on its own Unix socket or TCP port on
127.0.0.1, all in this one process (so the gateway's process measures only itself).

Run by the benches: ``python bench/_agents.py SPEC.json``. The spec::

    {"agents": [{"name": "a000", "socket": "/tmp/cb-x/a000.sock", "state": "/tmp/cb-x/a000.db",
                 "open": 5, "closed": 0, "features": ["history"], "keep_events": 10000,
                 "extra_sockets": [], "tcp": false, "chat": false}],
     "max_seconds": 240}

First line out: ``{"ready": {name: {"url": ..., "socket": ...}}, "seconds": s}``. Commands, one
JSON object a line: ``ask``, ``permission``, ``stream``, ``pause``, ``resume``, ``last_event``,
``quit``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench._common import HELPER_MAX_SECONDS, Json, say, seed_agent_db, serve_commands
from wire.agent import Agent, AgentRunner, ConversationHandle, Option
from wire.messages import Argument, ToolRef

CHAT_ID = "c-bench"


class Host:
    def __init__(self, spec: list[Json]) -> None:
        self.spec = {s["name"]: s for s in spec}
        self.agents: dict[str, Agent] = {}
        self.runners: dict[str, list[AgentRunner]] = {}
        self.chats: dict[str, ConversationHandle] = {}
        self.calls = 0  # tool calls asked about so far (``permission``)

    def seed(self) -> None:
        """Write the seeded conversations (before the agents open their files)."""
        now = datetime.now(UTC)
        for s in self.spec.values():
            state = Path(s["state"])
            if (s.get("open", 0) or s.get("closed", 0)) and not state.exists():
                seed_agent_db(
                    state, open_count=s.get("open", 0), closed_count=s.get("closed", 0), now=now
                )

    async def start(self) -> Json:
        for name, s in self.spec.items():
            state = Path(s["state"])
            self.agents[name] = Agent(
                state_path=state,
                runtime="bench",
                subtitle="a benchmark agent",
                features=s.get("features", ["history"]),
                keep_events=s.get("keep_events", 10_000),
            )
        gate = asyncio.Semaphore(16)

        async def one(name: str) -> tuple[str, Json]:
            async with gate:
                return name, await self._serve(name)

        where = dict(await asyncio.gather(*(one(n) for n in self.spec)))
        return where

    async def _serve(self, name: str) -> Json:
        s = self.spec[name]
        agent = self.agents[name]
        await agent.start()
        if s.get("chat"):
            self.chats[name] = await agent.open_conversation(CHAT_ID, title="Bench chat")
        runners = []
        if s.get("tcp"):
            runners.append(await agent.serve_tcp("127.0.0.1", 0))
        else:
            runners.append(await agent.serve_unix(Path(s["socket"])))
        for extra in s.get("extra_sockets", []):
            runners.append(await agent.serve_unix(Path(extra)))
        self.runners[name] = runners
        first = runners[0]
        return {
            "url": first.url,
            "socket": str(first.socket_path) if first.socket_path else None,
            "extra": [str(r.socket_path) for r in runners[1:]],
        }

    async def ask(self, command: Json) -> Json:
        conv = self.chats[command["agent"]]
        handle = await conv.ask(
            kind="choice",
            title="Which branch should I merge?",
            text="Two branches are ready.",
            options=[Option(id="main", label="main"), Option(id="next", label="next")],
        )
        return {"ask": handle.id, "version": handle.version, "conversation": conv.id}

    async def permission(self, command: Json) -> Json:
        """A tool call the agent wants to run: its tool item (running), then a permission
        ask about it; once answered, the item says the call ran (done, with output)."""
        name = command["agent"]
        conv = self.chats[name]
        self.calls += 1
        call = f"call-{self.calls:05d}"
        line = f"pytest tests/test_module_{self.calls}.py -q"
        item = await conv.append(
            kind="tool", text=line, name="Bash", call_id=call, status="running"
        )
        handle = await conv.ask(
            kind="permission",
            title="Run a command?",
            text=line,
            tool=ToolRef(call_id=call, name="Bash"),
            options=[
                Option(id="allow", label="Allow", role="allow"),
                Option(id="deny", label="Deny", role="deny"),
            ],
            arguments=[Argument(name="command", value=line, origin="model")],
        )

        async def ran() -> None:
            resolution = await handle.wait()
            done = resolution.how == "answered"
            await item.update(status="done" if done else "failed", output="12 passed in 0.4s")

        self.agents[name].spawn(ran())
        return {"ask": handle.id, "version": handle.version, "conversation": conv.id}

    async def stream(self, command: Json) -> Json:
        name = command["agent"]
        conv = self.chats[name]
        store = self.agents[name]._store
        before = store.last_event_id
        started = time.perf_counter()
        item = await conv.append(kind="reply", final=False)
        agent = self.agents[name]
        paced = bool(command.get("paced"))
        gap = float(command.get("gap", 0.0))  # seconds between paced deltas (0: none)
        rate = float(command.get("rate", 0.0))  # paced deltas a second (0: as commits go)
        loop = asyncio.get_running_loop()
        begun = loop.time()
        for index in range(int(command["deltas"])):
            await item.delta(f"w{index:04d} ")
            if paced:  # one commit, so one chunk on each stream, per delta
                await agent._store.transact(_nothing)
                if gap:
                    await asyncio.sleep(gap)
                if rate:  # the next delta's slot; no wait when behind
                    await asyncio.sleep(max(0.0, begun + (index + 1) / rate - loop.time()))
        await item.finish()
        return {
            "item": item.id,
            "before": before,
            "last": store.last_event_id,
            "seconds": time.perf_counter() - started,
        }

    async def _chat(self, name: str) -> ConversationHandle:
        conv = self.chats.get(name)
        if conv is None:
            conv = await self.agents[name].open_conversation(CHAT_ID, title="Bench chat")
            self.chats[name] = conv
        return conv

    async def stream_loop(self, command: Json) -> Json:
        """Each named agent streams replies at ``rate`` deltas/s for ``seconds`` (in the
        background); each delta's text is ``t<time.time()> `` (scale_bench's delay)."""
        rate = float(command["rate"])
        seconds = float(command["seconds"])
        per_item = int(command.get("per_item", 100))

        async def one(name: str) -> None:
            conv = await self._chat(name)
            loop = asyncio.get_running_loop()
            end = loop.time() + seconds
            tick = loop.time()
            while loop.time() < end:
                item = await conv.append(kind="reply", final=False)
                for _ in range(per_item):
                    await item.delta(f"t{time.time():.6f} ")
                    tick += 1.0 / rate
                    await asyncio.sleep(max(0.0, tick - loop.time()))
                    if loop.time() >= end:
                        break
                await item.finish()

        for name in command["agents"]:
            self.agents[name].spawn(one(name))
        return {"streaming": len(command["agents"])}

    async def ask_once(self, command: Json) -> Json:
        """Raise a choice ask on the agent's chat; the agent decides it ``after`` s later."""
        name = command["agent"]
        conv = await self._chat(name)
        handle = await conv.ask(
            kind="choice",
            title="Which branch should I merge?",
            options=[Option(id="main", label="main"), Option(id="next", label="next")],
        )

        async def decide() -> None:
            await asyncio.sleep(float(command.get("after", 0.5)))
            await handle.decide()

        self.agents[name].spawn(decide())
        return {"ask": handle.id}

    async def pause(self, command: Json) -> Json:
        runner = self.runners[command["agent"]][0]
        await runner.close()
        return {"paused": True}

    async def resume(self, command: Json) -> Json:
        name = command["agent"]
        s = self.spec[name]
        self.runners[name][0] = await self.agents[name].serve_unix(Path(s["socket"]))
        return {"resumed": True}

    async def last_event(self, command: Json) -> Json:
        return {"last": self.agents[command["agent"]]._store.last_event_id}

    async def close(self) -> None:
        await asyncio.gather(*(a.close() for a in self.agents.values()), return_exceptions=True)


async def _nothing(tx: object) -> None:
    return None


async def main(spec: Any) -> None:
    host = Host(spec["agents"])
    started = time.perf_counter()
    try:
        await asyncio.to_thread(host.seed)
        where = await host.start()
        say({"ready": where, "seconds": time.perf_counter() - started})
        await serve_commands(
            {
                "ask": host.ask,
                "permission": host.permission,
                "stream": host.stream,
                "pause": host.pause,
                "resume": host.resume,
                "last_event": host.last_event,
                "stream_loop": host.stream_loop,
                "ask_once": host.ask_once,
            },
            float(spec.get("max_seconds", HELPER_MAX_SECONDS)),
        )
    except Exception as exc:
        say({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        await host.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main(json.loads(Path(sys.argv[1]).read_text())))
