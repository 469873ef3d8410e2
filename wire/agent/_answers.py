"""Whether an answer fits its ask (wire/SPEC.md, Reply outcomes). Pure: no I/O, no clock."""

from __future__ import annotations

from typing import Final

from wire.messages import Answer, Ask, FormField

TEXT_DEFAULT: Final = 500  # spec A4: 500 characters, or the agent's own limit up to 2000
TEXT_CAP: Final = 2000


def text_limit(max_length: int | None) -> int:
    """The longest text answer allowed for a ``max_length`` the agent gave (or none)."""
    return TEXT_DEFAULT if max_length is None else min(max_length, TEXT_CAP)


def check_answer(ask: Ask, answer: Answer) -> str | None:
    """``None`` when ``answer`` fits ``ask``, else a sentence saying why not."""
    if ask.kind in ("permission", "choice"):
        return _check_options(ask, answer)
    if ask.kind == "text":
        if answer.text is None:
            return "A text ask needs a text answer."
        limit = text_limit(ask.max_length)
        if len(answer.text) > limit:
            return f"The text is over {limit} characters."
        return None
    if ask.kind == "form":
        return _check_form(ask.fields, answer)
    # A kind this SDK does not know: the agent that raised it reads the answer itself.
    return None


def _check_options(ask: Ask, answer: Answer) -> str | None:
    known = {o.id: o for o in ask.options}
    if answer.options is not None:
        if not (ask.kind == "choice" and ask.multiple):
            return "Only a choice with multiple takes several options."
        if answer.option is not None:
            return "Give option or options, not both."
        if len(set(answer.options)) != len(answer.options):
            return "An option is given twice."
        chosen = list(answer.options)
    elif answer.option is not None:
        chosen = [answer.option]
    else:
        return "The answer names no option."
    for option_id in chosen:
        option = known.get(option_id)
        if option is None:
            return f"Unknown option {option_id!r}."
        if option.role == "always" and not answer.confirmed:
            return "An always answer must be confirmed."
    return None


def _check_form(fields: list[FormField], answer: Answer) -> str | None:
    values = answer.fields
    if values is None:
        return "A form needs fields."
    by_id = {f.id: f for f in fields}
    for field_id in values:
        if field_id not in by_id:
            return f"Unknown field {field_id!r}."
    for f in fields:
        value = values.get(f.id)
        if value is None or value == "":
            if f.required:
                return f"The field {f.label or f.id!r} is required."
            continue
        if f.kind == "switch":
            if not isinstance(value, bool):
                return f"The field {f.id!r} is a switch: true or false."
        elif isinstance(value, bool):
            return f"The field {f.id!r} takes text, not true or false."
        elif f.kind == "select":
            if value not in {o.id for o in f.options}:
                return f"Unknown option {value!r} for the field {f.id!r}."
        elif len(value) > text_limit(f.max_length):
            return f"The field {f.id!r} is over {text_limit(f.max_length)} characters."
    return None
