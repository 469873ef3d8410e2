"""Ask cards: a wire ``Ask`` as the phone draws it (spec A1–A8, T1, R1, R2).

Pure: no I/O, ``now`` is passed in. Every string is the catalogue's, or the agent's own
text cleaned by :mod:`collie_gateway.core.cleaning`. An ask is shown whole or not answerable:
never with an option or a field left out (A7), except "Always allow" where A5/A6 forbid it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Final, Generic, TypeVar
from urllib.parse import quote

from msgspec import Struct

from collie_gateway.core.answers import CardState, TapOutcome
from collie_gateway.core.cleaning import LABEL_LIMIT, TEXT_LIMIT, TITLE_LIMIT, Redact, clean
from collie_gateway.core.refusal import CardFacts
from collie_gateway.strings import Catalogue
from collie_gateway.views.clock import as_utc, expires_label
from wire.answers import text_limit
from wire.messages import Argument, Ask, FormField, Option, Time, encode

MAX_PERMISSION_OPTIONS: Final = 6  # spec A4
MAX_CHOICE_OPTIONS: Final = 8  # spec A4
MAX_FORM_FIELDS: Final = 6  # spec A4
MAX_SELECT_OPTIONS: Final = 20  # ours: a select is a list the person scrolls, not a page
FIRST_CARDS: Final = 5  # spec A8
MAX_ARGUMENTS: Final = 20  # ours: more than a card shows makes the ask unanswerable (A7)
MAX_REASONS: Final = 10  # ours: reasons past these are left out and the text counts as shortened

ROLE_KEYS: Final[Mapping[str, str]] = {
    "allow": "role_allow",
    "always": "role_always",
    "deny": "role_deny",
    "cancel": "role_cancel",
}
FIELD_KINDS: Final = ("text", "select", "switch")
SHOWN_KEPT: Final = 256  # ours: asks whose texts as shown, and cards, are kept (drawn once)


# --- what the last tap came to (input) ------------------------------------------------------


# --- the card (output) ----------------------------------------------------------------------


class PermissionButton(Struct, frozen=True, kw_only=True):
    """One option of a permission ask: Collie's wording, the agent's label muted below it.
    Only the ``always`` button has ``confirm_label`` and ``tool_name`` (its second tap, A5).

    Attributes:
        option_id: The option's id, to send as `answer.option`.
        role: `allow`, `always`, `deny` or `cancel`.
        label: Collie's wording of the option (A4).
        secondary: The agent's own label, shown muted below; null when it says the same.
        confirm_label: The `always` button's second tap (A5); send `confirmed: true` with it.
        tool_name: The tool `always` would allow from now on (A5).
    """

    option_id: str
    role: str
    label: str
    secondary: str | None = None
    confirm_label: str | None = None
    tool_name: str | None = None


class ChoiceRow(Struct, frozen=True, kw_only=True):
    """One option of a choice ask or of a form's select field.

    Attributes:
        option_id: The option's id.
        label: Its label.
    """

    option_id: str
    label: str


class TextInput(Struct, frozen=True, kw_only=True):
    """A text line with its counter: ``counter`` for the empty line ("0 of 500") and
    ``counter_template`` for the phone to fill in as the person types ("{n} of 500").

    Attributes:
        limit: The most characters the answer may have.
        counter: The counter for an empty line ("0 of 500").
        counter_template: The counter to fill in as the person types (`{n}` is the count).
    """

    limit: int
    counter: str
    counter_template: str


class FieldView(Struct, frozen=True, kw_only=True):
    """One form field: ``input`` for a text line, ``options`` for a select, neither for a
    switch.

    Attributes:
        field_id: The field's id, a key of `answer.fields`.
        kind: `text`, `select` or `switch`.
        label: Its label.
        required: Whether Send needs it filled in.
        required_label: The mark of a required field; null when not required.
        input: The text line of a `text` field; else null.
        options: The options of a `select` field; else empty.
    """

    field_id: str
    kind: str
    label: str
    required: bool
    required_label: str | None = None
    input: TextInput | None = None
    options: list[ChoiceRow] = []


class Body(Struct, frozen=True, kw_only=True, tag_field="kind"):
    """What a card offers to answer with, by ask kind."""


class PermissionBody(Body, frozen=True, kw_only=True, tag="permission"):
    """One button per option.

    Attributes:
        kind: `permission`.
        buttons: One button per option, in the agent's order.
    """

    buttons: list[PermissionButton]


class ChoiceBody(Body, frozen=True, kw_only=True, tag="choice"):
    """One row per option. With ``multiple`` rows toggle under ``hint`` and ``send`` sends.

    Attributes:
        kind: `choice`.
        rows: One row per option.
        multiple: Whether several rows may be picked (then `send` sends them).
        hint: The line above the rows of a multiple choice; else null.
        send: The Send button of a multiple choice; else null (a tap on a row answers).
    """

    rows: list[ChoiceRow]
    multiple: bool
    hint: str | None = None
    send: str | None = None


class TextBody(Body, frozen=True, kw_only=True, tag="text"):
    """One text line and Send.

    Attributes:
        kind: `text`.
        input: The text line.
        send: The Send button's words.
    """

    input: TextInput
    send: str


class FormBody(Body, frozen=True, kw_only=True, tag="form"):
    """Fields in a column under one Send.

    Attributes:
        kind: `form`.
        fields: The fields, in a column.
        send: The Send button's words.
    """

    fields: list[FieldView]
    send: str


class OutcomeLine(Struct, frozen=True, kw_only=True):
    """What the card says after a tap (spec T1, R2). ``closed``: the card goes away now;
    ``frozen``: its answers no longer tap; ``retry_label``: a Retry button that sends
    ``request_id`` again.

    Attributes:
        outcome: The tap's outcome (T1's rows).
        request_id: The tap's request id (Retry sends it again).
        line: What the card says now; null: nothing.
        closed: The card goes away now.
        frozen: Its answers no longer tap.
        retry_label: A Retry button's words; null: no Retry.
    """

    outcome: str
    request_id: str
    line: str | None
    closed: bool
    frozen: bool
    retry_label: str | None = None


class Card(Struct, frozen=True, kw_only=True):
    """One ask as the phone draws it. ``tool_call_id`` is the tool call it sits under (A1);
    ``body`` is None exactly when the ask cannot be answered from the phone (A7).

    Attributes:
        ask_id: The ask's id, for `POST …/asks/{ask}/answer`.
        version: The ask's version: send it with the answer (a changed ask refuses an old one).
        kind: `permission`, `choice`, `text` or `form`.
        tool_call_id: The tool call the card sits under (A1); null: under the last line.
        caption: The line above the card (who asks).
        title: The question.
        text: More words under it; empty when none.
        deadline: When the ask expires; null: never.
        deadline_label: The deadline in words ("Expires in 9 min"); null without a deadline.
        answerable: Whether the phone can answer it (A7).
        notices: Lines shown on the card (e.g. why it cannot be answered here).
        body: What it offers to answer with; null exactly when not answerable (A7).
        outcome: What the last tap came to; null before any tap.
        answer_url: Where the answer is posted (a crew member's card: the lead's route to
            that member, W4); the phone walks a member's card the same as a local one.
        call: What the call will use, why it waits and whether it can be undone (S1); null
            when the ask says none of these.
    """

    ask_id: str
    version: int
    kind: str
    tool_call_id: str | None
    caption: str
    title: str
    text: str
    deadline: Time | None
    deadline_label: str | None
    answerable: bool
    notices: list[str]
    body: Body | None
    outcome: OutcomeLine | None = None
    call: CallDetails | None = None
    answer_url: str = ""  # where the answer is posted: a phone walks a member's card the same


class ArgumentRow(Struct, frozen=True, kw_only=True):
    """One argument of the call (S1): its name, its value as text, the wire's ``origin`` and
    the origin in words (None for an origin Collie has no words for).

    Attributes:
        name: The argument's name.
        value: Its value as text (cleaned, cut and masked as the card's text).
        origin: The wire's origin; null: not said.
        origin_label: The origin in words ("you typed it"); null: no words for it.
    """

    name: str
    value: str
    origin: str | None
    origin_label: str | None


class CallDetails(Struct, frozen=True, kw_only=True):
    """What the call will use, why it waits and whether it can be undone (S1). A title is
    None when its part is empty; ``irreversible`` is the warning, or None.

    Attributes:
        arguments_title: "What it will use"; null when there are no arguments.
        arguments: The call's arguments with their origins.
        reasons_title: "Why this needs you"; null when there are no reasons.
        reasons: Why it waits, verbatim.
        irreversible: "Nothing can undo this step once it runs."; null when it can be undone.
    """

    arguments_title: str | None
    arguments: list[ArgumentRow]
    reasons_title: str | None
    reasons: list[str]
    irreversible: str | None


class MoreRow(Struct, frozen=True, kw_only=True):
    """The row "Show N more" under the first cards (spec A8).

    Attributes:
        label: "Show N more".
        count: How many cards are held back.
    """

    label: str
    count: int


class CardList(Struct, frozen=True, kw_only=True):
    """A conversation's cards, and the "Show N more" row when some are held back.

    Attributes:
        cards: The cards shown, oldest first.
        more: The "Show N more" row (A8); null when every card is shown.
    """

    cards: list[Card]
    more: MoreRow | None = None


# --- building -------------------------------------------------------------------------------


class _Cleaner:
    """Cleans the agent's strings and remembers whether any was cut or cleaned."""

    def __init__(self, redact: Redact | None) -> None:
        self.redact = redact
        self.shortened = False

    def __call__(self, text: str, limit: int, *, multiline: bool = False) -> str:
        cleaned = clean(text, limit, multiline=multiline, redact=self.redact)
        self.shortened = self.shortened or cleaned.shortened
        return cleaned.text


def build_card(
    ask: Ask,
    *,
    agent_name: str,
    now: datetime,
    catalogue: Catalogue,
    answer_state: CardState | None = None,
    redact: Redact | None = None,
) -> Card:
    """The card for ``ask``; ``answer_state`` is the last tap on it, if any.

    A tap on an older version of the ask can no longer be applied (the agent answers it
    ``changed``): whatever it came to, the card of the new version reads as T1's "changed" row
    and can be answered.
    """
    answer_state = _for_version(answer_state, ask.version)
    if answer_state is not None or ask.deadline is not None:  # a tap, or a time left: anew
        return _draw_card(ask, agent_name, now, catalogue, answer_state, redact)
    return _CARDS.get(
        ask,
        agent_name,
        catalogue,
        redact,
        lambda: _draw_card(ask, agent_name, now, catalogue, None, redact),
    )


def _draw_card(
    ask: Ask,
    agent_name: str,
    now: datetime,
    catalogue: Catalogue,
    answer_state: CardState | None,
    redact: Redact | None,
) -> Card:
    title, text, call, body, shortened = _shown(ask, catalogue, redact)
    notices = [catalogue["text_shortened"]] if shortened else []
    if body is None:
        notices.append(catalogue["cannot_answer"])
    outcome = None if answer_state is None else _outcome(answer_state, catalogue, redact)
    deadline = None if ask.deadline is None else as_utc(ask.deadline)
    return Card(
        ask_id=ask.id,
        version=ask.version,
        kind=clean(ask.kind, LABEL_LIMIT).text,
        tool_call_id=ask.tool.call_id if ask.tool is not None else None,
        caption=catalogue.fmt("card_caption", agent=clean(agent_name, LABEL_LIMIT).text),  # A2
        title=title,
        text=text,
        deadline=deadline,
        deadline_label=None if deadline is None else expires_label(deadline, now, catalogue),
        answerable=body is not None and not (outcome is not None and outcome.frozen),
        notices=notices,
        body=body,
        outcome=outcome,
        call=call,
        answer_url=(
            f"/api/v1/agents/{quote(agent_name, safe='')}/asks/{quote(ask.id, safe='')}/answer"
        ),
    )


_Shown = tuple[str, str, CallDetails | None, Body | None, bool]
V = TypeVar("V")


class _ByAsk(Generic[V]):
    """What was drawn of the newest asks, by the ask (its conversation, id and version), the
    agent's name, and the catalogue and mask drawn with (both kept in the entry, so their ids
    are not reused while it lives). An ask is drawn on its card in each chat.changed and read,
    and checked at a tap: each event of its conversation brings a new copy of it, and an equal
    copy (the same version) finds what was drawn."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: OrderedDict[
            tuple[str, str, int, str, int, int], tuple[Ask, Catalogue, Redact | None, V]
        ] = OrderedDict()

    def get(
        self,
        ask: Ask,
        agent_name: str,
        catalogue: Catalogue,
        redact: Redact | None,
        draw: Callable[[], V],
    ) -> V:
        """What ``draw`` gives for the ask, drawn once while kept."""
        key = (ask.conversation, ask.id, ask.version, agent_name, id(catalogue), id(redact))
        kept = self._kept.get(key)
        if kept is not None and (kept[0] is ask or kept[0] == ask):
            return kept[3]
        value = draw()
        self._kept[key] = (ask, catalogue, redact, value)
        if len(self._kept) > self.size:
            self._kept.popitem(last=False)
        return value


_SHOWN: _ByAsk[_Shown] = _ByAsk(SHOWN_KEPT)
_CARDS: _ByAsk[Card] = _ByAsk(SHOWN_KEPT)


def _shown(ask: Ask, catalogue: Catalogue, redact: Redact | None) -> _Shown:
    """The card's texts as shown: title, text, call details, body (None: not answerable,
    A7), and whether any text was cut, cleaned or masked."""
    return _SHOWN.get(ask, "", catalogue, redact, lambda: _draw_shown(ask, catalogue, redact))


def _draw_shown(ask: Ask, catalogue: Catalogue, redact: Redact | None) -> _Shown:
    cleaner = _Cleaner(redact)
    title = cleaner(ask.title, TITLE_LIMIT)
    text = cleaner(ask.text, TEXT_LIMIT, multiline=True)
    call = call_details(ask, cleaner, catalogue)  # before the body: it may hide "Always allow"
    shortened = cleaner.shortened
    body = _body(ask, cleaner, catalogue) if _fits(ask) and call_fits(ask) else None
    if body is not None:
        shortened = cleaner.shortened  # its labels are shown too
    return title, text, call, body, shortened


def card_facts(ask: Ask, catalogue: Catalogue, redact: Redact | None) -> CardFacts:
    """What a tap's refusal needs of the card (:func:`~collie_gateway.core.refusal.refusal`),
    without building it."""
    _, _, _, body, shortened = _shown(ask, catalogue, redact)
    return CardFacts(answerable=body is not None, shortened=shortened)


def build_cards(
    asks: Iterable[Ask],
    *,
    agent_name: str,
    now: datetime,
    catalogue: Catalogue,
    states: Mapping[str, CardState] | None = None,
    show_all: bool = False,
    redact: Redact | None = None,
) -> CardList:
    """A conversation's asks in the agent's order: the first 5 as cards and a "Show N more"
    row for the rest (spec A8), or all of them with ``show_all``. ``states`` maps an ask id
    to its last tap; an accepted ask's card has closed (T1) and is left out."""
    states = states or {}
    cards: list[Card] = []
    held_back = 0
    for ask in asks:
        state = _for_version(states.get(ask.id), ask.version)
        if state is not None and state.outcome == TapOutcome.ACCEPTED:
            continue
        if show_all or len(cards) < FIRST_CARDS:
            cards.append(
                build_card(
                    ask,
                    agent_name=agent_name,
                    now=now,
                    catalogue=catalogue,
                    answer_state=state,
                    redact=redact,
                )
            )
        else:
            held_back += 1
    if not held_back:
        return CardList(cards=cards)
    more = MoreRow(label=catalogue.fmt("show_more", n=held_back), count=held_back)
    return CardList(cards=cards, more=more)


# --- S1: what the call will use, why it waits, irreversible ---------------------------------

# Origins (S1's table) by the wire's value; ``result:<step>`` and ``agent:<name>`` by prefix.
ORIGIN_KEYS: Final[Mapping[str, str]] = {
    "typed": "origin_typed",
    "reply": "origin_reply",
    "context": "origin_context",
    "computed": "origin_computed",
    "result": "origin_result",
    "model": "origin_model",
    "agent": "origin_agent",
}


def origin_key(origin: str | None) -> str | None:
    """The catalogue key of ``origin`` in words, or None when Collie has none for it."""
    if origin is None:
        return None
    head = origin.split(":", 1)[0] if origin.startswith(("result:", "agent:")) else origin
    return ORIGIN_KEYS.get(head)


def argument_text(value: object) -> str:
    """An argument's value as the card shows it: a string as it is, any other JSON compact."""
    return value if isinstance(value, str) else encode(value).decode("utf-8")


def call_fits(ask: Ask) -> bool:
    """Whether the card can show every argument (more than ``MAX_ARGUMENTS`` cannot, A7)."""
    return len(ask.arguments) <= MAX_ARGUMENTS


def call_details(ask: Ask, cleaner: _Cleaner, catalogue: Catalogue) -> CallDetails | None:
    """S1's parts of a card, or None when the ask gives none. Names, values and reasons go
    through ``cleaner``: a value cut, cleaned or masked (X1) counts as text shortened, so
    "Always allow" is not offered (A6)."""
    if not (ask.arguments or ask.reasons or ask.irreversible):
        return None
    rows = [_argument_row(arg, cleaner, catalogue) for arg in ask.arguments[:MAX_ARGUMENTS]]
    reasons = [cleaner(reason, TITLE_LIMIT) for reason in ask.reasons[:MAX_REASONS]]
    if len(ask.reasons) > MAX_REASONS:
        cleaner.shortened = True
    return CallDetails(
        arguments_title=catalogue["argumentsTitle"] if rows else None,
        arguments=rows,
        reasons_title=catalogue["reasonsTitle"] if reasons else None,
        reasons=reasons,
        irreversible=catalogue["irreversible"] if ask.irreversible else None,
    )


def _argument_row(arg: Argument, cleaner: _Cleaner, catalogue: Catalogue) -> ArgumentRow:
    key = origin_key(arg.origin)
    return ArgumentRow(
        name=cleaner(arg.name, LABEL_LIMIT),
        value=cleaner(argument_text(arg.value), TITLE_LIMIT),
        origin=None if arg.origin is None else clean(arg.origin, LABEL_LIMIT).text,
        origin_label=None if key is None else catalogue[key],
    )


def _for_version(state: CardState | None, version: int) -> CardState | None:
    """``state`` as the card of ``version`` shows it: a tap on another version is "changed"."""
    if state is None or state.version is None or state.version == version:
        return state
    return CardState(outcome=TapOutcome.CHANGED, request_id=state.request_id, version=version)


def _fits(ask: Ask) -> bool:
    """Whether the phone can show every option and field of ``ask`` (A4, A7)."""
    match ask.kind:
        case "permission":
            return _options_fit(ask.options, MAX_PERMISSION_OPTIONS) and all(
                option.role in ROLE_KEYS for option in ask.options
            )
        case "choice":
            return _options_fit(ask.options, MAX_CHOICE_OPTIONS)
        case "text":
            return True
        case "form":
            return (
                0 < len(ask.fields) <= MAX_FORM_FIELDS
                and _unique(field.id for field in ask.fields)
                and all(_field_fits(field) for field in ask.fields)
            )
        case _:
            return False


def _field_fits(field: FormField) -> bool:
    if field.kind not in FIELD_KINDS:
        return False
    return field.kind != "select" or _options_fit(field.options, MAX_SELECT_OPTIONS)


def _options_fit(options: list[Option], most: int) -> bool:
    return 0 < len(options) <= most and _unique(option.id for option in options)


def _unique(ids: Iterable[str]) -> bool:
    seen: set[str] = set()
    for one in ids:
        if one in seen:
            return False
        seen.add(one)
    return True


def _body(ask: Ask, cleaner: _Cleaner, catalogue: Catalogue) -> Body | None:
    """The answering part of a card that fits; None when it has nothing left to tap."""
    match ask.kind:
        case "permission":
            return _permission(ask, cleaner, catalogue)
        case "choice":
            return _choice(ask, cleaner, catalogue)
        case "text":
            return TextBody(input=_text_input(ask.max_length, catalogue), send=catalogue["send"])
        case _:
            return _form(ask, cleaner, catalogue)


def _permission(ask: Ask, cleaner: _Cleaner, catalogue: Catalogue) -> PermissionBody | None:
    labels = [cleaner(option.label, LABEL_LIMIT) for option in ask.options]
    has_always = any(option.role == "always" for option in ask.options)
    # The tool's name is shown only on the always button's second tap, so only then is it text
    # the person must see whole.
    tool = cleaner(ask.tool.name, LABEL_LIMIT) if ask.tool is not None and has_always else ""
    offer_always = bool(tool.strip()) and not cleaner.shortened  # A5, A6
    buttons = [
        PermissionButton(
            option_id=option.id,
            role=str(option.role),
            label=catalogue[ROLE_KEYS[str(option.role)]],
            secondary=label if label.strip() else None,
            confirm_label=catalogue["always_confirm"] if option.role == "always" else None,
            tool_name=tool if option.role == "always" else None,
        )
        for option, label in zip(ask.options, labels, strict=True)
        if option.role != "always" or offer_always
    ]
    return PermissionBody(buttons=buttons) if buttons else None


def _choice(ask: Ask, cleaner: _Cleaner, catalogue: Catalogue) -> ChoiceBody | None:
    rows = _rows(ask.options, cleaner)
    if rows is None:
        return None
    if ask.multiple:
        return ChoiceBody(
            rows=rows, multiple=True, hint=catalogue["pick_any"], send=catalogue["send"]
        )
    return ChoiceBody(rows=rows, multiple=False)


def _form(ask: Ask, cleaner: _Cleaner, catalogue: Catalogue) -> FormBody | None:
    fields: list[FieldView] = []
    for field in ask.fields:
        label = cleaner(field.label, LABEL_LIMIT)
        if not label.strip():
            return None
        options: list[ChoiceRow] = []
        if field.kind == "select":
            rows = _rows(field.options, cleaner)
            if rows is None:
                return None
            options = rows
        fields.append(
            FieldView(
                field_id=field.id,
                kind=field.kind,
                label=label,
                required=field.required,
                required_label=catalogue["required"] if field.required else None,
                input=_text_input(field.max_length, catalogue) if field.kind == "text" else None,
                options=options,
            )
        )
    return FormBody(fields=fields, send=catalogue["send"])


def _rows(options: list[Option], cleaner: _Cleaner) -> list[ChoiceRow] | None:
    """Rows for ``options``; None when one would read blank, for then it cannot be told
    apart."""
    rows = [
        ChoiceRow(option_id=option.id, label=cleaner(option.label, LABEL_LIMIT))
        for option in options
    ]
    return rows if all(row.label.strip() for row in rows) else None


def _text_input(max_length: int | None, catalogue: Catalogue) -> TextInput:
    limit = text_limit(max_length)  # A4, the same limit the answer is checked against
    return TextInput(
        limit=limit,
        counter=catalogue.fmt("text_counter", n=0, limit=limit),
        counter_template=catalogue.fmt("text_counter", n="{n}", limit=limit),
    )


# Catalogue keys of T1's rows, by outcome.
_LINES: Final[Mapping[TapOutcome, str]] = {
    TapOutcome.DECIDED: "t_decided",
    TapOutcome.EXPIRED: "t_expired",
    TapOutcome.ANSWERED: "t_answered",
    TapOutcome.NOT_OPEN: "t_not_open",
    TapOutcome.CHANGED: "t_changed",
    TapOutcome.UNCERTAIN: "t_uncertain",
    TapOutcome.REFUSED: "t_refused",
    TapOutcome.OLDER_COLLIE: "t_older_collie",
}
# A retry that finds the ask closed or changed cannot tell whether its first send landed.
_CLOSED_OR_CHANGED: Final = frozenset(
    {
        TapOutcome.DECIDED,
        TapOutcome.EXPIRED,
        TapOutcome.ANSWERED,
        TapOutcome.NOT_OPEN,
        TapOutcome.CHANGED,
    }
)
# Outcomes after which the ask is still open to a new tap: read the new text (changed), or
# read Collie's reason and answer otherwise (refused; nothing reached the agent).
_STILL_OPEN: Final = frozenset({TapOutcome.CHANGED, TapOutcome.REFUSED})


def _outcome(state: CardState, catalogue: Catalogue, redact: Redact | None) -> OutcomeLine:
    """The line a card shows after a tap (spec T1; R2's frozen card)."""
    outcome = TapOutcome(state.outcome)
    if outcome is TapOutcome.ACCEPTED:
        return OutcomeLine(
            outcome=outcome, request_id=state.request_id, line=None, closed=True, frozen=True
        )
    reason = clean(state.reason or "", TITLE_LIMIT, redact=redact).text.strip()
    if state.retry and outcome in _CLOSED_OR_CHANGED:
        line = catalogue["t_maybe_applied"]
        frozen = True
    else:
        if reason and outcome in (TapOutcome.REFUSED, TapOutcome.NOT_OPEN):
            line = reason
        else:
            line = catalogue[_LINES[outcome]]
        frozen = outcome not in _STILL_OPEN
    return OutcomeLine(
        outcome=outcome,
        request_id=state.request_id,
        line=line,
        closed=False,
        frozen=frozen,
        retry_label=catalogue["t_retry"] if outcome is TapOutcome.UNCERTAIN else None,
    )


def outcome_line(
    state: CardState, catalogue: Catalogue, redact: Redact | None = None
) -> OutcomeLine:
    """What a card says after the tap ``state`` (spec T1, R2), for the answer's response."""
    return _outcome(state, catalogue, redact)
