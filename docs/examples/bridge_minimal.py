"""The smallest bridge on the kit (bridges/kit): a durable agent that asks one permission and
logs the answer, once, even across restarts.

    python docs/examples/bridge_minimal.py --socket /tmp/minimal.sock --state /tmp/minimal.db -v
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from bridges import kit
from wire.agent import Agent, Resolution

log = logging.getLogger("bridge_minimal")


class Minimal(kit.AgentBridge):
    """A peer with one question: may the job run?"""

    protocol = "minimal"

    def __init__(self, state: Path) -> None:
        super().__init__(Agent(state_path=state, runtime="minimal"))

    async def serve(self, socket: Path) -> None:
        await super().serve(socket)  # serving first: an answer can arrive
        conv = await self.agent.open_conversation("job", title="The nightly job")
        ask = await kit.asks.permission("Run the nightly job?").raise_in(conv, id="run-job")
        self.agent.spawn(ask.once(self.answered))  # once: a restart does not log it again

    async def answered(self, resolution: Resolution) -> None:
        option = resolution.answer.option if resolution.answer is not None else None
        log.info("run-job: %s %s", resolution.how, option)


if __name__ == "__main__":
    sys.exit(kit.main(lambda args: Minimal(args.state), description=__doc__))
