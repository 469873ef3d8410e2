"""A worker's part in a gateway of several on one PostgreSQL (docs/postgresql.md).

Built by ``gateway.py`` when the store is PostgreSQL: the shared log and its phone bus
(``services/worklog.py``), the leases and what links read shared (``services/following.py``),
and the hand-over of taps to the worker that follows the agent (``services/answering.py``).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from collie_gateway.services.agents import Agents
from collie_gateway.services.answering import Answering, Handover
from collie_gateway.services.answers import Answers
from collie_gateway.services.following import BRIDGE, Following
from collie_gateway.services.pushing import Pushing
from collie_gateway.services.roster import Roster
from collie_gateway.services.router import Router
from collie_gateway.services.supervisor import Supervisor
from collie_gateway.services.tasks import Spawn
from collie_gateway.services.worklog import SharedBus, SharedLog
from collie_gateway.settings import Settings
from collie_gateway.store.protocols import LeasesStore, MirrorsStore, SharedStore
from collie_gateway.store.values import StoredEvent

log = logging.getLogger(__name__)

#: The lease of publishing the crew's events and pushing its members' asks (W1, W4): every
#: worker follows the members for its screens; one tells the phones.
CREW_DUTY: Final = "~crew"
HANDOVER_WAIT: Final = 5.0  # ours: seconds a phone's tap waits on a worker that hands it over
#: ours: seconds a worker handing a lease over (or stopping) waits for the work it started as
#: the agent's holder (push decisions in flight); past it the new holder decides what is left.
WORK_WAIT: Final = 10.0


def worker_name() -> str:
    """This worker's name in the leases table: host and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def roster(
    workers: Workers | None, agents: Agents, supervisor: Supervisor, clock: Callable[[], datetime]
) -> Roster:
    """Which worker follows what: from the leases table, read when asked; a gateway alone
    follows every agent and runs the bridges it started."""

    def now() -> float:
        return clock().timestamp()

    if workers is not None:
        leases = workers.leases
        return Roster(leases.holder, now, survey=leases.survey, seconds=leases.seconds)

    def alone() -> tuple[list[str], list[str]]:
        return list(agents.mirrors), sorted(supervisor.running)

    return Roster(worker_name(), now, alone)


@dataclass(frozen=True, slots=True)
class Work:
    """The holder's work: ``settled`` waits for what was spawned for agents (None: any) up to
    a bound, whether it all ended (``Tasks.settled``); ``pushing`` decides the asks an old
    holder left undecided; ``retell`` tells the phones an agent's row and some of its
    conversations' rows again (an old holder that died may not have)."""

    settled: Callable[[Collection[str] | None, float], Awaitable[bool]]
    pushing: Pushing
    retell: Callable[[str, Sequence[str]], None] = lambda agent, conversations: None

    async def finish(self, agents: Collection[str] | None) -> None:
        """The work spawned for ``agents`` (None: any) ended, or :data:`WORK_WAIT` passed."""
        if not await self.settled(agents, WORK_WAIT):
            log.warning(
                "work of %s still running after %.0f s: the next holder decides what is left",
                "every agent" if agents is None else ", ".join(sorted(agents)), WORK_WAIT,
            )  # fmt: skip


def _taken_over(agents: Agents, work: Work, spawn: Spawn, name: str) -> None:
    """A lease resumed without a snapshot: the asks open as its old holder left them (the
    log read to its end), and the notices with a push it applied, that it did not decide
    are decided by this worker."""
    convs = list(agents.mirrors[name].conversations.values())
    asks = [(ask, conv.title) for conv in convs for ask in conv.asks]
    if asks or work.pushing.left_by_holder(name):
        spawn(work.pushing.taken_over(name, asks), f"taken-over-{name}")


class Workers:
    """The shared log, the bus on it and the leases of one worker."""

    def __init__(self, log: SharedLog, bus: SharedBus, leases: LeasesStore) -> None:
        self.log = log
        self.bus = bus
        self.leases = leases
        self.following: Following | None = None
        self._mirrors: MirrorsStore | None = None

    @classmethod
    async def open(cls, shared: SharedStore, settings: Settings) -> Workers:
        """The log read up to now, its bus; nothing runs until :meth:`start`."""
        workers: Workers | None = None

        def on_record(entry: StoredEvent) -> None:
            if workers is not None and workers.following is not None:
                workers.following.apply(entry)

        def on_lost(lost: set[tuple[str, int]]) -> None:
            if workers is not None and workers.following is not None:
                workers.following.lost(lost)

        def on_gap() -> None:
            if workers is not None and workers.following is not None:
                workers.following.fell_behind()

        log = SharedLog(shared.event_log(), settings.phone_ring, on_record, on_lost, on_gap)
        languages = settings.languages.languages[1:]
        bus = await log.open_bus(settings.stream_frame, languages)
        workers = cls(log, bus, shared.leases(worker_name(), settings.lease_seconds))
        return workers

    def start(
        self,
        settings: Settings,
        agents: Agents,
        answers: Answers,
        ledger: Answering,
        routers: tuple[Router, Router],
        spawn: Spawn,
        duties: Sequence[str] = (),
        mirrors: MirrorsStore | None = None,
        supervisor: Supervisor | None = None,
        work: Work | None = None,
    ) -> None:
        """Follow what this worker can take: ``routers`` are the holder's and the others';
        ``mirrors`` the stored mirror (its flush fenced by the leases); the bridges of
        ``supervisor`` run where their lease is held; ``work`` what the holder's work is
        waited for with, and the decisions left by an old holder made with."""
        bridges = [BRIDGE + s.name for s in settings.sources if s.bridge is not None]
        following = Following(
            self.leases,
            settings.sources,
            agents.mirrors,
            agents.links,
            settings.timing,
            self.log.write,
            spawn,
            (*duties, *(bridges if supervisor is not None else ())),
        )
        following.full, following.quiet = routers
        if mirrors is not None:  # the holder's flush is fenced by its epoch

            def epoch(agent: str) -> int | None:
                lease = following.held.get(agent)
                return None if lease is None else lease.epoch

            mirrors.fence = epoch
            self._mirrors = mirrors

        def want(agent: str, ask_id: str) -> None:
            spawn(answers.resend_pending(agent, ask_id), "handed-over")

        following.on_want = want
        following.catch_up = self.log.catch_up
        following.tell = self.bus.publish
        self.log.on_applied = following.applied
        following.last_read = self.log.events.last_read
        following.settle = self._settle
        if work is not None:
            following.finish_work = work.finish
            following.on_taken_over = functools.partial(_taken_over, agents, work, spawn)
            following.retell = work.retell
        if supervisor is not None:

            def duty(name: str, held: bool) -> None:
                if not name.startswith(BRIDGE):
                    return
                bridge = name.removeprefix(BRIDGE)
                if held:
                    supervisor.run(bridge)
                else:
                    spawn(supervisor.stop(bridge), f"stop-{bridge}")

            following.on_duty = duty
        ledger.handover = Handover(following.holds, following.want, HANDOVER_WAIT)
        answers.sends_to = following.holds
        self.following = following
        self.log.start()
        following.start()

    async def _settle(self) -> None:
        """What this worker's links read is written and applied (as the holder's: the phone
        events it tells are written too, while its epoch holds), the mirror flushed."""
        await self.log.drain()
        await self.log.catch_up()
        await self.log.drain()
        if self._mirrors is not None:
            await self._mirrors.flush()

    def holds(self, name: str) -> bool:
        """Whether this worker holds the lease ``name`` now."""
        return self.following is not None and self.following.holds(name)

    async def close(self) -> None:
        """Give the leases back (what was read written first), then stop."""
        if self.following is not None:
            await self.following.close()
        self.bus.close()
        await self.log.drain()
        await self.log.close()
