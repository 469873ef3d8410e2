"""Whether an answer fits its ask: wire/SPEC.md §8's table, the one implementation that the
agent SDK (before it applies a reply) and the gateway (before it sends one) both use.

Pure: no I/O, no clock. A misfit carries a code and its values, so that each side words it
its own way (the SDK in English for its ``400``, the gateway from its catalogue).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from wire.messages import Answer, Ask, FormField

TEXT_DEFAULT: Final = 500  # spec A4: 500 characters, or the agent's own limit up to 2000
TEXT_CAP: Final = 2000

#: Each misfit's code and its English sentence (``str.format`` names: its values).
SENTENCES: Final[Mapping[str, str]] = {
    "no_option": "The answer names no option.",
    "not_multiple": "Only a choice with multiple takes several options.",
    "option_and_options": "Give option or options, not both.",
    "option_twice": "An option is given twice.",
    "unknown_option": "Unknown option {option!r}.",
    "not_confirmed": "An always answer must be confirmed.",
    "no_text": "A text ask needs a text answer.",
    "text_too_long": "The text is over {limit} characters.",
    "no_fields": "A form needs fields.",
    "unknown_field": "Unknown field {field!r}.",
    "field_required": "The field {field!r} is required.",
    "field_not_switch": "The field {field!r} is a switch: true or false.",
    "field_not_text": "The field {field!r} takes text, not true or false.",
    "field_unknown_option": "Unknown option {option!r} for the field {field!r}.",
    "field_too_long": "The field {field!r} is over {limit} characters.",
}


@dataclass(frozen=True, slots=True)
class Misfit:
    """Why an answer does not fit its ask: ``code`` (a key of ``SENTENCES``) and its values."""

    code: str
    values: Mapping[str, object] = field(default_factory=dict)

    @property
    def sentence(self) -> str:
        """The English sentence an agent answers ``400 bad_request`` with."""
        return SENTENCES[self.code].format(**self.values)


def text_limit(max_length: int | None) -> int:
    """The longest text answer allowed for a ``max_length`` the agent gave (or none)."""
    return TEXT_DEFAULT if max_length is None else min(max_length, TEXT_CAP)


def misfit(ask: Ask, answer: Answer) -> Misfit | None:
    """``None`` when ``answer`` fits ``ask`` (§8), else why not. An ask of a kind this side
    does not know is judged by the agent that raised it: ``None``."""
    if ask.kind in ("permission", "choice"):
        return _check_options(ask, answer)
    if ask.kind == "text":
        if answer.text is None:
            return Misfit("no_text")
        limit = text_limit(ask.max_length)
        if len(answer.text) > limit:
            return Misfit("text_too_long", {"limit": limit})
        return None
    if ask.kind == "form":
        return _check_form(ask.fields, answer)
    return None


def check_answer(ask: Ask, answer: Answer) -> str | None:
    """``None`` when ``answer`` fits ``ask``, else an English sentence saying why not."""
    found = misfit(ask, answer)
    return None if found is None else found.sentence


def _check_options(ask: Ask, answer: Answer) -> Misfit | None:
    known = {o.id: o for o in ask.options}
    if answer.options is not None:
        if not (ask.kind == "choice" and ask.multiple):
            return Misfit("not_multiple")
        if answer.option is not None:
            return Misfit("option_and_options")
        if len(set(answer.options)) != len(answer.options):
            return Misfit("option_twice")
        chosen = list(answer.options)
    elif answer.option is not None:
        chosen = [answer.option]
    else:
        return Misfit("no_option")
    for option_id in chosen:
        option = known.get(option_id)
        if option is None:
            return Misfit("unknown_option", {"option": option_id})
        if option.role == "always" and not answer.confirmed:
            return Misfit("not_confirmed")
    return None


def _check_form(fields: list[FormField], answer: Answer) -> Misfit | None:
    values = answer.fields
    if values is None:
        return Misfit("no_fields")
    by_id = {f.id: f for f in fields}
    for field_id in values:
        if field_id not in by_id:
            return Misfit("unknown_field", {"field": field_id})
    for f in fields:
        value = values.get(f.id)
        if value is None or value == "":
            if f.required:
                return Misfit("field_required", {"field": f.label or f.id})
            continue
        if f.kind == "switch":
            if not isinstance(value, bool):
                return Misfit("field_not_switch", {"field": f.id})
        elif isinstance(value, bool):
            return Misfit("field_not_text", {"field": f.id})
        elif f.kind == "select":
            if value not in {o.id for o in f.options}:
                return Misfit("field_unknown_option", {"option": value, "field": f.id})
        elif len(value) > text_limit(f.max_length):
            return Misfit("field_too_long", {"field": f.id, "limit": text_limit(f.max_length)})
    return None
