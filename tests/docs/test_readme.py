"""The README renders as written and says what works (issue 25.6, 25.9, 25.11): every code
fence closes where it opened, no heading or table falls into code, no paragraph is said
twice; the answer bodies it gives are the ones the gateway takes; the command that fetches
the ACP example agents works."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
from markdown_it import MarkdownIt
from markdown_it.token import Token

from collie_gateway.sources import Source
from fixtures.agents.harness import REPO, short_dir
from tests.collie_gateway.conftest import Rig, get_json, post_json
from tests.collie_gateway.processes import free_port
from wire.agent import FormField, Option, ToolRef

README = REPO / "README.md"


def _tokens() -> tuple[list[str], list[Token]]:
    text = README.read_text(encoding="utf-8")
    return text.splitlines(), MarkdownIt("commonmark").enable("table").parse(text)


def _covered(tokens: list[Token], kinds: set[str]) -> set[int]:
    """The source lines (0-based) inside blocks of these token types."""
    lines: set[int] = set()
    for token in tokens:
        if token.type in kinds and token.map is not None:
            lines.update(range(*token.map))
    return lines


def test_every_fence_closes_where_it_opened_and_holds_no_heading() -> None:
    lines, tokens = _tokens()
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) >= 5
    for fence in fences:
        assert fence.map is not None
        start, end = fence.map
        opening, closing = lines[start], lines[end - 1]
        indent = opening[: len(opening) - len(opening.lstrip())]
        assert closing == indent + fence.markup, f"the fence of line {start + 1} never closes"
        headings = [x for x in fence.content.splitlines() if re.match(r"#{2,6} ", x)]
        assert headings == [], f"headings inside the code of line {start + 1}: {headings}"
    assert not [t for t in tokens if t.type == "code_block"], "text indented into code"


def test_every_heading_and_table_line_renders_as_one() -> None:
    lines, tokens = _tokens()
    code = _covered(tokens, {"fence", "code_block"})
    headings = {t.map[0] for t in tokens if t.type == "heading_open" and t.map is not None}
    tables = _covered(tokens, {"table_open"})
    for number, line in enumerate(lines):
        if number in code:
            continue
        if re.match(r"#{1,6} ", line):
            assert number in headings, f"line {number + 1} is no heading: {line}"
        if line.startswith("|"):
            assert number in tables, f"line {number + 1} is in no table: {line}"
    names = [t.content for t in tokens if t.type == "inline" and t.map is not None]
    assert "A crew: a lead's gateway showing member machines (W1–W4, V2)" in names
    assert "Layout" in names


def test_no_paragraph_is_said_twice() -> None:
    _, tokens = _tokens()
    said: list[str] = []
    for opening, inline in itertools.pairwise(tokens):
        if opening.type == "paragraph_open" and len(inline.content) > 60:
            said.append(" ".join(inline.content.split()))
    twice = {p for p in said if said.count(p) > 1}
    assert twice == set()
    starts = [p.split(".")[0] for p in said]
    assert starts.count("It prints where to look, e") == 1
    assert len([p for p in said if p.startswith("`wire/` the protocol and the agent SDK")]) == 1


# --- 25.9: the answer bodies the README gives are the ones the gateway takes ------------------


def _answer_rows() -> list[tuple[str, list[str]]]:
    """The table under "Answer bodies": each row's ask kind and the answers in its cell."""
    text = README.read_text(encoding="utf-8")
    section = text.split("### Answer bodies", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        match = re.match(r"\| `(\w+)`[^|]*\| (.*) \|$", line)
        if match:
            rows.append((match[1], re.findall(r"`(\{.*?\})`", match[2])))
    return rows


OPTIONS = {
    "permission": [
        Option(id="yes", label="Read them", role="allow"),
        Option(id="always", label="Always read them", role="always"),
        Option(id="no", label="Don't", role="deny"),
    ],
    "choice": [Option(id="tea", label="Tea"), Option(id="milk", label="Milk")],
}
FIELDS = [
    FormField(id="what", kind="text", label="What", required=True),
    FormField(id="loud", kind="switch", label="With sound"),
]


async def test_T1_A5_the_readmes_answer_bodies_are_accepted_always_needs_confirmed(
    rig: Rig,
) -> None:
    rows = _answer_rows()
    assert [kind for kind, _ in rows] == ["permission", "permission", "choice", "text", "form"]
    agent = rig.agent("desk", runtime="desk", features=["history"])
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Answers")
    client, _ = await rig.gateway([Source(name="desk", socket=sock)])
    n = 0
    for kind, answers in rows:
        for body in answers:
            n += 1
            answer: dict[str, Any] = json.loads(body)
            extra: dict[str, Any] = {"options": OPTIONS.get(kind)} if kind in OPTIONS else {}
            if kind == "permission":
                extra["tool"] = ToolRef(call_id=f"t{n}", name="read_notes")
            if "options" in answer:
                extra["multiple"] = True
            if kind == "form":
                extra["fields"] = FIELDS
            ask = await conv.ask(id=f"a{n}", kind=kind, title=f"Ask {n}?", **extra)
            await _card_shows(client, ask.id)
            path = f"/api/v1/agents/desk/asks/{ask.id}/answer"
            if answer.get("confirmed"):
                bare = {k: v for k, v in answer.items() if k != "confirmed"}
                refused = await post_json(client, path, _tap(f"r{n}-1", bare))
                assert refused["outcome"] == "refused"
                assert refused["card"]["line"] == '"Always allow" needs a second tap.'
                assert '"Always allow\\" needs a second tap."' in README.read_text("utf-8")
            result = await post_json(client, path, _tap(f"r{n}", answer))
            assert result["outcome"] == "accepted", (body, result)
            resolution = await asyncio.wait_for(ask.wait(), 10)
            assert resolution.answer is not None
            got = {k: getattr(resolution.answer, k) for k in answer}
            assert got == answer
    assert n == 6


async def _card_shows(client: Any, ask_id: str) -> None:
    for _ in range(400):
        chat = await get_json(client, "/api/v1/agents/desk/conversations/c1?all_cards=true")
        if ask_id in [c["ask_id"] for c in chat["cards"]["cards"]]:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no card for {ask_id}")


def _tap(request_id: str, answer: dict[str, Any]) -> dict[str, Any]:
    return {"request_id": request_id, "version": 1, "answer": answer}


# --- 25.11: getting the ACP example agents ------------------------------------------------------


def _acp_commands() -> list[str]:
    """The shell block the README marks as tested, under "ACP agents"."""
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- tested: tests/docs/test_readme.py -->\n```sh\n", 1)[1]
    return block.split("\n```", 1)[0].splitlines()


async def test_the_readmes_command_fetches_an_acp_example_agent_that_serves() -> None:
    *fetch, serve = _acp_commands()
    argv = shlex.split(serve)
    assert argv[:1] == ["collie-gateway"]
    with short_dir() as folder:
        env = {**os.environ, "HOME": str(folder), "COLLIE_TOKEN": ""}
        bin_dir = str(Path(sys.executable).parent)  # `python` is this venv's, as after set-up
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        fetching = await asyncio.create_subprocess_exec(
            *("sh", "-ec", "\n".join(fetch)),
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(fetching.communicate(), 180)
        assert fetching.returncode == 0, out.decode()
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "collie_gateway", *argv[1:], "--port", str(port)),
            cwd=folder,
            env={**env, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
                assert await _echo_ready(http)
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 20)


async def _echo_ready(http: aiohttp.ClientSession) -> bool:
    for _ in range(600):
        with contextlib.suppress(aiohttp.ClientConnectionError):
            async with http.get("/healthz") as resp:
                if resp.status == 200 and (await resp.json())["ready"] == 1:
                    return True
        await asyncio.sleep(0.05)
    return False
