"""X1: the texts of a wire value, read from the wire types (core/texts.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import msgspec.inspect as mi
import pytest

from collie_gateway.core import texts as texts_module
from collie_gateway.core.redact import Redactor
from collie_gateway.core.texts import MaskedAsks, masked, texts
from wire.messages import (
    Argument,
    Ask,
    AskRaised,
    Button,
    Conversation,
    FormField,
    Item,
    Option,
    Progress,
    Step,
    ToolRef,
)

NOW = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)
KEY = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"


def _ask(**extra: object) -> Ask:
    return Ask(
        id="a1",
        conversation="c1",
        kind="permission",
        title="Push with " + KEY,
        text="curl -H 'Authorization: Bearer " + KEY + "'",
        tool=ToolRef(call_id="call-1", name="Bash"),
        options=[Option(id="allow", label="Allow", role="allow")],
        fields=[
            FormField(id="f", kind="select", label="Where", options=[Option(id="p", label="P")])
        ],
        arguments=[
            Argument(name="env", value={"GITHUB_TOKEN": KEY, "list": [1, KEY]}, origin="typed"),
            Argument(name="command", value="echo " + KEY, origin="model"),
        ],
        reasons=["It pushes with " + KEY],
        **extra,  # type: ignore[arg-type]
    )


def test_X1_every_text_of_an_ask_is_masked_at_any_depth() -> None:
    shown = masked(_ask(), Redactor().mask)
    body = msgspec.json.encode(shown).decode()
    assert KEY not in body
    assert shown.arguments[0].value["GITHUB_TOKEN"].startswith("ghp_•")
    assert shown.arguments[0].value["list"][0] == 1
    assert KEY not in shown.arguments[0].value["list"][1]
    assert KEY not in shown.reasons[0]
    assert KEY not in shown.arguments[1].value


def test_X1_an_ask_is_masked_once_per_version_for_every_surface() -> None:
    seen: list[str] = []

    def mask(text: str) -> str:
        seen.append(text)
        return Redactor().mask(text)

    shared = MaskedAsks(mask, size=2)
    first = shared(_ask())
    walked = len(seen)
    assert KEY not in msgspec.json.encode(first).decode()
    assert shared(_ask()) is first  # the same ask again (e.g. read in a snapshot): no walk
    assert len(seen) == walked
    changed = shared(_ask(version=2))
    assert changed is not first
    assert changed.version == 2
    other = msgspec.structs.replace(_ask(), title="Another agent's ask, the same ids")
    assert shared(other).title == other.title  # another content under the same key
    shared.forget(other)
    assert shared.kept == 1
    shared(msgspec.structs.replace(_ask(), id="a2"))
    shared(msgspec.structs.replace(_ask(), id="a3"))
    assert shared.kept == 2  # the newest only


def test_X1_verbatim_strings_are_sent_as_the_agent_gave_them() -> None:
    ask = _ask()
    shouted = masked(ask, str.upper)
    assert (shouted.id, shouted.conversation, shouted.kind) == ("a1", "c1", "permission")
    assert shouted.options[0].id == "allow"
    assert shouted.options[0].role == "allow"
    assert shouted.options[0].label == "ALLOW"
    assert shouted.tool == ToolRef(call_id="call-1", name="BASH")
    assert shouted.arguments[0].origin == "typed"
    assert shouted.arguments[0].name == "ENV"
    assert shouted.fields[0].kind == "select"
    assert shouted.fields[0].label == "WHERE"
    link = Item(id="i1", kind="link", url="https://example.test/a?b", label="the docs")
    assert masked(link, str.upper) == Item(
        id="i1", kind="link", url="https://example.test/a?b", label="THE DOCS"
    )


def test_X1_a_value_with_nothing_to_mask_is_the_same_object() -> None:
    ask = Ask(id="a", conversation="c", kind="text", title="Which name?")
    assert masked(ask, Redactor().mask) is ask


def test_X1_texts_walk_events_conversations_and_items() -> None:
    conv = Conversation(
        id="c1",
        title="T",
        subtitle="S",
        workspace="W",
        updated_at=NOW,
        progress=Progress(steps=[Step(label="step", state="running")], label="P"),
        buttons=[Button(id="b", label="B", icon="retry")],
        asks=[Ask(id="a", conversation="c1", kind="text", title="Q")],
        items=[Item(id="i", kind="tool", name="Bash", output="O", text="X", status="done")],
    )
    assert list(texts(conv)) == ["T", "S", "W", "step", "P", "B", "Q", "", "X", "Bash", "O"]
    assert list(texts(AskRaised(ask=_ask()))) == list(texts(_ask()))


def test_X1_a_field_a_later_version_adds_is_a_text() -> None:
    class Later(Ask, frozen=True, kw_only=True):
        note: str = ""
        extra: dict[str, list[str]] = {}  # noqa: RUF012 (a msgspec default)

    later = Later(id="a", conversation="c", kind="text", note=KEY, extra={"k": [KEY]})
    shown = masked(later, Redactor().mask)
    assert KEY not in msgspec.json.encode(shown).decode()


def test_X1_log_lines_are_masked_with_their_arguments_and_tracebacks() -> None:
    import io
    import logging

    from collie_gateway.logmask import mask_logs

    out = io.StringIO()
    logger = logging.getLogger("collie.test.logmask")
    logger.propagate = False
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    try:
        mask_logs(Redactor().mask, logger)
        mask_logs(Redactor().mask, logger)  # once per handler
        logger.warning("answer refused by the agent: %s", "token " + KEY)
        try:
            raise ValueError("bad key " + KEY)
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert KEY not in text
    assert "answer refused by the agent: token ghp_•" in text
    assert "ValueError: bad key ghp_•" in text
    assert len(handler.filters) == 1


def test_X1_keys_that_mask_alike_keep_every_value() -> None:
    other = "ghp_" + "Zz9yX8wV7uT6sR5qP4oN3mL2kJ1iH0gF9eD8"
    arg = Argument(name="env", value={KEY: 1, other: [2], "plain": 3})
    shown = masked(arg, Redactor().mask)
    assert shown.value == {"ghp_••••": 1, "ghp_•••• (2)": [2], "plain": 3}


def test_X1_the_first_ask_masked_reads_no_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every struct an ask holds is planned when the gateway makes its MaskedAsks (at start),
    so the first ask masked does not read the wire types on its way to the phones."""
    monkeypatch.setattr(texts_module, "_PLANS", {})  # as in a gateway just started
    asks = MaskedAsks(Redactor().mask)

    def read(*_: object) -> object:
        raise AssertionError("the wire types were read on an ask's way")

    monkeypatch.setattr(mi, "type_info", read)
    monkeypatch.setattr(mi, "multi_type_info", read)
    shown = asks(_ask())
    assert KEY not in msgspec.json.encode(shown).decode()
