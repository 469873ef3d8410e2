"""The SDK's pure decisions: what a reply does to an ask, an ask's version when raised again,
a command's refusal, a conversation's state, an answer fitted to 8 MiB. No I/O and no clock
read here (``now`` is passed in); the shells around it are ``_store``, ``_state``,
``_commands`` and ``_server``."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Container, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final, TypeVar

import msgspec
from msgspec.structs import replace

from wire.answers import check_answer
from wire.errors import LocalWireError, RemoteWireError
from wire.messages import (
    MAX_BODY,
    MAX_ID,
    Answer,
    Ask,
    AskResolved,
    Button,
    CommandResult,
    Conversation,
    Item,
    Reply,
    ReplyResult,
    Starter,
    decode,
    encode,
)

S = TypeVar("S")
AnswerCheck = Callable[[Ask, Answer], str | None]

KEEP_REQUESTS: Final = timedelta(days=30)  # how long a command's first result is kept
LEFT_OUT: Final = "Earlier items were left out: the conversation is too long to send whole."
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_US: Final = timedelta(microseconds=1)
# How an ask ended -> the outcome a later reply gets (wire/SPEC.md §12.1).
_OUTCOME_OF: Final = {"answered": "answered", "decided": "decided", "expired": "expired"}


class Resolution(msgspec.Struct, frozen=True, kw_only=True):
    """How an ask ended: ``how`` is answered, decided, expired or stopped; ``answer`` is the
    person's (answered) or the agent's own (decided, when it gave one)."""

    how: str
    at: datetime
    answer: Answer | None = None
    request_id: str | None = None


# --- values --------------------------------------------------------------------------------


def aware(at: datetime) -> datetime:
    """``at`` with a zone: a naive datetime is taken as UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def us(at: datetime) -> int:
    """Microseconds since the epoch (the state file's time columns)."""
    return (aware(at) - _EPOCH) // _US


def requests_cutoff(now: datetime) -> int:
    """The time (:func:`us`) before which a command's recorded result is forgotten."""
    return us(now - KEEP_REQUESTS)


def checked(value: S) -> S:
    """``value`` if it keeps the wire's limits (a decoder would take it), else raise.

    Raises:
        LocalWireError: a limit is broken.
    """
    try:
        decode(encode(value), type(value))
    except (RemoteWireError, UnicodeEncodeError) as exc:
        raise LocalWireError(f"{type(value).__name__} breaks the wire's limits: {exc}") from None
    return value


def derived_id(base: str, key: str) -> str:
    """``base:key``, or a digest of it when that is longer than an id may be."""
    whole = f"{base}:{key}"
    if len(whole) <= MAX_ID:
        return whole
    return "f-" + hashlib.sha256(whole.encode()).hexdigest()


# --- asks ----------------------------------------------------------------------------------


def ask_content(ask: Ask) -> Ask:
    """What an ask asks, without its version and time: equal means "the same ask"."""
    return replace(ask, version=0, raised_at=None)


def changed_in_run(existing: Ask, ask: Ask) -> Ask | None:
    """``ask`` raised again while ``existing`` (its id) is open in this run: ``None`` when
    the content is the same, else the new content one version on."""
    if ask_content(existing) == ask_content(ask):
        return None
    return replace(ask, version=existing.version + 1, raised_at=existing.raised_at)


def reraised(stored: Ask, ask: Ask) -> Ask:
    """``ask`` raised again over ``stored``, kept open from a run before: the same version
    when the content is the same, else one more; raised when it first was."""
    same = ask_content(stored) == ask_content(ask)
    return replace(
        ask, version=stored.version if same else stored.version + 1, raised_at=stored.raised_at
    )


def is_due(ask: Ask, now: datetime) -> bool:
    """Whether the ask's deadline has passed."""
    return ask.deadline is not None and aware(ask.deadline) <= now


def not_open(resolution: Resolution | None) -> ReplyResult:
    """A reply's outcome when its ask is not open: ended as ``resolution``, or unknown."""
    if resolution is None:
        return ReplyResult(outcome="not_open")
    if resolution.how in _OUTCOME_OF:
        return ReplyResult(outcome=_OUTCOME_OF[resolution.how])
    return ReplyResult(outcome="not_open", reason=resolution.how)


def judge_reply(
    ask: Ask, reply: Reply, now: datetime, own_check: AnswerCheck | None
) -> ReplyResult | str | None:
    """A reply to the open ``ask`` (wire/SPEC.md §12.1): ``None`` when it fits, an outcome
    when it cannot be taken (``expired``: the ask must be resolved so), or the sentence
    that refuses its answer (``400 bad_request``)."""
    if is_due(ask, now):
        return ReplyResult(outcome="expired")
    if reply.version != ask.version:
        return ReplyResult(outcome="changed")
    problem = check_answer(ask, reply.answer)
    if problem is None and own_check is not None:
        problem = own_check(ask, reply.answer)
    return problem


def answered(reply: Reply, now: datetime) -> Resolution:
    """The resolution of an ask a reply answered."""
    return Resolution(how="answered", at=now, answer=reply.answer, request_id=reply.request_id)


def forwarded(outcome: ReplyResult, reply: Reply, now: datetime) -> Resolution | None:
    """What the outcome an ``on_reply`` handler gave does to the open ask: ``accepted``
    answers it with the reply; ``answered``, ``decided`` or ``expired`` end it so (another
    answer won); anything else leaves it open (``None``)."""
    if outcome.outcome == "accepted":
        return answered(reply, now)
    if outcome.outcome in _OUTCOME_OF:
        return Resolution(how=outcome.outcome, at=now)
    return None


def ask_resolved(ask_id: str, conversation_id: str, resolution: Resolution) -> AskResolved:
    """The ``ask.resolved`` event of an ask that ended as ``resolution``."""
    return AskResolved(
        ask_id=ask_id,
        conversation_id=conversation_id,
        how=resolution.how,
        request_id=resolution.request_id,
        at=resolution.at,
    )


# --- conversations -------------------------------------------------------------------------


def derived_state(*, asks_open: bool, explicit: str | None, running: bool) -> str:
    """A conversation's state: ``waiting`` while asks are open, else the agent's own state,
    else ``working`` while a turn runs, else ``idle``."""
    if asks_open:
        return "waiting"
    if explicit is not None:
        return explicit
    return "working" if running else "idle"


def next_item_id(count: int, taken: Container[str]) -> str:
    """The id of a new item after ``count``: ``i<n>``, the first not ``taken``."""
    seq = count
    while f"i{seq}" in taken:
        seq += 1
    return f"i{seq}"


def finished(items: Iterable[Item], now: datetime) -> list[tuple[int, Item]]:
    """Each item still being written (by its index), made final: its writer stopped."""
    return [
        (seq, replace(item, final=True, at=item.at or now))
        for seq, item in enumerate(items)
        if not item.final
    ]


def fit(conv: Conversation) -> Conversation:
    """``conv`` as one answer can carry it: over 8 MiB, its oldest items are left out and a
    notice says so (wire/SPEC.md §4)."""
    items = conv.items or []
    if len(encode(conv)) <= MAX_BODY:
        return conv
    taken = {item.id for item in items}
    notice_id = next(f"left-out-{n}" for n in range(len(items) + 1) if f"left-out-{n}" not in taken)
    notice = Item(id=notice_id, kind="notice", text=LEFT_OUT)
    budget = MAX_BODY - len(encode(replace(conv, items=[notice])))
    kept: list[Item] = []
    for item in reversed(items):
        budget -= len(encode(item)) + 1  # and its comma
        if budget < 0:
            break
        kept.append(item)
    return replace(conv, items=[notice, *reversed(kept)])


def newest_first(convs: Iterable[Conversation]) -> list[Conversation]:
    """Open conversations as ``GET /conversations?state=open`` lists them."""
    return sorted(convs, key=lambda c: (aware(c.updated_at), c.id), reverse=True)


def next_cursor(rows: Sequence[tuple[int, str]], limit: int) -> str | None:
    """The cursor of the page after ``limit`` of ``rows`` (``updated_us``, id), read one
    past the page; ``None`` when there is no more."""
    if len(rows) <= limit:
        return None
    at, conversation_id = rows[limit - 1]
    return f"{at}:{conversation_id}"


# --- commands ------------------------------------------------------------------------------


def accepted(conversation_id: str) -> CommandResult:
    """A command taken."""
    return CommandResult(outcome="accepted", conversation_id=conversation_id)


def refused(reason: str) -> CommandResult:
    """A command refused for ``reason``."""
    return CommandResult(outcome="refused", reason=reason)


NO_CONVERSATION: Final = CommandResult(outcome="not_found", reason="conversation")
MOVED_ON: Final = CommandResult(outcome="moved_on")


def turn_refusal(*, supported: bool, turn: int, current: int) -> CommandResult | None:
    """A stop or a button's tap: the feature undeclared, or the turn moved on."""
    if not supported:
        return refused("unsupported")
    return MOVED_ON if turn != current else None


def button_refusal(button: Button | None) -> CommandResult | None:
    """A tap on ``button`` (``None``: the conversation has no such button)."""
    if button is None:
        return CommandResult(outcome="not_found", reason="button")
    if button.busy or button.disabled:
        return refused("busy" if button.busy else "disabled")
    return None


def steer_refusal(
    *, supported: bool, running: bool, turn: int | None, current: int
) -> CommandResult | None:
    """A steering message: the feature undeclared, or no turn runs, or another turn does."""
    if not supported:
        return refused("unsupported")
    if not running or (turn is not None and turn != current):
        return MOVED_ON
    return None


def start_refusal(
    *, supported: bool, starters: Sequence[Starter], starter_id: str
) -> CommandResult | None:
    """``POST /conversations``: the feature undeclared, or no such starter."""
    if not supported:
        return refused("unsupported")
    if all(s.id != starter_id for s in starters):
        return CommandResult(outcome="not_found", reason="starter")
    return None
