"""Which worker follows what (``GET /api/v1/workers``): every live worker, its agents, its
bridges and its duties, with their lease epochs, read from the leases table in one survey
(PostgreSQL); a gateway alone (SQLite) is the one worker, following every agent and running
every bridge, with no lease."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from collie_gateway.services.following import BRIDGE
from collie_gateway.store.values import WORKER_ROW, Holding


@dataclass(frozen=True, slots=True)
class Held:
    """An agent, a bridge or a duty a worker holds, and its lease's epoch (None: no lease,
    a gateway alone)."""

    name: str
    epoch: int | None = None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One worker: ``host:pid``, when it last said it was live (seconds since the epoch, the
    database's clock), what it holds."""

    worker: str
    last_heartbeat: float
    agents: list[Held] = field(default_factory=list)
    bridges: list[Held] = field(default_factory=list)
    duties: list[Held] = field(default_factory=list)

    @property
    def host(self) -> str:
        return self.worker.rpartition(":")[0]

    @property
    def pid(self) -> int:
        return int(self.worker.rpartition(":")[2])


def roster_of(holdings: Sequence[Holding], seconds: float) -> list[WorkerInfo]:
    """The live workers of a survey (a heartbeat lasts ``seconds``), each with what it holds,
    ordered by name; a lease held by a worker whose heartbeat ran out is not listed."""
    workers = {
        h.holder: WorkerInfo(h.holder, h.expires_at - seconds)
        for h in holdings
        if h.name.startswith(WORKER_ROW)
    }
    for h in sorted(holdings, key=lambda h: h.name):
        info = workers.get(h.holder)
        if info is None or h.name.startswith(WORKER_ROW):
            continue
        if h.name.startswith(BRIDGE):
            info.bridges.append(Held(h.name.removeprefix(BRIDGE), h.epoch))
        elif h.name.startswith("~"):
            info.duties.append(Held(h.name, h.epoch))
        else:
            info.agents.append(Held(h.name, h.epoch))
    return [workers[name] for name in sorted(workers)]


class Roster:
    """The workers of this gateway, as ``GET /api/v1/workers`` lists them."""

    def __init__(
        self,
        me: str,
        clock: Callable[[], float],
        alone: Callable[[], tuple[list[str], list[str]]] = lambda: ([], []),
        *,
        survey: Callable[[], Awaitable[list[Holding]]] | None = None,
        seconds: float = 0.0,
    ) -> None:
        self.me = me
        self.clock = clock
        self.alone = alone  # a gateway alone: (its agents, the bridges it runs)
        self.survey = survey  # several workers: the leases table, read now
        self.seconds = seconds

    async def workers(self) -> list[WorkerInfo]:
        """Every live worker, ordered by name."""
        if self.survey is not None:
            return roster_of(await self.survey(), self.seconds)
        agents, bridges = self.alone()
        return [
            WorkerInfo(self.me, self.clock(), [Held(a) for a in agents], [Held(b) for b in bridges])
        ]
