"""``--db`` and ``COLLIE_DATABASE_URL`` choose the store (issue 23): a SQLite file by default,
PostgreSQL given a ``postgresql://`` URL; what cannot work is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from collie_gateway.__main__ import push_options_from_env
from collie_gateway.errors import ConfigError
from collie_gateway.phones_cli import store_from
from collie_gateway.store.schema import DELTAS as MIGRATIONS
from collie_gateway.store.stores import open_stores
from tests.collie_gateway.test_cli_errors import _one_line_refusal, _run, _sources

URL = "postgresql://collie@/gw?host=/run/db"


def test_the_store_is_the_file_unless_a_url_names_a_database() -> None:
    assert store_from(Path("g.db"), {"COLLIE_DATABASE_URL": URL}) == (Path("g.db"), None)
    assert store_from(None, {}) == (Path("collie.db"), None)
    assert store_from(None, {"COLLIE_DATABASE_URL": URL}) == (Path("collie.db"), URL)
    other = "postgres://other/db"
    assert store_from(other, {"COLLIE_DATABASE_URL": URL}) == (Path("collie.db"), other)


def test_a_database_url_of_another_kind_is_refused() -> None:
    with pytest.raises(ConfigError, match="COLLIE_DATABASE_URL is a postgresql:// URL"):
        store_from(None, {"COLLIE_DATABASE_URL": "mysql://db/x"})


def test_a_server_not_there_is_one_line_exit_2_without_its_password(tmp_path: Path) -> None:
    url = f"postgresql://collie:s3cret@/gw?host={tmp_path}"
    done = _run("serve", "--sources", str(_sources(tmp_path)), "--db", url, "--port", "0")
    line = _one_line_refusal(done)
    assert line.startswith(f"collie-gateway: postgresql://collie:***@/gw?host={tmp_path}: ")
    assert "cannot reach the database" in line
    assert "s3cret" not in done.stderr + done.stdout


async def test_a_database_from_a_newer_gateway_is_one_line_exit_2(
    pg_url: str, tmp_path: Path
) -> None:
    await (await open_stores(tmp_path / "unused.db", pg_url)).close()
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("UPDATE collie_schema SET version = 99")
    env = {"COLLIE_DATABASE_URL": pg_url}
    done = _run("serve", "--sources", str(_sources(tmp_path)), "--port", "0", env=env)
    assert _one_line_refusal(done).endswith(
        f"schema version 99 is newer than this gateway knows ({len(MIGRATIONS)}); "
        "update the gateway (the database was not changed)"
    )
    assert not (tmp_path / "collie.db").exists()


def test_the_resend_round_is_seconds_in_range() -> None:
    assert push_options_from_env({"COLLIE_RESEND_INTERVAL": "0.5"}) == {"resend_interval": 0.5}
    assert push_options_from_env({}) == {}
    for bad in ("0", "soon", "7200"):
        with pytest.raises(ConfigError) as caught:
            push_options_from_env({"COLLIE_RESEND_INTERVAL": bad})
        assert str(caught.value) == f"COLLIE_RESEND_INTERVAL is seconds, 0.1 to 3600: {bad!r}"


def test_the_lease_is_seconds_in_range() -> None:
    assert push_options_from_env({"COLLIE_LEASE_SECONDS": "1.5"}) == {"lease_seconds": 1.5}
    for bad in ("0.1", "601", "soon"):
        with pytest.raises(ConfigError) as caught:
            push_options_from_env({"COLLIE_LEASE_SECONDS": bad})
        assert str(caught.value) == f"COLLIE_LEASE_SECONDS is seconds, 0.5 to 600: {bad!r}"
