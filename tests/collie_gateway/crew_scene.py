"""Crews as real processes for tests: member gateways with SDK sample agents behind them, a
lead gateway reading them, all on loopback with ephemeral ports; and a proxy in the test
process that stands in front of a member, records the ``Authorization`` header of every
request it sees, and can play an older Collie (no crew route, or an older crew version)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.collie_gateway.conftest import eventually
from tests.collie_gateway.processes import GatewayProcess


class MemberProxy:
    """A member's phone API through a proxy: ``crew_route`` is ``pass`` (the member's own),
    ``missing`` (404, as a Collie from before crews, whose cards also carry no
    ``answer_url``) or ``old`` (crew version 0).
    ``upstream_token``: sent to the member instead of what the lead sent."""

    def __init__(self, target: str, *, crew_route: str = "pass", upstream_token: str = "") -> None:
        self.target = target
        self.crew_route = crew_route
        self.upstream_token = upstream_token
        self.auth_seen: list[str | None] = []
        self.runner: web.AppRunner | None = None
        self.url = ""
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = site.name
        self._http = aiohttp.ClientSession()
        return self.url

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()  # ends the streams it is passing on
        if self.runner is not None:
            await self.runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        given = request.headers.get("Authorization")
        self.auth_seen.append(given)
        if request.path == "/api/v1/crew" and self.crew_route == "missing":
            return web.json_response({"error": "not_found", "message": "Not Found"}, status=404)
        if request.path == "/api/v1/crew" and self.crew_route == "old":
            return web.json_response({"crew": 0, "machine": "old", "answers": True})
        headers = {
            k: v
            for k, v in request.headers.items()
            if k in ("Content-Type", "Last-Event-ID", "Accept", "Authorization")
        }
        if self.upstream_token:
            headers["Authorization"] = f"Bearer {self.upstream_token}"
        assert self._http is not None
        body = await request.read()
        async with self._http.request(
            request.method,
            self.target + request.rel_url.raw_path_qs,
            data=body or None,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None),
        ) as upstream:
            if upstream.content_type == "text/event-stream":
                resp = web.StreamResponse(status=upstream.status)
                resp.content_type = "text/event-stream"
                await resp.prepare(request)
                with contextlib.suppress(aiohttp.ClientError, ConnectionError):
                    async for chunk in upstream.content.iter_any():
                        await resp.write(chunk)
                return resp
            data = await upstream.read()
            if self.crew_route == "missing" and upstream.content_type == "application/json":
                data = json.dumps(_without(json.loads(data), "answer_url")).encode()
            return web.Response(
                body=data,
                status=upstream.status,
                content_type="application/json"
                if upstream.content_type == "application/json"
                else upstream.content_type,
            )


def _without(value: Any, key: str) -> Any:
    """``value`` with ``key`` dropped from every object in it."""
    if isinstance(value, dict):
        return {k: _without(v, key) for k, v in value.items() if k != key}
    if isinstance(value, list):
        return [_without(v, key) for v in value]
    return value


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def ledger(db: Path, request_id: str) -> tuple[int, str | None] | None:
    """A gateway's ledger record of ``request_id``: (settled, outcome), or None."""
    with (
        contextlib.suppress(sqlite3.Error),
        contextlib.closing(sqlite3.connect(db)) as conn,
    ):
        row = conn.execute(
            "SELECT settled, outcome FROM answers WHERE request_id = ?", (request_id,)
        ).fetchone()
        return None if row is None else (int(row[0]), row[1])
    return None


def acts(path: Path) -> list[dict[str, Any]]:
    """Every answer an agent acted on, from its own log."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


async def call(
    base: str,
    method: str,
    path: str,
    body: object = None,
    *,
    token: str | None = None,
    status: int | None = 200,
) -> Any:
    """One request to a gateway's phone API; its JSON (the status checked unless None)."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, base + path, json=body, headers=headers) as r,
    ):
        if status is not None:
            assert r.status == status, f"{r.status}: {await r.text()}"
        return await r.json()


def sections(dashboard: dict[str, Any]) -> list[tuple[str, str | None]]:
    """The dashboard's sections as (kind, machine)."""
    return [(s["kind"], s.get("machine")) for s in dashboard["sections"]]


def section(dashboard: dict[str, Any], machine: str | None) -> dict[str, Any]:
    """The Durable agents section of ``machine`` (None: the lead's own)."""
    for s in dashboard["sections"]:
        if s["kind"] == "durable_agents" and s.get("machine") == machine:
            return dict(s)
    raise AssertionError(f"no section for {machine!r} in {sections(dashboard)}")


async def section_state(lead: GatewayProcess, machine: str, state: str, within: float = 15) -> None:
    """Wait until ``machine``'s section on the lead is in ``state``."""

    async def check() -> bool:
        board = await call(lead.base, "GET", "/api/v1/dashboard")
        return bool(section(board, machine).get("state") == state)

    await eventually(check, within=within)
