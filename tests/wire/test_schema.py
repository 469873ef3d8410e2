"""The generated JSON Schema is current, and SPEC.md documents everything it contains."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wire import messages as m
from wire import schema

SPEC = (Path(schema.__file__).with_name("SPEC.md")).read_text(encoding="utf-8")
DOC: dict[str, Any] = schema.build()
DEFS: dict[str, Any] = DOC["$defs"]
EVENT_DEFS: dict[str, str] = {
    ref.rsplit("/", 1)[1]: tag
    for tag, ref in DEFS["AgentEvent"]["discriminator"]["mapping"].items()
}
STRUCT_DEFS = sorted(
    name for name, d in DEFS.items() if d.get("type") == "object" and name not in EVENT_DEFS
)


def test_committed_schema_is_current() -> None:
    committed = schema.SCHEMA_PATH.read_text(encoding="utf-8")
    assert committed == schema.render(), "wire/schema.json is stale: run `python -m wire.schema`"


def test_render_is_deterministic_sorted_and_ends_with_newline() -> None:
    text = schema.render()
    assert text == schema.render()
    assert text.endswith("}\n")
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def test_main_writes_then_checks(tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    assert schema.main(["--check", "--path", str(path)]) == 1  # missing
    assert schema.main(["--path", str(path)]) == 0
    assert path.read_text(encoding="utf-8") == schema.render()
    assert schema.main(["--check", "--path", str(path)]) == 0
    path.write_text(schema.render().replace("Collie wire", "Collie wyre"), encoding="utf-8")
    assert schema.main(["--check", "--path", str(path)]) == 1


def test_module_check_passes_on_the_committed_file() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wire.schema", "--check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(schema.__file__).parents[1],
    )
    assert result.returncode == 0, result.stderr


def test_every_message_is_a_root() -> None:
    names = [name for name, _ in schema.MESSAGES]
    assert DOC["anyOf"] == [{"$ref": f"#/$defs/{name}"} for name in names]
    assert set(names) <= set(DEFS)


def test_agent_event_discriminates_on_type() -> None:
    assert DEFS["AgentEvent"]["discriminator"]["propertyName"] == "type"
    assert set(EVENT_DEFS.values()) == m.EVENT_TYPES


def _section(name: str) -> str:
    """The text of the SPEC.md section whose heading names ``name`` in backticks."""
    match = re.search(rf"^(#+) [^\n]*`{name}`[^\n]*\n", SPEC, re.MULTILINE)
    assert match, f"SPEC.md has no section for `{name}`"
    level = len(match.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(SPEC, match.end())
    return SPEC[match.end() : end.start() if end else len(SPEC)]


@pytest.mark.parametrize("name", STRUCT_DEFS)
def test_spec_documents_every_field(name: str) -> None:
    section = _section(name)
    for field in DEFS[name]["properties"]:
        assert f"| `{field}` |" in section or f"| `{name}.{field}` |" in section, (
            f"SPEC.md does not document {name}.{field}"
        )


@pytest.mark.parametrize("name", sorted(EVENT_DEFS))
def test_spec_documents_every_event(name: str) -> None:
    tag = EVENT_DEFS[name]
    row = re.search(rf"^\| `{re.escape(tag)}` \|[^\n]*$", SPEC, re.MULTILINE)
    assert row, f"SPEC.md has no row for the event {tag}"
    for field in DEFS[name]["properties"]:
        if field != "type":
            assert f"`{field}`" in row.group(0), f"SPEC.md's row for {tag} lacks `{field}`"


@pytest.mark.parametrize(
    "values",
    [
        m.FEATURES,
        m.CONVERSATION_STATES,
        m.ITEM_KINDS,
        m.TOOL_STATUSES,
        m.ASK_KINDS,
        m.OPTION_ROLES,
        m.FIELD_KINDS,
        m.RESOLUTIONS,
        m.REPLY_OUTCOMES,
        m.COMMAND_OUTCOMES,
    ],
    ids=lambda values: ",".join(values),
)
def test_spec_names_every_known_value(values: tuple[str, ...]) -> None:
    for value in values:
        assert f"`{value}`" in SPEC, f"SPEC.md never names `{value}`"


def _json_examples() -> list[Any]:
    """Every JSON document in SPEC.md's ``json`` blocks (a block may hold one per line)."""
    docs: list[Any] = []
    for block in re.findall(r"```json\n(.*?)```", SPEC, re.DOTALL):
        try:
            docs.append(json.loads(block))
        except json.JSONDecodeError:
            docs.extend(json.loads(line) for line in block.splitlines() if line.strip())
    return docs


def _kind_of(doc: dict[str, Any]) -> Any:
    if "type" in doc:
        return None  # an event
    for key, kind in (
        ("wire", m.Hello),
        ("answer", m.Reply),
        ("outcome", m.CommandResult),
        ("error", m.ErrorBody),
        ("starters", m.StarterList),
        ("conversations", m.ConversationPage),
    ):
        if key in doc:
            return kind
    raise AssertionError(f"no wire type for the SPEC.md example {doc}")


@pytest.mark.parametrize("doc", _json_examples(), ids=lambda doc: ",".join(sorted(doc)))
def test_spec_json_examples_decode(doc: dict[str, Any]) -> None:
    data = json.dumps(doc).encode()
    kind = _kind_of(doc)
    value = m.decode_event(data) if kind is None else m.decode(data, kind)
    assert value is not None


CURL_BODIES = re.findall(r"-d '([^']*)'\s*\\?\s*http://agent/(\S+)", SPEC)
_COMMAND_OF_PATH = (
    (r"conversations", m.StartConversation),
    (r"conversations/[^/]+/messages", m.SendMessage),
    (r"conversations/[^/]+/(stop|buttons/[^/]+)", m.TurnCommand),
    (r"conversations/[^/]+/(close|reopen)", m.PlainCommand),
    (r"asks/[^/]+/reply", m.Reply),
)


@pytest.mark.parametrize(("body", "path"), CURL_BODIES, ids=[p for _, p in CURL_BODIES])
def test_spec_curl_bodies_decode(body: str, path: str) -> None:
    kinds = [kind for pattern, kind in _COMMAND_OF_PATH if re.fullmatch(pattern, path)]
    assert len(kinds) == 1, path
    assert m.decode(body.encode(), kinds[0])


def test_spec_sse_example_decodes() -> None:
    data = re.findall(r"^data: (.*)$", SPEC, re.MULTILINE)
    assert data
    for line in data:
        assert m.decode_event(line.encode())
