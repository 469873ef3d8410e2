"""A conversation's chat (spec C1–C6, R3, A1, A8) with its header and bar. Pure."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from msgspec import Struct

from collie_gateway.core.answers import CardState
from collie_gateway.core.cleaning import LABEL_LIMIT, TEXT_LIMIT, TITLE_LIMIT, ShownText, clean
from collie_gateway.core.markdown import real_host, render, safe_link
from collie_gateway.core.notes import Note
from collie_gateway.strings import Catalogue
from collie_gateway.views.bar import Bar, Header, Menu, build_bar, build_header, build_menu
from collie_gateway.views.cards import CardList, build_cards
from collie_gateway.views.clock import as_utc
from wire.messages import Conversation, Item, Time

ECHO_WINDOW = timedelta(seconds=30)  # spec C5: match by text within 30 s
LINE_LIFETIME = timedelta(minutes=10)  # spec C5: an unechoed line stops showing
CHAT_TEXT_LIMIT = 200_000  # ours: what one chat item shows at most, then "…"
SAY_PREFIX = "say_"  # the catalogue keys an agent may name in ``Item.words`` (wire §7.11)


# Rendering is pure and can cost a lot for a long item: each final text is rendered once.
_render = functools.lru_cache(maxsize=2048)(render)


class LineState(enum.StrEnum):
    """The person's own line (spec C4)."""

    SENDING = "sending"
    SENT = "sent"
    NOT_CONFIRMED = "not_confirmed"
    NOT_SENT = "not_sent"


@dataclass(frozen=True, slots=True)
class MyLine:
    """A line the person sent that the agent has not echoed yet."""

    request_id: str
    text: str
    sent_at: datetime
    state: LineState
    steer: bool = False
    after_item: str | None = None  # the newest item when it was sent: where it is drawn


class ChatLine(Struct, kw_only=True, omit_defaults=True):
    """One line of the chat.

    Attributes:
        kind: The item's kind (`user`, `reply`, `thinking`, `tool`, `code`, `markdown`, `link`,
            `notice`), or `receipt` / `stopped` for the gateway's own lines.
        id: The item's id (or the note's).
        text: Its text (redacted, cut to the limits).
        html: Markdown rendered as HTML (C2), for `markdown` and `reply`.
        final: False while the item is still being written (deltas follow).
        cursor: Show a cursor after the text (being written).
        at: When the item was written.
        language: A code item's language.
        url: A link item's URL (https only).
        label: A link item's words.
        tool: A tool item's tool name.
        status: A tool item's status (`running`, `done`, `failed`).
        output: A tool item's output.
        mine: A line the person sent from this phone.
        clock: Show a clock: the person's line is being sent.
        state: The person's line's state: `sending`, `sent`, `not_confirmed`, `not_sent`.
        state_label: Its words (C4).
        request_id: The request id the person's line was sent with.
        host: A link whose label may lie: its real host, shown beside it.
        shortened: "Text shortened" when the text was cut at the chat's text limit; null
            otherwise.
        call_id: A tool line's tool call id: the cards of asks about it sit under it (A1).
    """

    kind: str
    id: str
    text: str | None = None
    html: str | None = None
    final: bool = True
    cursor: bool = False
    at: Time | None = None
    language: str | None = None
    url: str | None = None
    label: str | None = None
    host: str | None = None  # a link whose label may lie: its real host, shown beside it
    tool: str | None = None
    call_id: str | None = None  # a tool line's call id: the card of an ask about it follows (A1)
    status: str | None = None
    output: str | None = None
    mine: bool = False
    clock: bool = False
    state: str | None = None
    state_label: str | None = None
    request_id: str | None = None
    shortened: str | None = None  # "Text shortened": the text was cut at CHAT_TEXT_LIMIT


class Composer(Struct, kw_only=True):
    """The composer: "Sent" once the agent took the last message; text given back on refusal.

    Attributes:
        status: "Sent" once the agent took the last message; else null.
        text: Text given back after a refusal; else null.
    """

    status: str | None = None
    text: str | None = None


class Chat(Struct, kw_only=True):
    """``GET /api/v1/agents/{agent}/conversations/{id}``.

    Attributes:
        agent: The agent's name.
        conversation_id: The conversation.
        read_only: A closed conversation: no composer, no bar (L4).
        header: The header (H1, H2).
        lines: The chat's lines, oldest first.
        cards: The open asks' cards.
        bar: The bottom bar; null when read-only.
        menu: The pane menu; null when the agent offers none.
        dots: Whether the agent is working (typing dots).
        composer: The composer's state.
        turn: The newest turn: send it with Stop and buttons (B3).
        event_id: The newest live-stream event this view includes: open the stream with
            `Last-Event-ID: <event_id>` to get every later change, none twice. Null before the
            gateway published any event.
        now: The gateway's clock when the view was built: a client counts deadlines down
            from it (A3).
    """

    agent: str
    conversation_id: str
    read_only: bool
    header: Header
    lines: list[ChatLine]
    cards: CardList
    bar: Bar | None
    menu: Menu | None
    dots: bool
    composer: Composer
    turn: int
    event_id: str | None = None  # the live stream's newest event this view includes
    now: datetime | None = None  # the gateway's clock: a countdown ticks from it (A3)


@dataclass(frozen=True, slots=True)
class ChatContext:
    """What the chat needs besides the conversation."""

    agent: str
    features: Collection[str]
    catalogue: Catalogue
    now: datetime
    redact: Callable[[str], str] | None = None
    agent_subtitle: str | None = None  # the hello's subtitle: H2's last fallback
    # Masks chat items (X1): ``Redactor.mask`` (None: off); uncached, since item texts are
    # long and each is masked once.
    redact_items: Callable[[str], str] | None = None


def match_echo(lines: Iterable[MyLine], item: Item, now: datetime) -> MyLine | None:
    """The pending line a user item echoes: by request id, else by the same text within
    30 s (C5) of the item's time, or of ``now`` when the item carries none."""
    pending = list(lines)
    if item.request_id is not None:
        return next((m for m in pending if m.request_id == item.request_id), None)
    at = as_utc(item.at) if item.at is not None else as_utc(now)
    for mine in pending:
        if mine.text == item.text and abs(at - as_utc(mine.sent_at)) <= ECHO_WINDOW:
            return mine
    return None


def chat_text(text: str) -> ShownText:
    """An item's text as the chat shows it: cleaned, cut past ``CHAT_TEXT_LIMIT``."""
    return ShownText.of(text, CHAT_TEXT_LIMIT)


def item_line(
    item: Item,
    catalogue: Catalogue,
    shown: ShownText | None = None,
    redact: Callable[[str], str] | None = None,
) -> ChatLine:
    """One agent item as the chat shows it (C2, C3). ``shown`` is its text already cleaned
    (the live path keeps it as deltas come); else it is cleaned here.

    A markdown item being written shows its cleaned text, so that deltas add to it exactly,
    and ``html``: its text as last rendered while written (``render_written``, the same
    safe rendering; the live path renders at a bounded rate, so a read shows what the live
    phones were sent); its final text is rendered (once: ``_render`` is cached).

    ``redact`` (``Redactor.mask``, or None: redaction off) masks secrets (X1) in the text, a
    link's label and a tool's name and output. An item still being written shows its text masked as
    it is written (``ShownText.live``: an unfinished word waits, so a secret's characters
    never show); its final text is masked whole."""
    writing = not item.final
    shown = shown if shown is not None else chat_text(item.text)
    text = worded(item, catalogue, redact) or _shown_text(shown, redact, writing=writing)
    line = ChatLine(
        kind=item.kind,
        id=item.id,
        final=item.final,
        cursor=writing and item.kind in ("reply", "thinking", "notice", "markdown"),
        at=None if writing or item.at is None else as_utc(item.at),
        mine=item.kind == "user",
        request_id=item.request_id,
        shortened=catalogue["text_shortened"] if shown.cut else None,
    )
    match item.kind:
        case "markdown" if writing:
            line.text = text
            line.html = shown.rendered
        case "markdown":
            line.html = _render(text)
        case "code":
            line.text = text
            line.language = clean(item.language, LABEL_LIMIT).text if item.language else None
        case "link":
            url = safe_link(item.url or "")
            line.url = url
            line.label = clean(item.label or item.url or "", TITLE_LIMIT, redact=redact).text
            if url is not None:
                line.host = real_host(item.label or item.url or "", url)
        case "tool":
            line.tool = clean(item.name or "", LABEL_LIMIT, redact=redact).text
            line.call_id = item.call_id
            line.status = item.status
            if item.output is not None:
                line.output = clean(item.output, TEXT_LIMIT, multiline=True, redact=redact).text
            line.text = text or None
        case _:
            line.text = text
    return line


def worded(
    item: Item, catalogue: Catalogue, redact: Callable[[str], str] | None = None
) -> str | None:
    """A final item's ``words`` in the catalogue's language: its ``say_`` key's text with the
    arguments cleaned and masked (X1); None when it has none, or the key or an argument is
    not there (the item's own text shows)."""
    words = item.words
    if words is None or not item.final or not words.key.startswith(SAY_PREFIX):
        return None
    try:
        template = catalogue[words.key]
        args = {k: clean(v, LABEL_LIMIT, redact=redact).text for k, v in words.args.items()}
        return template.format(**args)
    except (KeyError, IndexError, ValueError):
        return None


def render_written(shown: ShownText, redact: Callable[[str], str] | None, now: datetime) -> None:
    """C2 while written: render a Markdown item's text so far (masked as it shows, X1) as its
    final text is rendered, and keep it in ``shown`` with ``now``."""
    shown.rendered = render(_shown_text(shown, redact, writing=True))
    shown.rendered_at = now


def _shown_text(shown: ShownText, redact: Callable[[str], str] | None, *, writing: bool) -> str:
    if redact is None:
        return shown.text
    return shown.live(redact) if writing else shown.masked(redact)


def my_line(mine: MyLine, catalogue: Catalogue) -> ChatLine:
    """The person's own line with its clock or state words (C4)."""
    label = {
        LineState.NOT_CONFIRMED: catalogue["chat_not_confirmed"],
        LineState.NOT_SENT: catalogue["chat_not_sent"],
    }.get(mine.state)
    return ChatLine(
        kind="user",
        id=f"pending:{mine.request_id}",
        text=mine.text,
        mine=True,
        clock=mine.state in (LineState.SENDING, LineState.SENT),
        state=mine.state.value,
        state_label=label,
        request_id=mine.request_id,
    )


#: Draws one agent item (``item_line`` with the chat's catalogue and mask); a caller may keep
#: each final item's line and give it again (services/chats.py).
LineOf = Callable[[Item, ShownText | None], ChatLine]


@dataclass(frozen=True, slots=True)
class _Placed:
    """Where the gateway's notes and the person's pending lines go among the items."""

    notes_after: dict[str | None, list[Note]]  # by the item they follow (None: first)
    strays: list[list[Note]]  # notes after an item the chat does not hold: after every item
    mine_after: dict[str | None, list[MyLine]]  # by the item they follow (None: last)
    visible: list[MyLine]  # the person's lines shown, in the order sent


def _place(
    notes: list[Note],
    mine: list[MyLine],
    known: Collection[str],
    echoed: Collection[str],
    now: datetime,
) -> _Placed:
    by_item: dict[str | None, list[Note]] = {}
    for note in notes:
        by_item.setdefault(note.after_item, []).append(note)
    strays = [group for key, group in by_item.items() if key is not None and key not in known]
    # C4: a line is keyed by its request id; once the agent's copy is in, a re-send of the
    # same request id (a phone unsure it arrived) adds no second line.
    visible = [
        m for m in mine if m.request_id not in echoed and now - as_utc(m.sent_at) < LINE_LIFETIME
    ]
    mine_after: dict[str | None, list[MyLine]] = {}
    for m in visible:
        mine_after.setdefault(m.after_item if m.after_item in known else None, []).append(m)
    return _Placed(by_item, strays, mine_after, visible)


def _lines(items: list[Item], placed: _Placed, cat: Catalogue, line_of: LineOf) -> list[ChatLine]:
    """Items in order, each followed by its notes and the person's lines sent after it; the
    notes and lines placed first or after every item around them."""
    lines = _note_lines(placed.notes_after.get(None, []), cat)
    first_mine = placed.mine_after.get(None, [])
    if not items:
        lines.extend(my_line(m, cat) for m in first_mine)
    notes_after, mine_after = placed.notes_after, placed.mine_after
    for item in items:  # a long chat has few notes and lines between its items
        lines.append(line_of(item, None))
        if notes := notes_after.get(item.id):
            lines.extend(_note_lines(notes, cat))
        if mine := mine_after.get(item.id):
            lines.extend(my_line(m, cat) for m in mine)
    for rest in placed.strays:
        lines.extend(_note_lines(rest, cat))
    if items:
        lines.extend(my_line(m, cat) for m in first_mine)
    return lines


def _newest_waits(items: list[Item], placed: _Placed) -> bool:
    """Whether the chat's newest line (as :func:`_lines` orders them, found without drawing
    them) is the person's and waits for the agent: a user item, or a line sending or sent."""
    first_mine = placed.mine_after.get(None, [])
    newest: Item | MyLine | Note | None = None
    if items and first_mine:
        newest = first_mine[-1]
    elif placed.strays:
        newest = placed.strays[-1][-1]
    elif items:
        last = items[-1]
        after = placed.mine_after.get(last.id) or placed.notes_after.get(last.id) or [last]
        newest = after[-1]
    elif first_mine:
        newest = first_mine[-1]
    if isinstance(newest, Item):
        return newest.kind == "user"
    if isinstance(newest, MyLine):
        return newest.state in (LineState.SENDING, LineState.SENT)
    return False


def build_chat(
    conv: Conversation,
    items: list[Item],
    notes: list[Note],
    mine: list[MyLine],
    answer_states: Mapping[str, CardState],
    ctx: ChatContext,
    texts: Mapping[str, ShownText] | None = None,
    *,
    lines: bool = True,
    line_of: LineOf | None = None,
    known: Collection[str] | None = None,
    echoed: Collection[str] | None = None,
) -> Chat:
    """The chat: items in order with notes placed after their item, then the person's
    pending lines; cards (first five, A8), header, bar, dots and composer.

    ``lines=False`` leaves the lines out (what a live ``chat.changed`` carries): the rest
    costs the same whatever the history. ``line_of`` draws an item (default: ``item_line``);
    ``known`` (the items' ids) and ``echoed`` (the request ids of user items), when the
    caller keeps them, spare a pass over the items."""
    cat = ctx.catalogue
    read_only = conv.state == "closed"
    if known is None:
        known = {item.id for item in items}
    if echoed is None:
        echoed = {i.request_id for i in items if i.kind == "user" and i.request_id is not None}
    placed = _place(notes, mine, known, echoed, ctx.now)
    if line_of is None:

        def line_of(item: Item, shown: ShownText | None) -> ChatLine:
            if shown is None and texts is not None:
                shown = texts.get(item.id)
            return item_line(item, cat, shown, ctx.redact_items)

    composer = Composer()
    if placed.visible:
        last = placed.visible[-1]
        if last.state is LineState.SENT:
            composer.status = cat["chat_sent"]
        elif last.state is LineState.NOT_SENT:
            composer.text = last.text
    cards = build_cards(
        conv.asks if not read_only else [],
        agent_name=ctx.agent,
        now=ctx.now,
        catalogue=cat,
        states=answer_states,
        redact=ctx.redact,
    )
    return Chat(
        agent=ctx.agent,
        conversation_id=conv.id,
        read_only=read_only,
        header=build_header(
            conv, ctx.features, cat, redact=ctx.redact, agent_subtitle=ctx.agent_subtitle
        ),
        lines=_lines(items, placed, cat, line_of) if lines else [],
        cards=cards,
        bar=None if read_only else build_bar(conv, ctx.features, cat, redact=ctx.redact),
        menu=build_menu(conv, ctx.features, cat),
        dots=not read_only and _newest_waits(items, placed),
        composer=composer,
        turn=conv.turn,
        now=ctx.now,
    )


def _note_lines(notes: list[Note], catalogue: Catalogue) -> list[ChatLine]:
    """The lines of the notes after one item. An id names the item, the note's place after
    it and its time, so it is unique in the chat and stays the same as notes are added."""
    return [
        ChatLine(
            kind=n.kind,
            id=f"{n.kind}:{n.after_item or ''}:{index}:{n.at.isoformat()}",
            text=n.shown(catalogue),
            at=n.at,
        )
        for index, n in enumerate(notes)
    ]
