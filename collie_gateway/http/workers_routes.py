"""``GET /api/v1/workers`` (admin token): which worker follows which agent and runs which
bridge, with the lease epochs. Registered from ``routes.WORKER_ROUTES``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

import msgspec
from aiohttp import web

from collie_gateway.http.keys import ROSTER
from collie_gateway.http.openapi import Route
from collie_gateway.http.responses import encoded
from collie_gateway.services.roster import Held, WorkerInfo
from wire.messages import Time


class HeldRow(msgspec.Struct, kw_only=True):
    """An agent, a bridge or a duty a worker holds.

    Attributes:
        name: The agent's or bridge's name (as in `sources.json`), or the duty's (`~crew`).
        epoch: Its lease's epoch, the fencing token (raised at each new holder); null on a
            gateway alone (SQLite), where nothing is leased.
    """

    name: str
    epoch: int | None


class WorkerRow(msgspec.Struct, kw_only=True):
    """One live worker of the gateway.

    Attributes:
        worker: Its id in the leases table, `host:pid`.
        host: The machine it runs on.
        pid: Its process id there.
        last_heartbeat: When it last said it was live (the database's clock); a worker whose
            heartbeat is older than a lease's time is not listed.
        agents: The agents it follows.
        bridges: The bridges of `sources.json` it runs.
        duties: Other leases it holds (`~crew`: it tells the phones of the crew).
    """

    worker: str
    host: str
    pid: int
    last_heartbeat: Time
    agents: list[HeldRow]
    bridges: list[HeldRow]
    duties: list[HeldRow]


class WorkerList(msgspec.Struct, kw_only=True):
    """The gateway's live workers, by id; one on SQLite.

    Attributes:
        workers: The workers.
    """

    workers: list[WorkerRow]


def _rows(held: list[Held]) -> list[HeldRow]:
    return [HeldRow(name=h.name, epoch=h.epoch) for h in held]


def _row(info: WorkerInfo) -> WorkerRow:
    return WorkerRow(
        worker=info.worker,
        host=info.host,
        pid=info.pid,
        last_heartbeat=datetime.fromtimestamp(info.last_heartbeat, UTC),
        agents=_rows(info.agents),
        bridges=_rows(info.bridges),
        duties=_rows(info.duties),
    )


async def list_workers(request: web.Request) -> web.Response:
    """The live workers (admin token): each with the agents it follows, the bridges it runs
    and their lease epochs."""
    workers = await request.app[ROSTER].workers()
    return encoded(WorkerList(workers=[_row(w) for w in workers]))


#: The routes of workers, for the route table (and so the OpenAPI document).
WORKER_ROUTES: Final[list[Route]] = [
    Route(
        "GET",
        "/api/v1/workers",
        list_workers,
        WorkerList,
        errors={403: "A phone's token: only the admin token may do this"},
    ),
]
