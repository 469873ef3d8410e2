"""``sources.json`` names a LangGraph graph: the gateway's supervisor runs the bridge, its
relative checkpoints file beside the gateway's database; the command line runs it by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from collie_gateway.__main__ import _parser
from collie_gateway.errors import SourcesError
from collie_gateway.sources import load_sources


def write(folder: Path, entry: object) -> Path:
    path = folder / "sources.json"
    path.write_text(json.dumps({"durable_agents": [{"name": "graphs", "langgraph": entry}]}))
    return path


def test_a_langgraph_entry_runs_the_bridge_beside_the_database(tmp_path: Path) -> None:
    spec = {"graph": "my_pkg.agent:graph", "checkpoints": "graphs.sqlite", "input": "messages"}
    [source] = load_sources(write(tmp_path, spec), beside=tmp_path / "db")
    assert source.bridge is not None
    argv = list(source.bridge.argv)
    assert argv[:3] == [sys.executable, "-m", "bridges.langgraph"]
    assert argv[argv.index("--graph") + 1] == "my_pkg.agent:graph"
    assert argv[argv.index("--checkpoints") + 1] == str(tmp_path / "db" / "graphs.sqlite")
    assert source.socket == Path("~/.collie/agents/graphs.sock").expanduser()


def test_a_server_entry_runs_the_bridge_as_its_client(tmp_path: Path) -> None:
    spec = {"url": "http://127.0.0.1:2024", "assistant": "agent"}
    [source] = load_sources(write(tmp_path, spec), beside=tmp_path / "db")
    assert source.bridge is not None
    argv = list(source.bridge.argv)
    assert "--graph" not in argv
    assert argv[argv.index("--url") + 1] == "http://127.0.0.1:2024"
    assert argv[argv.index("--assistant") + 1] == "agent"
    assert argv[argv.index("--poll") + 1] == "5"
    args = _parser().parse_args(["bridge", "langgraph", *argv[3:]])  # the bridge takes them
    assert (args.url, args.assistant, args.poll, args.graph) == (spec["url"], "agent", 5.0, None)


def test_the_command_line_wants_one_mode(tmp_path: Path) -> None:
    from bridges.langgraph.cli import main

    files = ["--socket", str(tmp_path / "s"), "--state", str(tmp_path / "t")]
    assert main([*files]) == 2
    assert (
        main([*files, "--graph", "m:g", "--checkpoints", "c", "--url", "u", "--assistant", "a"])
        == 2
    )


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({"graph": "no_colon"}, '"graph" must name the compiled graph'),
        ({"graph": "m:g", "input": "shout"}, '"input" must be "messages" or "module:name"'),
        ({"graph": "m:g", "url": "http://127.0.0.1:2024"}, "unknown key 'graph'"),
        ({"url": "http://10.0.0.5:2024", "assistant": "a"}, "must be https:// off loopback"),
        ({"url": "http://127.0.0.1:2024"}, '"assistant" must name an assistant'),
        ({"url": "http://127.0.0.1:2024", "assistant": "a", "poll": "x"}, '"poll" must be'),
        ("m:g", 'must be an object with "graph"'),
    ],
)
def test_a_wrong_langgraph_entry_is_refused(tmp_path: Path, entry: object, said: str) -> None:
    with pytest.raises(SourcesError, match=said):
        load_sources(write(tmp_path, entry))


def test_the_command_line_names_the_bridge() -> None:
    args = _parser().parse_args(
        [
            "bridge",
            "langgraph",
            "--graph",
            "m:g",
            "--checkpoints",
            "c",
            "--socket",
            "s",
            "--state",
            "t",
        ]
    )
    assert (args.bridge, args.graph, args.input) == ("langgraph", "m:g", "messages")
