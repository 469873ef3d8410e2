"""The command line as a new user meets it: ``pair`` and ``phones`` find the store ``serve``
was given (or refuse in one line, as ``serve`` does), the demo prints a pair command that
works as printed on every run, Ctrl-C is one line, ``--version``, distinct default ports,
one-line TLS refusals, and every time the CLI prints ends in ``Z``."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from collie_gateway.__main__ import _parser
from collie_gateway.core.phones import PairingLink
from fixtures.agents.harness import REPO
from tests.collie_gateway.processes import free_port
from tests.collie_gateway.test_cli_errors import _one_line_refusal, _run

ZULU = r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d)?Z"


def _cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``collie-gateway ARGS`` to its end in ``cwd``, with ``cwd`` as its home."""
    return _run(*args, cwd=cwd, env={"HOME": str(cwd), "COLLIE_DATABASE_URL": "", **(env or {})})


def test_version_prints_the_packages_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    done = _cli("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"collie-gateway {version('collie-gateway')}\n")


def test_relay_and_the_mcp_bridge_default_to_different_ports() -> None:
    relay = _parser().parse_args(["relay", "--public-url", "https://relay.example.org"])
    mcp = _parser().parse_args(["bridge", "mcp", "--stdio"])
    assert mcp.port == 8790
    assert relay.port == 8792
    assert relay.db == Path("relay.db")


def test_relay_help_shows_its_defaults(tmp_path: Path) -> None:
    text = " ".join(_cli("relay", "--help", cwd=tmp_path).stdout.split())
    assert "--db DB SQLite file (relay.db)" in text
    assert "--port PORT port to listen on (8792)" in text


@pytest.mark.parametrize("command", [["pair"], ["phones", "list"], ["phones", "revoke", "p-1"]])
def test_db_help_says_file_or_postgresql_url(tmp_path: Path, command: list[str]) -> None:
    text = " ".join(_cli(*command, "--help", cwd=tmp_path).stdout.split())
    assert "its SQLite file or a postgresql:// URL" in text
    assert "(default: COLLIE_DATABASE_URL, else collie.db in the current folder" in text


@pytest.mark.parametrize("command", [["pair"], ["phones", "list"], ["phones", "revoke", "p-1"]])
def test_a_db_in_a_missing_folder_is_refused_in_serves_words(
    tmp_path: Path, command: list[str]
) -> None:
    db = tmp_path / "nope" / "dir" / "x.db"
    done = _cli(*command, "--db", str(db), cwd=tmp_path)
    assert _one_line_refusal(done) == (
        f"collie-gateway: --db {db}: the folder {tmp_path / 'nope' / 'dir'} does not exist"
    )
    assert not (tmp_path / "nope").exists()
    folder = tmp_path / "data"
    folder.mkdir()
    done = _cli(*command, "--db", str(folder), cwd=tmp_path)
    assert _one_line_refusal(done) == (
        f"collie-gateway: --db {folder} is a folder: name the SQLite file, "
        f"e.g. --db {folder / 'collie.db'}"
    )


@pytest.mark.parametrize("command", [["pair"], ["phones", "list"]])
def test_no_store_where_pair_looks_is_one_line_not_a_new_file(
    tmp_path: Path, command: list[str]
) -> None:
    done = _cli(*command, cwd=tmp_path)
    assert _one_line_refusal(done) == (
        "collie-gateway: --db collie.db: no gateway store there; name the running gateway's "
        "(--db as serve was given it; the demo prints its own)"
    )
    assert list(tmp_path.iterdir()) == []
    demo = tmp_path / ".collie" / "demo" / "collie.db"  # HOME is tmp_path
    demo.parent.mkdir(parents=True)
    demo.write_bytes(b"")
    done = _cli(*command, cwd=tmp_path)
    assert _one_line_refusal(done) == (
        "collie-gateway: --db collie.db: no gateway store there; name the running gateway's "
        f"(--db as serve was given it; the demo's: --db {demo})"
    )
    assert not (tmp_path / "collie.db").exists()


def test_pair_takes_a_postgresql_url_as_serve_does(pg_url: str, tmp_path: Path) -> None:
    done = _cli("pair", "--db", pg_url, "--no-wait", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(rf"valid until {ZULU}, one phone", done.stdout)
    done = _cli("phones", "list", cwd=tmp_path, env={"COLLIE_DATABASE_URL": pg_url})
    assert (done.returncode, done.stdout) == (0, "no phones paired\n")
    assert list(tmp_path.iterdir()) == [], "a folder or file was made for the URL"


def _as_in_a_terminal() -> None:
    """Ctrl-C as a terminal's foreground command gets it: the tests may run as a background
    job, whose children start with SIGINT ignored (and Python then leaves it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signals_of(pid: int) -> str:
    """A process's state and signal masks, and its environment's COLLIE_ names (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    named = [e.decode().split("=", 1)[0] for e in env if e.startswith(b"COLLIE_")]
    return "; ".join(
        [*(line for line in status if line.startswith(("State", "Sig", "Threads"))), f"env {named}"]
    )


async def test_ctrl_c_while_pair_waits_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "collie.db"
    made = _cli("pair", "--db", str(db), "--no-wait", cwd=tmp_path)  # refused: no store yet
    assert made.returncode == 2
    db.write_bytes(b"")  # an empty file: a new store, as serve makes it
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "collie_gateway", "pair", "--db", str(db),
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_as_in_a_terminal,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stderr is not None
    shown = b""
    async with asyncio.timeout(60):
        while b"Waiting for the phone" not in shown:
            line = await proc.stdout.readline()
            assert line, "pair ended before it waited"
            shown += line
    assert re.search(rf"valid until {ZULU}, one phone", shown.decode())
    proc.send_signal(signal.SIGINT)
    try:
        async with asyncio.timeout(60):
            err = (await proc.stderr.read()).decode()
            await proc.wait()
    except TimeoutError:
        raise AssertionError(f"pair still runs after Ctrl-C: {_signals_of(proc.pid)}") from None
    assert proc.returncode == 1
    assert err.splitlines() == [
        "collie-gateway: stopped waiting (Ctrl-C); a phone may still use the code until it expires"
    ]


def test_a_missing_tls_certificate_is_one_line(tmp_path: Path) -> None:
    sources = tmp_path / "sources.json"
    sources.write_text('{"durable_agents": []}', encoding="utf-8")
    missing, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    key.write_text("a key")
    done = _cli(
        "serve", "--sources", str(sources), "--port", "0", "--tls-cert", str(missing),
        "--tls-key", str(key), cwd=tmp_path,
    )  # fmt: skip
    assert _one_line_refusal(done) == f"collie-gateway: --tls-cert {missing}: no such file"
    db = tmp_path / "collie.db"
    db.write_bytes(b"")
    done = _cli("pair", "--db", str(db), "--tls-cert", str(missing), "--no-wait", cwd=tmp_path)
    assert _one_line_refusal(done) == f"collie-gateway: --tls-cert {missing}: no such file"


class Demo:
    """``collie-gateway demo`` as a process with a home of the test's own."""

    def __init__(self, home: Path, env: dict[str, str] | None = None) -> None:
        self.home, self.port = home, free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home)}
        self.env.pop("COLLIE_TOKEN", None)
        self.env.pop("COLLIE_DATABASE_URL", None)
        self.env.update(env or {})
        self.lines: list[str] = []
        self.err = home / "demo.err"

    async def __aenter__(self) -> Demo:
        with self.err.open("wb") as err:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "collie_gateway", "demo", "--port", str(self.port),
                cwd=self.home, env=self.env, stdout=subprocess.PIPE, stderr=err,
            )  # fmt: skip
        assert self.proc.stdout is not None
        async with asyncio.timeout(60):
            while not any(line.startswith("collie-gateway: phone API") for line in self.lines):
                line = await self.proc.stdout.readline()
                assert line, self.err.read_text()
                self.lines.append(line.decode().rstrip("\n"))
            await self.ready()
        return self

    async def ready(self) -> None:
        async with aiohttp.ClientSession() as http:
            while True:
                try:
                    async with http.get(self.base + "/healthz") as resp:
                        if resp.status == 200 and (await resp.json())["ready"] >= 3:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)

    async def __aexit__(self, *_: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(self.proc.wait(), 20)

    def said(self, label: str) -> str:
        """What the demo printed after ``label``."""
        found = [line for line in self.lines if line.lstrip().startswith(label)]
        assert found, self.lines
        return found[0].split(label, 1)[1].strip()


async def _pair_as_printed(demo: Demo, name: str) -> None:
    """Run the demo's pair line as printed (with --no-wait), then pair a phone with the code."""
    command = demo.said("pair:").split("  (")[0].split()
    assert command[:2] == ["collie-gateway", "pair"]
    done = await asyncio.to_thread(_cli, *command[1:], "--no-wait", cwd=demo.home)
    assert done.returncode == 0, done.stderr
    link = re.search(r"link:\s+(\S+)", done.stdout)
    assert link is not None
    body = {"code": PairingLink.parse(link.group(1)).code, "name": name, "public_key": "pk"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(demo.base + "/api/v1/pair", json=body) as resp,
    ):
        assert resp.status == 200, await resp.text()


async def test_the_demos_pair_line_works_as_printed_on_every_run(tmp_path: Path) -> None:
    state = tmp_path / ".collie" / "demo"
    async with Demo(tmp_path) as first:
        assert first.said("store:") == str(state / "collie.db")
        assert first.said("pair:") == (
            f"collie-gateway pair --db {state / 'collie.db'}  (a phone, or the page)"
        )
        await _pair_as_printed(first, "Pixel")
    async with Demo(tmp_path) as second:  # a phone is paired now: loopback is no longer open
        await _pair_as_printed(second, "Tablet")
        assert any("curl needs a credential too" in line for line in second.lines)
    listed = _cli("phones", "list", "--db", str(state / "collie.db"), cwd=tmp_path)
    assert [line.split()[1] for line in listed.stdout.splitlines()[1:]] == ["Pixel", "Tablet"]
    assert all(re.fullmatch(ZULU, line.split()[3]) for line in listed.stdout.splitlines()[1:])


async def test_the_demo_starts_its_agents_before_it_looks_and_says_what_wire2_is(
    tmp_path: Path,
) -> None:
    async with Demo(tmp_path) as demo:
        assert demo.said("wire2:").startswith("a sample speaking wire v2 on purpose")
    err = demo.err.read_text()
    assert "unreachable" not in err
    assert "refused" not in err.lower()


async def test_the_demo_with_a_token_prints_curl_lines_that_work_once_a_phone_paired(
    tmp_path: Path,
) -> None:
    async with Demo(tmp_path, {"COLLIE_TOKEN": "a-secret-of-the-test"}) as demo:
        await _pair_as_printed(demo, "Pixel")
        curl = demo.said("dashboard:")
        assert curl == f'curl -H "Authorization: Bearer $COLLIE_TOKEN" {demo.base}/api/v1/dashboard'
        assert not any("curl needs a credential too" in line for line in demo.lines)
        async with aiohttp.ClientSession() as http:
            async with http.get(demo.base + "/api/v1/dashboard") as resp:
                assert resp.status == 401  # a phone is paired: loopback is no longer open
            headers = {"Authorization": "Bearer a-secret-of-the-test"}
            async with http.get(demo.base + "/api/v1/dashboard", headers=headers) as resp:
                assert resp.status == 200


def test_the_demo_refuses_a_database_url_of_another_kind_in_one_line(tmp_path: Path) -> None:
    done = _cli("demo", "--port", "0", cwd=tmp_path, env={"COLLIE_DATABASE_URL": "mysql://x/y"})
    assert _one_line_refusal(done) == (
        "collie-gateway: COLLIE_DATABASE_URL is a postgresql:// URL (a SQLite file: --db)"
    )
    assert not (tmp_path / ".collie").exists(), "the demo started before refusing"


async def test_the_demo_uses_collie_database_url_and_says_so(pg_url: str, tmp_path: Path) -> None:
    async with Demo(tmp_path, {"COLLIE_DATABASE_URL": pg_url}) as demo:
        assert demo.said("store:").endswith("(COLLIE_DATABASE_URL)")
        assert demo.said("pair:").startswith("collie-gateway pair  (with the same")
    assert not (tmp_path / ".collie" / "demo" / "collie.db").exists()
