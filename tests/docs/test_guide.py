"""docs/agents.md cannot rot: every code block is a file of docs/examples/, and
the guide is followed step by step against a real gateway: its commands run as written (only
the addresses moved to a temporary folder and free ports), the agent is killed -9 and started
again, and what the guide says the person sees is what the gateway shows."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from fixtures.agents.harness import REPO, short_dir

GUIDE = REPO / "docs" / "agents.md"
EXAMPLES = REPO / "docs" / "examples"
INCLUDED = re.compile(r"<!-- include: (\S+) -->\n```\w+\n(.*?)^```$", re.S | re.M)
FENCE = re.compile(r"^```\w+$", re.M)


def test_every_code_block_is_an_example_file() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    included = INCLUDED.findall(text)
    assert len(included) == len(FENCE.findall(text)), "a code block that is no file"
    for path, body in included:
        assert (REPO / path).read_text(encoding="utf-8") == body, path
    assert {path for path, _ in included} == {
        f"docs/examples/{p.name}" for p in EXAMPLES.iterdir() if p.is_file()
    }, "an example the guide does not show"
    assert "(docs/agents.md)" in (REPO / "README.md").read_text(encoding="utf-8")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Moved:
    """The examples copied into a temporary folder, their addresses moved there and to free
    ports; and the commands of a script, ready to run."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.agent_port = _free_port()
        self.gateway_port = _free_port()
        (folder / "examples").mkdir()
        for example in (p for p in EXAMPLES.iterdir() if p.is_file()):  # a folder: a page's own
            (folder / "examples" / example.name).write_text(
                self.move(example.read_text(encoding="utf-8")), encoding="utf-8"
            )
        self.gateway = f"http://127.0.0.1:{self.gateway_port}"

    def move(self, text: str) -> str:
        return (
            text.replace("/tmp/", f"{self.folder}/")  # first: the folder is under /tmp too
            .replace("docs/examples/", f"{self.folder}/examples/")
            .replace("8711", str(self.agent_port))
            .replace("8765", str(self.gateway_port))
        )

    def commands(self, script: str) -> list[tuple[dict[str, str], list[str]]]:
        """Each line of a script as (environment, argv), `python` and `collie-gateway` being
        this interpreter's."""
        found = []
        for line in (self.folder / "examples" / script).read_text(encoding="utf-8").splitlines():
            words = shlex.split(line.rstrip("& "))
            env = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=.*", w))
            argv = words[len(env) :]
            if argv[0] == "python":
                argv[0] = sys.executable
            elif argv[0] == "collie-gateway":
                argv[:1] = [sys.executable, "-m", "collie_gateway"]
            found.append((env, argv))
        return found


async def _start(env: dict[str, str], argv: list[str], wait_for: str | None) -> Any:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=REPO,
        env={**os.environ, "COLLIE_TOKEN": "", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    if wait_for is not None:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        assert wait_for in line.decode(), line
    return proc


async def _end(proc: Any, signum: int = signal.SIGTERM) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signum)
    await asyncio.wait_for(proc.communicate(), 20)


@contextlib.asynccontextmanager
async def _session(base: str) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base) as http:
        yield http


async def _until(http: aiohttp.ClientSession, path: str, test: Any) -> Any:
    body = None
    for _ in range(300):
        with contextlib.suppress(aiohttp.ClientConnectionError):
            async with http.get(path) as resp:
                body = await resp.json()
                if resp.status == 200 and test(body):
                    return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path}: {body}")


def _texts(chat: dict[str, Any]) -> list[str]:
    return [line.get("text") or "" for line in chat["lines"]]


async def _script(moved: Moved, name: str) -> str:
    done = await asyncio.create_subprocess_exec(
        "sh", str(moved.folder / "examples" / name), stdout=subprocess.PIPE, cwd=REPO
    )
    out, _ = await asyncio.wait_for(done.communicate(), 30)
    assert done.returncode == 0, out
    return out.decode()


async def test_the_guide_step_by_step() -> None:
    with short_dir() as folder:
        moved = Moved(folder)
        procs: list[Any] = []
        try:
            agents = [
                await _start(env, argv, "hello listens on")
                for env, argv in moved.commands("run_agents.sh")
            ]
            procs += agents
            [(env, argv)] = moved.commands("run_gateway.sh")
            procs.append(await _start(env, argv, None))
            chat_path = "/api/v1/agents/hello/conversations/hello"
            async with _session(moved.gateway) as http:
                await _until(http, "/healthz", lambda b: b["ready"] == 2)  # socket and HTTP
                dash = await _until(http, "/api/v1/dashboard", lambda b: True)
                rows = [r for s in dash["sections"] for r in s.get("rows") or []]
                assert [r["agent"] for r in rows] == ["hello", "hello-http"]
                assert all(r["right"]["waiting"] == 1 for r in rows)
                chat = await _until(http, chat_path, lambda b: len(b["cards"]["cards"]) == 4)
                kinds = [c["kind"] for c in chat["cards"]["cards"]]
                assert kinds == ["permission", "choice", "text", "form"]
                # Collie's words on the buttons, the agent's label muted below (the guide).
                buttons = chat["cards"]["cards"][0]["body"]["buttons"]
                shown = [(b["label"], b["secondary"]) for b in buttons]
                assert shown == [("Allow", "Read them"), ("Deny", "Don't")]
                assert {r["badge"] for r in rows} == {chat["header"]["badge"]} == {"Experimental"}

                out = await _script(moved, "answer.sh")
                assert '"outcome":"accepted"' in out
                said = "What shall I call you? answered: Ada"
                await _until(http, chat_path, lambda b: said in _texts(b))
                fields = {"fields": {"what": "milk", "loud": True}}
                form = {"request_id": "tap-form", "version": 1, "answer": fields}
                async with http.post(
                    "/api/v1/agents/hello/asks/hello-form/answer", json=form
                ) as resp:
                    assert (await resp.json())["outcome"] == "accepted"
                printed = 'Remind you of what? answered: {"what": "milk", "loud": true}'
                await _until(http, chat_path, lambda b: printed in _texts(b))
                assert f'prints it as that JSON: "{printed}"' in GUIDE.read_text("utf-8")

                # A kill -9 and a start: the same asks, the answer acted on once.
                await _end(agents[0], signal.SIGKILL)
                await _until(http, "/healthz", lambda b: b["ready"] == 1)  # the link saw it
                env, argv = moved.commands("run_agents.sh")[0]
                agents[0] = await _start(env, argv, "hello listens on")
                procs.append(agents[0])
                await _until(http, "/healthz", lambda b: b["ready"] == 2)
                answer = {"request_id": "tap-2", "version": 1, "answer": {"option": "yes"}}
                async with http.post(
                    "/api/v1/agents/hello/asks/hello-permission/answer", json=answer
                ) as resp:
                    assert (await resp.json())["outcome"] == "accepted"
                allowed = "May I read your notes? answered: yes"
                chat = await _until(http, chat_path, lambda b: allowed in _texts(b))
                assert _texts(chat).count(said) == 1, "a follow-up added twice"
                ids = [c["ask_id"] for c in chat["cards"]["cards"] if c["outcome"] is None]
                assert ids == ["hello-choice"]

                # A message, its streamed reply, and Stop (which also ends the open asks).
                out = await _script(moved, "talk.sh")
                assert out.count('"outcome":"accepted"') == 2, out
                chat = await _until(
                    http, chat_path, lambda b: any(x["kind"] == "stopped" for x in b["lines"])
                )
                reply = [x for x in chat["lines"] if x["kind"] == "reply"][-1]
                assert reply["text"].startswith("You said: ")
                assert "bird" not in reply["text"], "Stop did not cut the reply"
                await _until(http, chat_path, lambda b: "Tea or coffee? stopped" in _texts(b))
        finally:
            for proc in procs:
                if proc.returncode is None:
                    await _end(proc)
