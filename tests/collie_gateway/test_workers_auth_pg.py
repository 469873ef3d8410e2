"""One gateway's rules on every worker at once (two workers on one PostgreSQL, ``--auth
auto``): a pairing, a revocation and a phone's scope hold on the other worker before the
request that made them returns — the next request there, sent at once, is already judged by
them (the store is read while a worker knows of no phone paired; a token's phone row, with
its scope and revocation, on every request)."""

from __future__ import annotations

import pytest

from fixtures.agents.harness import short_dir
from tests.collie_gateway.test_workers_pg import call, workers, write_sources

pytestmark = pytest.mark.xdist_group("pg_workers")

ACT = "/api/v1/agents/nobody/asks/a1/answer"


async def test_a_pairing_a_scope_and_a_revocation_hold_on_the_other_worker_at_once(
    pg_url: str,
) -> None:
    with short_dir() as tmp:
        write_sources(tmp, "nobody", tmp / "nobody.sock")
        one, two = workers(tmp, pg_url)[:2]
        try:
            for gateway in (one, two):
                await gateway.start(ready=0)
            # Open (loopback, no phone yet): codes are made without a credential.
            status, code = await call(one, "POST", "/api/v1/pairings", None, {})
            assert status == 200
            status, read_code = await call(one, "POST", "/api/v1/pairings", None, {"scope": "read"})
            assert status == 200
            assert (await call(two, "GET", "/api/v1/dashboard", None))[0] == 200

            pair = {"code": code["code"], "name": "Pixel 9"}
            status, paired = await call(one, "POST", "/api/v1/pair", None, pair)
            assert status == 200
            assert (await call(two, "GET", "/api/v1/dashboard", None))[0] == 401

            pair = {"code": read_code["code"], "name": "Tablet"}
            status, reader = await call(two, "POST", "/api/v1/pair", None, pair)
            assert (status, reader["scope"]) == (200, "read")
            body = {"request_id": "r1", "version": 1, "answer": {"option": "allow"}}
            refused = await call(one, "POST", ACT, reader["token"], body)
            assert refused[0] == 403
            assert refused[1]["error"] == "read_only"
            assert (await call(one, "GET", "/api/v1/dashboard", reader["token"]))[0] == 200

            token, phone_id = paired["token"], paired["phone_id"]
            gone = await call(two, "DELETE", f"/api/v1/phones/{phone_id}", token)
            assert gone == (200, {"revoked": phone_id})
            assert (await call(one, "GET", "/api/v1/dashboard", token))[0] == 401
            assert (await call(one, "GET", "/api/v1/dashboard", None))[0] == 401  # one left
        finally:
            for gateway in (one, two):
                await gateway.stop()
