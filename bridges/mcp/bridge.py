"""The MCP bridge: a wire-v1 agent (``wire.agent``) on one side, an MCP server of asks on the
other (Streamable HTTP on a loopback port, at ``/mcp``).

Each MCP session is one conversation, titled from the client's name and its working folder
(the ``X-Collie-Cwd`` header the stdio process sends, else the client's first root). Each tool
call is a ``tool`` item naming the call; an ask raised by it sits under that item, and the
person's answer is the call's result. The ask's id is the session's and the JSON-RPC request
id's, so a call retried with the same id waits on the same ask (or gets its recorded result)
and is never a second card. When a session ends (``DELETE``, or a killed client: no request in
flight for ``idle`` seconds) its open asks are resolved ``decided`` with a notice, and the
conversation is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from msgspec import Struct

from bridges.kit import AgentBridge, AskDraft, notice, utc
from bridges.kit.fit import label, safe_id, tool_text
from bridges.mcp import http, tools
from wire.agent import (
    Agent,
    AskHandle,
    ConversationHandle,
    ItemHandle,
    Resolution,
    SendMessage,
    ToolRef,
)
from wire.errors import LocalWireError

log = logging.getLogger(__name__)

SERVER_NAME: Final = "collie"
CWD_HEADER: Final = "x-collie-cwd"
INSTRUCTIONS: Final = (
    "These tools ask the person on their phone (Collie) and block until they answer. Use "
    "ask_permission before a step that needs their consent, ask_choice / ask_text / ask_form "
    "for a decision or input, notify to tell them something without waiting."
)

# What the chat shows (docs/bridges.md, "MCP agents").
SESSION_ENDED: Final = "This MCP session ended: the client disconnected."
ASK_ENDED: Final = (
    "The MCP client stopped waiting for “{title}”: the question ended with it, unanswered."
)
ALWAYS_KEPT: Final = (
    "Always allowed for the rest of this session: {tool} with these same arguments."
)
ALLOWED_BY_RULE: Final = "Allowed by “Always allow” earlier in this session."
RESTARTED: Final = "The MCP bridge restarted: this session ended with it."
NO_MESSAGES: Final = "Messages do not reach an MCP client: it only asks. Answer its cards here."
WAITING: Final = "Waiting for the person's answer on their phone"


@dataclass(eq=False)
class Call:
    """One tools/call that raised an ask (kept for a retry with the same request id)."""

    given: tuple[str, dict[str, Any]]  # the tool and its arguments, as called
    item: ItemHandle
    handle: AskHandle
    done: asyncio.Future[dict[str, Any]]
    gone: asyncio.Task[None] | None = None  # its client stopped waiting: ending its ask


@dataclass(eq=False)
class McpSession:
    """An MCP session: its conversation, its "Always allow" rules, its calls."""

    id: str
    conv: ConversationHandle
    rules: set[str] = field(default_factory=set)
    calls: dict[str, Call] = field(default_factory=dict)
    ended: bool = False


def _json_result(value: dict[str, Any]) -> types.CallToolResult:
    """A tool result: the JSON as text, and as ``structuredContent``."""
    text = json.dumps(value, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=value
    )


def _error(text: str) -> types.CallToolResult:
    """A tool error the model reads (MCP: ``isError``)."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class McpBridge(AgentBridge):
    """Serve MCP tools that ask the person, as a wire-v1 agent kept in ``state_path``.

    Usage::

        bridge = McpBridge(state_path=Path("asks.db"), port=8790)
        await bridge.start()                      # MCP at bridge.url
        await bridge.serve_unix(Path("asks.sock"))
        ...
        await bridge.close()
    """

    protocol = "mcp"

    def __init__(
        self,
        *,
        state_path: Path,
        host: str = "127.0.0.1",
        port: int = 8790,
        now: Callable[[], datetime] | None = None,
        idle: float = 60.0,
        progress_every: float = 10.0,
        ping_interval: float = 15.0,
        expiry_interval: float = 1.0,
    ) -> None:
        self.host = host
        self.port = port
        self.idle = idle
        self.progress_every = progress_every
        super().__init__(
            Agent(
                state_path=state_path,
                runtime="mcp",
                features=["history", "close", "deadlines"],
                now=now or utc,
                ping_interval=ping_interval,
                expiry_interval=expiry_interval,
            )
        )
        self.agent.on_message(self._on_message)
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version="1",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.server.middleware = []  # no tracing spans per message
        self.sessions: dict[str, McpSession] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._uvicorn: http.Uvicorn | None = None
        self._serving: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """Where MCP is served: ``http://127.0.0.1:<port>/mcp``."""
        return f"http://{self.host}:{self.port}{http.PATH}"

    async def start(self) -> None:
        """Open the state file, end what a previous run left open, serve MCP.

        Raises:
            OSError: the port cannot be bound.
        """
        await super().start()
        await self._recover()
        sock = http.listen(self.host, self.port)
        self.port = sock.getsockname()[1]
        asgi = http.app(self.server, idle=self.idle, ended=self._session_gone)
        self._uvicorn = http.server(asgi)
        self._serving = asyncio.create_task(self._uvicorn._serve([sock]), name="mcp-http")
        for _ in range(3000):  # 30 s
            if self._uvicorn.started:
                return
            if self._serving.done():
                break
            await asyncio.sleep(0.01)
        raise OSError(f"MCP could not be served on {self.host}:{self.port}")

    def serving(self) -> str:
        """Where MCP is served."""
        return self.url

    async def close(self) -> None:
        """Stop serving MCP and the agent; close the state file."""
        if self._uvicorn is not None and self._serving is not None:
            self._uvicorn.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await self._serving
        await super().close()

    async def _recover(self) -> None:
        """Sessions do not outlive the process: end what the previous run left open."""
        for conv in self.agent.conversations:
            for handle in list(conv.asks):
                if handle.open:
                    await handle.decide()
            await notice(conv, RESTARTED)
            with contextlib.suppress(LocalWireError):
                await conv.close()

    async def _on_message(self, conv: ConversationHandle, msg: SendMessage) -> None:
        await notice(conv, NO_MESSAGES)

    # --- sessions ----------------------------------------------------------------------

    async def _session(self, ctx: ServerRequestContext[Any, Any]) -> McpSession:
        request = ctx.request
        headers = getattr(request, "headers", None)
        session_id = headers.get("mcp-session-id") if headers is not None else None
        if not session_id:
            raise MCPError(types.INVALID_REQUEST, "This server needs an MCP session")
        found = self.sessions.get(session_id)
        if found is not None:
            return found
        async with self._opening.setdefault(session_id, asyncio.Lock()):
            found = self.sessions.get(session_id)
            if found is not None:
                return found
            cwd = headers.get(CWD_HEADER) if headers is not None else None
            if not cwd:
                cwd = await _first_root(ctx)
            conv = await self.agent.open_conversation(
                safe_id("mcp", session_id), **_title(ctx, unquote(cwd) if cwd else None)
            )
            session = McpSession(session_id, conv)
            self.sessions[session_id] = session
            self._opening.pop(session_id, None)
            return session

    def _session_gone(self, session_id: str) -> None:
        """The session manager discarded a session: end it in the chat (in a task of ours,
        outside the package's cancel scopes)."""
        session = self.sessions.get(session_id)
        if session is not None and not session.ended:
            session.ended = True
            self.agent.spawn(self._end_session(session))

    async def _end_session(self, session: McpSession) -> None:
        for call in list(session.calls.values()):
            await self._call_gone(session, call)
        self.sessions.pop(session.id, None)
        await notice(session.conv, SESSION_ENDED)
        with contextlib.suppress(LocalWireError):
            await session.conv.close()

    def _call_gone(self, session: McpSession, call: Call) -> asyncio.Task[None]:
        """A call whose client stopped waiting: its ask ends ``decided``, with a notice (once;
        the task doing it is returned to every caller)."""
        if call.gone is None:
            call.gone = asyncio.create_task(self._end_call(session, call))
        return call.gone

    async def _end_call(self, session: McpSession, call: Call) -> None:
        if not call.handle.open:
            return
        await call.handle.decide()
        with contextlib.suppress(LocalWireError):
            await call.item.update(status="failed")
        await notice(session.conv, ASK_ENDED.format(title=call.handle.ask.title))

    # --- MCP handlers -------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=spec.name,
                    title=spec.title,
                    description=spec.description,
                    input_schema=spec.schema,
                    annotations=types.ToolAnnotations(
                        title=spec.title, read_only_hint=spec.read_only, open_world_hint=False
                    ),
                )
                for spec in tools.TOOLS.values()
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        spec = tools.TOOLS.get(params.name)
        if spec is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        try:
            call = tools.parse(spec, params.arguments)
        except tools.BadArguments as exc:
            return _error(str(exc))
        session = await self._session(ctx)
        if session.ended:
            return _error("This session has ended; start a new one.")
        if session.conv.closed:  # closed on the phone: the session goes on in it
            await session.conv.reopen()
        if isinstance(call, tools.Notify):
            await notice(session.conv, call.text)
            return _json_result({"outcome": "shown"})
        try:
            return await self._ask(ctx, session, spec.name, call, params.arguments or {})
        except LocalWireError as exc:
            return _error(f"The phone cannot show this ask: {exc}")

    async def _ask(
        self,
        ctx: ServerRequestContext[Any, Any],
        session: McpSession,
        name: str,
        call: Struct,
        given: dict[str, Any],
    ) -> types.CallToolResult:
        request_id = str(ctx.request_id)
        permission = _permission_of(call)
        if permission is not None and permission[0] in session.rules:
            await session.conv.append(
                kind="tool",
                text=tool_text(permission[1]),
                call_id=safe_id("r", request_id),
                name=label(permission[2]) or name,
                status="done",
                output=ALLOWED_BY_RULE,
            )
            return _json_result(_allowed(call))
        found = session.calls.get(request_id)
        if found is None:
            found = await self._raise(session, request_id, name, call, given)
        elif found.given != (name, given):
            return _error(f"Request id {request_id} was used for another call in this session.")
        return _json_result(await self._wait(ctx, session, found))

    async def _raise(
        self, session: McpSession, request_id: str, name: str, call: Struct, given: dict[str, Any]
    ) -> Call:
        conv = session.conv
        permission = _permission_of(call)
        item_name = permission[2] if permission is not None else name
        shown = permission[1] if permission is not None else given
        call_id = safe_id("r", request_id)
        item = await conv.append(
            kind="tool",
            text=tool_text(shown),
            call_id=call_id,
            name=label(item_name) or name,
            status="running",
            defer=True,  # committed with the ask, in one transaction
        )
        deadline = getattr(call, "deadline_seconds", None)
        draft = dataclasses.replace(
            _ask_of(call), tool=ToolRef(call_id=call_id, name=label(item_name) or name)
        )
        handle = await draft.raise_in(
            conv,
            id=safe_id(conv.id, request_id),
            deadline=self.agent.now() + timedelta(seconds=deadline) if deadline else None,
        )
        found = Call((name, given), item, handle, asyncio.get_running_loop().create_future())
        session.calls[request_id] = found
        self.agent.spawn(self._settle(session, request_id, found, call))
        return found

    async def _settle(self, session: McpSession, request_id: str, call: Call, args: Struct) -> None:
        """When the ask ends: the call's result, the item's status, an "Always allow" rule."""
        try:
            resolution = await call.handle.wait()
            value = _result(args, call.handle, resolution)
            permission = _permission_of(args)
            answered = resolution.answer if resolution.how == "answered" else None
            option = answered.option if answered is not None else None
            status = "done" if answered is not None else "failed"
            if permission is not None and answered is not None and option == "deny":
                status = "denied"
            with contextlib.suppress(LocalWireError):  # the answer is committed already
                await call.item.update(status=status, defer=True)
            if permission is not None and option == "always":
                session.rules.add(permission[0])
                await notice(session.conv, ALWAYS_KEPT.format(tool=permission[2]))
            if not call.done.done():
                call.done.set_result(value)
        finally:
            if not call.done.done():
                call.done.set_result(tools.unanswered("decided"))

    async def _wait(
        self, ctx: ServerRequestContext[Any, Any], session: McpSession, call: Call
    ) -> dict[str, Any]:
        """Wait for the call's result, sending progress while the person has not answered;
        a call whose client stops waiting (cancelled) ends its ask."""
        n = 0
        try:
            while True:
                done, _ = await asyncio.wait({call.done}, timeout=self.progress_every)
                if done:
                    return call.done.result()
                n += 1
                with contextlib.suppress(Exception):
                    await ctx.session.report_progress(n, None, WAITING)
        except asyncio.CancelledError:
            self._call_gone(session, call)
            raise


def _permission_of(call: Struct) -> tuple[str, dict[str, Any], str] | None:
    """A permission call's rule key, arguments and tool name; ``None`` for other calls."""
    if isinstance(call, tools.AskPermission):
        return tools.rule_key(call.tool_name, call.arguments), call.arguments, call.tool_name
    if isinstance(call, tools.PermissionPrompt):
        return tools.rule_key(call.tool_name, call.input), call.input, call.tool_name
    return None


def _ask_of(call: Struct) -> AskDraft:
    if isinstance(call, tools.AskPermission):
        return tools.permission_ask(call.tool_name, call.arguments, call.reasons, call.irreversible)
    if isinstance(call, tools.PermissionPrompt):
        return tools.permission_ask(call.tool_name, call.input, [], False)
    if isinstance(call, tools.AskChoice):
        return tools.choice_ask(call)
    if isinstance(call, tools.AskText):
        return tools.text_ask(call)
    if isinstance(call, tools.AskForm):
        return tools.form_ask(call)
    raise TypeError(f"no ask for {type(call).__name__}")


def _allowed(call: Struct) -> dict[str, Any]:
    if isinstance(call, tools.PermissionPrompt):
        return tools.prompt_result("always", "answered", call)
    return {"outcome": "answered", "decision": "always"}


def _result(call: Struct, handle: AskHandle, resolution: Resolution) -> dict[str, Any]:
    answer = resolution.answer if resolution.how == "answered" else None
    if isinstance(call, tools.PermissionPrompt):
        return tools.prompt_result(answer.option if answer else None, resolution.how, call)
    if answer is None:
        return tools.unanswered(resolution.how)
    ask = handle.ask
    return tools.answered(call, answer, ask.options, ask.fields)


def _title(ctx: ServerRequestContext[Any, Any], cwd: str | None) -> dict[str, Any]:
    """The conversation's title (the client's name and folder) and workspace."""
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    client = (info.title or info.name) if info is not None else "MCP client"
    if cwd:
        folder = Path(cwd).name or cwd
        return {"title": label(f"{client} · {folder}"), "workspace": label(cwd)}
    return {"title": label(client)}


async def _first_root(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The client's first root folder, when it offers roots (asked for at most 2 s; roots are
    deprecated only for the 2026 protocol, which this server does not serve)."""
    caps = ctx.session.client_capabilities
    if caps is None or caps.roots is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            async with asyncio.timeout(2.0):
                roots = await ctx.session.list_roots()
    except (MCPError, TimeoutError) as exc:
        log.info("no roots from the client: %s", exc)
        return None
    for root in roots.roots:
        parts = urlsplit(str(root.uri))
        if parts.scheme == "file" and parts.path:
            return parts.path
    return None
