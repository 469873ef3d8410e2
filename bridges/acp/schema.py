"""The part of the Agent Client Protocol the bridge speaks, as msgspec types (camelCase on the
wire). Every struct ignores fields it does not name, so a newer agent still decodes."""

from __future__ import annotations

from typing import Any, Final

import msgspec

PROTOCOL_VERSION: Final = 1


class _Base(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    pass


class Implementation(_Base, frozen=True, kw_only=True):
    """``agentInfo``: who the agent says it is."""

    name: str
    title: str | None = None
    version: str | None = None


class SessionCapabilities(_Base, frozen=True, kw_only=True):
    """Which optional session methods the agent offers (``{}`` means yes, absent no)."""

    resume: dict[str, Any] | None = None
    close: dict[str, Any] | None = None


class AgentCapabilities(_Base, frozen=True, kw_only=True):
    """What the agent declares at ``initialize``."""

    load_session: bool = False
    session_capabilities: SessionCapabilities | None = None


class InitializeResult(_Base, frozen=True, kw_only=True):
    """The answer to ``initialize``."""

    protocol_version: int
    agent_capabilities: AgentCapabilities = msgspec.field(default_factory=AgentCapabilities)
    agent_info: Implementation | None = None

    @property
    def can_resume(self) -> bool:
        """Whether ``session/resume`` is offered."""
        caps = self.agent_capabilities.session_capabilities
        return caps is not None and caps.resume is not None

    @property
    def can_close(self) -> bool:
        """Whether ``session/close`` is offered."""
        caps = self.agent_capabilities.session_capabilities
        return caps is not None and caps.close is not None


class NewSessionResult(_Base, frozen=True, kw_only=True):
    """The answer to ``session/new``."""

    session_id: str


class PromptResult(_Base, frozen=True, kw_only=True):
    """The answer to ``session/prompt``: why the turn ended."""

    stop_reason: str


class ContentBlock(_Base, frozen=True, kw_only=True):
    """A content block (text, image, audio, resource_link, resource)."""

    type: str
    text: str | None = None
    uri: str | None = None
    name: str | None = None
    resource: dict[str, Any] | None = None


class ToolCallContent(_Base, frozen=True, kw_only=True):
    """One entry of a tool call's ``content``: ``content`` (a block), ``diff`` or
    ``terminal``."""

    type: str
    content: ContentBlock | None = None
    path: str | None = None
    old_text: str | None = None
    new_text: str | None = None
    terminal_id: str | None = None


class ToolCallFields(_Base, frozen=True, kw_only=True):
    """A ``tool_call`` or ``tool_call_update`` (every field but the id may be absent)."""

    tool_call_id: str
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    content: list[ToolCallContent] | None = None
    raw_input: Any = None
    raw_output: Any = None


class PlanEntry(_Base, frozen=True, kw_only=True):
    """One step of a plan."""

    content: str
    status: str = "pending"


class SessionUpdate(_Base, frozen=True, kw_only=True):
    """A ``session/update``'s ``update``: ``sessionUpdate`` names the kind; the other fields
    are read per kind (``bridges.acp.mapping``)."""

    session_update: str
    content: Any = None
    message_id: str | None = None
    tool_call_id: str | None = None
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    raw_input: Any = None
    raw_output: Any = None
    entries: list[PlanEntry] | None = None
    updated_at: str | None = None


class SessionNotification(_Base, frozen=True, kw_only=True):
    """The params of ``session/update``."""

    session_id: str
    update: SessionUpdate


class PermissionOption(_Base, frozen=True, kw_only=True):
    """An option of ``session/request_permission``: its ``kind`` says what it does."""

    option_id: str
    name: str
    kind: str


class RequestPermissionParams(_Base, frozen=True, kw_only=True):
    """The params of ``session/request_permission``."""

    session_id: str
    tool_call: ToolCallFields
    options: list[PermissionOption]


class ElicitationSchema(_Base, frozen=True, kw_only=True):
    """A form's requested schema: a flat object of primitive properties."""

    type: str = "object"
    title: str | None = None
    description: str | None = None
    properties: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    required: list[str] = msgspec.field(default_factory=list)


class ElicitationParams(_Base, frozen=True, kw_only=True):
    """The params of ``elicitation/create`` (form or url mode; session or request scope)."""

    mode: str
    message: str = ""
    session_id: str | None = None
    tool_call_id: str | None = None
    request_id: int | str | None = None
    requested_schema: ElicitationSchema | None = None
    url: str | None = None


class CancelRequestParams(_Base, frozen=True, kw_only=True):
    """The params of ``$/cancel_request``."""

    request_id: int | str


def client_capabilities() -> dict[str, Any]:
    """What the bridge offers the agent: no files, no terminals, form elicitation only."""
    return {
        "fs": {"readTextFile": False, "writeTextFile": False},
        "terminal": False,
        "elicitation": {"form": {}},
    }
