"""An agent's conversation list (spec L1–L8, X1, R5): rows, groups and footer. Pure."""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import quote

from msgspec import Struct

from collie_gateway.core.cleaning import TITLE_LIMIT, clean
from collie_gateway.core.mirror import is_waiting
from collie_gateway.strings import Catalogue
from collie_gateway.views.clock import relative_time
from wire.messages import Conversation, Time, known_state

PAGE_SIZE = 100  # spec L6: each "Load more" reads the next 100


class ReadStatus(enum.StrEnum):
    """How the last read of the closed conversations went (the footers of L6)."""

    OK = "ok"
    NO_LIST = "no_list"  # the agent keeps no list
    NO_ANSWER = "no_answer"  # the agent did not answer the read
    FAILED = "failed"  # the read failed in transfer
    VERSION = "version"  # refused for its wire version
    UNAUTHORIZED = "unauthorized"  # the agent refused the gateway's token (D6)


_FOOTER_KEYS = {
    ReadStatus.NO_LIST: "footer_no_list",
    ReadStatus.NO_ANSWER: "footer_no_answer",
    ReadStatus.FAILED: "footer_failed",
    ReadStatus.UNAUTHORIZED: "agent_unauthorized",
}


@dataclass(slots=True)
class ClosedRead:
    """The closed conversations as last read (kept when a later read fails, L8)."""

    rows: list[Conversation] = field(default_factory=list)
    next_cursor: str | None = None
    status: ReadStatus = ReadStatus.OK
    drawn: bool = False  # at least one read succeeded


class ListRow(Struct, kw_only=True):
    """One conversation (L3): title, status mark, last activity, the line below.

    Attributes:
        conversation_id: The conversation.
        title: Its title ("Untitled conversation" when it has none).
        status: The status mark: `waiting`, `running`, `idle`, `closed` …
        updated_at: Its last activity.
        time_label: The last activity in words, relative to now.
        line: The line below: the waiting question, else the agent's subtitle; null: none.
        waiting: Whether it waits for the person (such rows come first, L2).
        open_asks: How many asks wait in it; null (not 0) when it waits for nothing, so the phone
            shows no count (L3).
        closed: Whether it is closed.
        href: The path of its chat.
        reopen: The Reopen button's words on a closed row (L4); else null.
    """

    conversation_id: str
    title: str
    status: str
    updated_at: Time
    time_label: str
    line: str | None
    waiting: bool
    open_asks: int | None
    closed: bool
    href: str
    reopen: str | None = None


class Footer(Struct, kw_only=True):
    """The list's footer (L6); ``href`` reads the next page for "Load more".

    Attributes:
        kind: `load_more`, `no_list`, `no_answer`, `failed`, `version` (L6) or
            `unauthorized` (the agent refused the gateway's token, D6).
        text: The footer's words.
        href: For `load_more`: the path reading the next page (with its cursor); else null.
    """

    kind: str
    text: str
    href: str | None = None


class ConversationList(Struct, kw_only=True):
    """``GET /api/v1/agents/{agent}/conversations``.

    Attributes:
        agent: The agent's name.
        warning: R5's box when the agent speaks another wire version; else null.
        rows: The open conversations: waiting first, then newest activity first (L2).
        closed_label: "Closed" above the closed rows; null when there are none.
        closed: The closed conversations (read from the agent, L5); null when there are none.
        footer: The footer (L6); null when there is nothing to say.
        new: The path of the New page (N1); null when refused for its wire version (R5).
        event_id: The newest live-stream event this view includes: open the stream with
            `Last-Event-ID: <event_id>` to get every later change, none twice. Null before the
            gateway published any event.
    """

    agent: str
    warning: str | None
    rows: list[ListRow]
    closed_label: str | None
    closed: list[ListRow] | None
    footer: Footer | None
    new: str | None
    event_id: str | None = None  # the live stream's newest event this view includes


@dataclass(frozen=True, slots=True)
class ListContext:
    """What every row needs besides its conversation."""

    agent: str
    agent_subtitle: str | None
    features: Collection[str]
    catalogue: Catalogue
    now: datetime
    redact: Callable[[str], str] | None


def list_row(conv: Conversation, ctx: ListContext) -> ListRow:
    """One row, worded as L3 says, titles and subtitles masked (X1)."""
    cat = ctx.catalogue
    title = clean(conv.title, TITLE_LIMIT, redact=ctx.redact).text if conv.title else ""
    waiting = conv.state != "closed" and is_waiting(conv)
    if conv.asks and conv.state != "closed":
        question = conv.asks[0].title or conv.asks[0].text
        line: str | None = clean(question, TITLE_LIMIT, redact=ctx.redact).text
    else:
        subtitle = conv.subtitle or ctx.agent_subtitle
        line = clean(subtitle, TITLE_LIMIT, redact=ctx.redact).text if subtitle else None
    closed = conv.state == "closed"
    return ListRow(
        conversation_id=conv.id,
        title=title if title.strip() else cat["list_untitled"],
        status=known_state(conv.state),
        updated_at=conv.updated_at,
        time_label=relative_time(conv.updated_at, ctx.now, cat),
        line=line,
        waiting=waiting,
        open_asks=len(conv.asks) if waiting and conv.asks else None,
        closed=closed,
        href=f"{_agent_path(ctx.agent)}/conversations/{quote(conv.id, safe='')}",
        reopen=cat["list_reopen"] if closed and "reopen" in ctx.features else None,
    )


def order_open(convs: Collection[Conversation]) -> list[Conversation]:
    """L2: waiting first, then the other open ones; newest activity first within each."""
    return sorted(convs, key=lambda c: (not is_waiting(c), -c.updated_at.timestamp(), c.id))


def build_list(
    open_convs: Collection[Conversation],
    closed: ClosedRead | None,
    ctx: ListContext,
    *,
    version_warning: str | None = None,
) -> ConversationList:
    """The whole first page. ``closed`` is None for an agent never asked (L7)."""
    cat = ctx.catalogue
    rows = [list_row(c, ctx) for c in order_open(open_convs)]
    closed_rows: list[ListRow] | None = None
    footer: Footer | None = None
    if version_warning is not None:
        footer = Footer(kind=ReadStatus.VERSION.value, text=version_warning)
    elif closed is not None:
        if closed.drawn:
            closed_rows = [list_row(c, ctx) for c in closed.rows]
        footer = footer_for(closed, ctx)
    return ConversationList(
        agent=ctx.agent,
        warning=version_warning,
        rows=rows,
        closed_label=cat["list_closed"] if closed_rows else None,
        closed=closed_rows or None,
        footer=footer,
        # G1: the New page only for an agent that declares starters.
        new=(
            f"{_agent_path(ctx.agent)}/new"
            if version_warning is None and "starters" in ctx.features
            else None
        ),
    )


def footer_for(closed: ClosedRead, ctx: ListContext) -> Footer | None:
    """L6's footer for the last read of the closed conversations."""
    if closed.status is ReadStatus.OK:
        if closed.next_cursor is None:
            return None
        return Footer(
            kind="load_more",
            text=ctx.catalogue["footer_load_more"],
            href=(f"{_agent_path(ctx.agent)}/closed?cursor={quote(closed.next_cursor, safe='')}"),
        )
    key = _FOOTER_KEYS.get(closed.status)
    return Footer(kind=closed.status.value, text=ctx.catalogue[key]) if key else None


def _agent_path(agent: str) -> str:
    """The API path of an agent, its name URL-encoded (a name may hold spaces, "?", "#"…)."""
    return "/api/v1/agents/" + quote(agent, safe="")
