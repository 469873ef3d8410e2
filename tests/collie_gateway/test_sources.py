"""sources.json: every bad file gets one clear error naming the file, the entry and the fault."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collie_gateway.errors import SourcesError
from collie_gateway.sources import Source, load_sources


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sources.json"
    path.write_text(text, encoding="utf-8")
    return path


def test_sources_good_file_in_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        json.dumps(
            {
                "durable_agents": [
                    {"name": "desk", "socket": "~/.collie/agents/desk.sock"},
                    {
                        "name": "pi-durable",
                        "url": "http://127.0.0.1:8711/",
                        "token_env": "PI_DURABLE_TOKEN",
                    },
                ]
            }
        ),
    )
    sources = load_sources(path, {"PI_DURABLE_TOKEN": "s3cret"})
    assert [s.name for s in sources] == ["desk", "pi-durable"]
    assert sources[0].socket == Path("~/.collie/agents/desk.sock").expanduser()
    assert sources[1].url == "http://127.0.0.1:8711"
    assert sources[1].token == "s3cret"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"durable_agents": [\n  {"name": "desk",}\n]}', "not valid JSON at line 2, column 19"),
        ('{"durable_agents": [], "agents": []}', "unknown key 'agents'"),
        (
            '{"durable_agents": [{"name": "desk", "socket": "/s", "colour": "red"}]}',
            "entry 1 ('desk'): unknown key 'colour'",
        ),
        (
            '{"durable_agents": [{"name": "a", "socket": "/a"}, {"name": "a", "socket": "/b"}]}',
            "entry 2 ('a'): duplicate name 'a'",
        ),
        (
            '{"durable_agents": [{"name": "a", "socket": "/a", "url": "http://127.0.0.1:1"}]}',
            'entry 1 (\'a\'): give exactly one of "socket" or "url", not both or neither',
        ),
        (
            '{"durable_agents": [{"name": "a"}]}',
            'entry 1 (\'a\'): give exactly one of "socket" or "url", not both or neither',
        ),
        (
            '{"durable_agents": [{"name": "a", "url": "http://x.test", "token_env": "NOPE"}]}',
            "entry 1 ('a'): the token variable NOPE is not set or empty",
        ),
        ('{"durable_agents": [{"socket": "/a"}]}', 'entry 1: "name" is required'),
        ('{"durable_agents": [{"name": "a", "url": "ftp://x"}]}', "must be http:// or https://"),
        ('{"durable_agents": {}}', '"durable_agents" must be a list'),
        ("[]", 'expected a JSON object with "durable_agents"'),
        ('{"durable_agents": ["desk"]}', "entry 1: expected an object"),
    ],
)
def test_sources_bad_file_names_file_entry_and_fault(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SourcesError) as caught:
        load_sources(path, {"EMPTY": ""})
    assert str(caught.value).startswith(str(path) + ": ")
    assert message in str(caught.value)


def test_sources_empty_token_variable_is_unreadable(tmp_path: Path) -> None:
    path = write(
        tmp_path, '{"durable_agents": [{"name": "a", "url": "http://x.test", "token_env": "T"}]}'
    )
    with pytest.raises(SourcesError, match="the token variable T is not set or empty"):
        load_sources(path, {"T": ""})


def test_sources_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SourcesError, match="cannot read the file"):
        load_sources(tmp_path / "nope.json", {})


def test_sources_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "sources.json"
    path.write_bytes(b'{"durable_agents": [\xff]}')
    with pytest.raises(SourcesError, match="not UTF-8"):
        load_sources(path, {})


@pytest.mark.parametrize(
    ("source", "local"),
    [
        (Source(name="a", socket=Path("/tmp/a.sock")), True),
        (Source(name="a", url="http://127.0.0.1:8711"), True),
        (Source(name="a", url="http://localhost:8711"), True),
        (Source(name="a", url="https://agents.example.com"), False),
        (Source(name="a", url="http://10.0.0.5:8711"), False),
        (Source(name="a", url="http://127.0.0.1.example.com"), False),
    ],
)
def test_D4_local_or_remote(source: Source, local: bool) -> None:
    assert source.local is local
