"""``GET /api/v1/workers`` on a gateway alone (SQLite): the one worker, following every
agent and running every bridge it started, with no lease; the admin token's alone."""

from __future__ import annotations

import os
import socket

from collie_gateway.services.phones import Paired
from collie_gateway.sources import BridgeCommand, Source
from tests.collie_gateway.conftest import Rig, get_json


async def test_a_gateway_alone_lists_itself_as_the_one_worker(rig: Rig) -> None:
    desk = await rig.serve("desk", rig.agent("desk", runtime="desk"))
    idle = BridgeCommand("idle", ("sleep", "30"), rig.tmp / "idle.sock")
    sources = [Source("desk", socket=desk), Source("idle", socket=idle.socket, bridge=idle)]
    client, _ = await rig.gateway(sources)
    listed = await get_json(client, "/api/v1/workers")
    host = socket.gethostname()
    [worker] = listed["workers"]
    assert worker["worker"] == f"{host}:{os.getpid()}"
    assert (worker["host"], worker["pid"]) == (host, os.getpid())
    assert worker["agents"] == [{"name": "desk", "epoch": None}, {"name": "idle", "epoch": None}]
    assert worker["bridges"] == [{"name": "idle", "epoch": None}]
    assert worker["duties"] == []
    assert worker["last_heartbeat"].startswith(rig.clock().strftime("%Y-%m-%d"))


async def test_the_workers_list_is_the_admin_tokens(rig: Rig) -> None:
    client, gw = await rig.gateway([], token="admin-token")
    await get_json(client, "/api/v1/workers", status=401)
    ok = await client.get("/api/v1/workers", headers={"Authorization": "Bearer admin-token"})
    assert ok.status == 200
    made = await gw.phones.new_code()
    paired = await gw.phones.pair(made.code, "Pixel", None, None, "127.0.0.1")
    assert isinstance(paired, Paired)
    refused = await client.get(
        "/api/v1/workers", headers={"Authorization": f"Bearer {paired.token}"}
    )
    assert refused.status == 403
    assert (await refused.json())["error"] == "admin_only"
