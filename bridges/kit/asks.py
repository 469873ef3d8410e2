"""Typed asks: what a bridge asks the person, on the wire's types (``Option``, ``Argument``,
``FormField``, ``ToolRef``), raised or changed in one call.

Usage::

    draft = asks.permission("Deploy to prod?", arguments=[Argument(name="tag", value="v2")])
    handle = await draft.raise_in(conv, id="deploy-v2")
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TypedDict, Unpack

from wire.messages import Argument, FormField, Option, ToolRef

if TYPE_CHECKING:  # the SDK's handles, used through their methods only: this module is pure
    from wire.agent import AskHandle, ConversationHandle

ALLOW_DENY: Final = (
    Option(id="allow", label="Allow", role="allow"),
    Option(id="deny", label="Deny", role="deny"),
)


@dataclass(frozen=True)
class AskDraft(Mapping[str, Any]):
    """An ask's content before it is raised: ``wire.messages.Ask`` without its id,
    conversation, version and times. It reads as a mapping too: the keywords of
    ``ConversationHandle.ask`` (``draft["title"]``)."""

    kind: str
    title: str = ""
    text: str = ""
    tool: ToolRef | None = None
    options: list[Option] = field(default_factory=list)
    multiple: bool = False
    max_length: int | None = None
    fields: list[FormField] = field(default_factory=list)
    arguments: list[Argument] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    irreversible: bool = False

    def __getitem__(self, key: str) -> Any:
        if key not in _KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_KEYS)

    def __len__(self) -> int:
        return len(_KEYS)

    async def raise_in(
        self, conv: ConversationHandle, *, id: str | None = None, deadline: datetime | None = None
    ) -> AskHandle:
        """Raise it in ``conv`` (``ask.raised``); a stable ``id`` survives restarts.

        Raises:
            LocalWireError: the conversation is closed, or a limit of the wire is broken.
        """
        return await conv.ask(id=id, deadline=deadline, **self)

    async def change(self, handle: AskHandle) -> None:
        """Make the open ``handle`` ask this (its kind stays): ``ask.changed``.

        Raises:
            LocalWireError: the ask is not open, or a limit of the wire is broken.
        """
        await handle.change(**{key: value for key, value in self.items() if key != "kind"})


_KEYS: Final = tuple(f.name for f in fields(AskDraft))


class About(TypedDict, total=False):
    """The call an ask is about (S1): its tool, its arguments with their origins, why it
    waits for the person, whether it can be undone."""

    tool: ToolRef | None
    arguments: list[Argument]
    reasons: list[str]
    irreversible: bool


def permission(
    title: str, options: Sequence[Option] = ALLOW_DENY, *, text: str = "", **about: Unpack[About]
) -> AskDraft:
    """May the step run? ``options`` carry the roles the phone answers with (allow, deny …);
    ``text`` is shown under the title."""
    return AskDraft(kind="permission", title=title, text=text, options=list(options), **about)


def choice(
    title: str,
    options: Sequence[Option],
    *,
    text: str = "",
    multiple: bool = False,
    **about: Unpack[About],
) -> AskDraft:
    """Pick one of ``options`` (any number of them with ``multiple``)."""
    return AskDraft(
        kind="choice", title=title, text=text, options=list(options), multiple=multiple, **about
    )


def text(
    title: str, *, text: str = "", max_length: int | None = None, **about: Unpack[About]
) -> AskDraft:
    """A line of text, at most ``max_length`` characters."""
    return AskDraft(kind="text", title=title, text=text, max_length=max_length, **about)


def form(
    title: str, fields: Sequence[FormField], *, text: str = "", **about: Unpack[About]
) -> AskDraft:
    """Fill in ``fields``."""
    return AskDraft(kind="form", title=title, text=text, fields=list(fields), **about)
