"""``sources.json``: the durable agents a gateway connects to, in dashboard order, and the
member machines of its crew (W1–W4).

Loading never half-succeeds: any problem is one ``SourcesError`` naming the file, the entry
and what is wrong, and the gateway does not start.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from collie_gateway.errors import SourcesError

_ENTRY_KEYS = frozenset(
    {"name", "socket", "url", "token_env", "acp", "mcp", "hooks", "stalwart", "langgraph"}
)
AGENTS_DIR = Path("~/.collie/agents")  # where a bridge's socket and state go by default
_TOP_KEYS = frozenset({"durable_agents", "crew"})
_MEMBER_KEYS = frozenset({"name", "url", "token_env", "fingerprint"})
_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost"})  # spec D4, literally
# Where a member's token may travel over plain http:// (it never leaves the machine).
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True, slots=True)
class BridgeCommand:
    """A bridge to run: ``argv`` serves the agent on ``socket``; ``env`` is added to the
    gateway's environment."""

    name: str
    argv: tuple[str, ...]
    socket: Path
    cwd: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Restart delays (seconds): ``first``, doubling up to ``cap``; a run longer than
    ``stable`` starts again from ``first``."""

    first: float = 0.5
    cap: float = 30.0
    stable: float = 10.0
    grace: float = 5.0  # SIGTERM, then this long, then SIGKILL


@dataclass(frozen=True, slots=True)
class Source:
    """One durable agent: reached through ``socket`` or ``url``, never both."""

    name: str
    socket: Path | None = None
    url: str | None = None
    token: str | None = None
    bridge: BridgeCommand | None = None  # the gateway runs this bridge, serving ``socket``

    @property
    def local(self) -> bool:
        """Spec D4: a Unix socket, ``http://127.0.0.1`` or ``http://localhost`` is local."""
        if self.socket is not None:
            return True
        parts = urlsplit(self.url or "")
        return parts.scheme == "http" and (parts.hostname or "") in _LOCAL_HOSTS

    @property
    def address(self) -> str:
        """Where the agent is reached, for logs and the API (never the token)."""
        return str(self.socket) if self.socket is not None else str(self.url)


@dataclass(frozen=True, slots=True)
class Member:
    """A member machine of the crew: another gateway, read through its own phone API.

    The token is sent to this member only; it is kept out of ``repr`` (and so out of logs).
    """

    name: str
    url: str
    token: str | None = field(default=None, repr=False)
    fingerprint: str | None = None  # the SHA-256 of its certificate (hex), pinned when given


def load_sources(
    path: Path, environ: Mapping[str, str] | None = None, *, beside: Path | None = None
) -> list[Source]:
    """Read and check ``path``; a bridge's relative data file is put in ``beside`` (the
    gateway database's folder; default the working folder).

    Raises:
        SourcesError: the file is unreadable, not JSON, or any entry is wrong.
    """
    env = os.environ if environ is None else environ
    return parse_sources(_read(path), str(path), env, beside=beside)


def load_crew(path: Path, environ: Mapping[str, str] | None = None) -> list[Member]:
    """The ``crew`` list of ``path``, in the order the lead's dashboard shows it.

    Raises:
        SourcesError: as :func:`load_sources`, or a member entry is wrong.
    """
    return parse_crew(_read(path), str(path), os.environ if environ is None else environ)


def _read(path: Path) -> object:
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SourcesError(f"{path}: cannot read the file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SourcesError(f"{path}: the file is not UTF-8 text") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SourcesError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    return data


def parse_sources(
    data: object, where: str, env: Mapping[str, str], *, beside: Path | None = None
) -> list[Source]:
    """Check already-parsed JSON; ``where`` names the file in errors.

    Raises:
        SourcesError: as :func:`load_sources`.
    """
    _check_top(data, where)
    assert isinstance(data, dict)
    entries = data.get("durable_agents", [])
    if not isinstance(entries, list):
        raise SourcesError(f'{where}: "durable_agents" must be a list')
    sources: list[Source] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries, start=1):
        source = _entry(entry, f"{where}: entry {index}", env, beside or Path.cwd())
        if source.name in seen:
            raise SourcesError(
                f"{where}: entry {index} ({source.name!r}): duplicate name {source.name!r}"
            )
        seen.add(source.name)
        sources.append(source)
    return sources


def _check_top(data: object, where: str) -> None:
    if not isinstance(data, dict):
        raise SourcesError(f'{where}: expected a JSON object with "durable_agents"')
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise SourcesError(f"{where}: unknown key {unknown[0]!r} (known: durable_agents, crew)")


def parse_crew(data: object, where: str, env: Mapping[str, str]) -> list[Member]:
    """Check the ``crew`` list of already-parsed JSON; ``where`` names the file in errors.

    Raises:
        SourcesError: as :func:`load_crew`.
    """
    _check_top(data, where)
    assert isinstance(data, dict)
    entries = data.get("crew", [])
    if not isinstance(entries, list):
        raise SourcesError(f'{where}: "crew" must be a list')
    members: list[Member] = []
    for index, entry in enumerate(entries, start=1):
        member = _member(entry, f"{where}: crew member {index}", env)
        if any(m.name == member.name for m in members):
            raise SourcesError(
                f"{where}: crew member {index} ({member.name!r}): duplicate name {member.name!r}"
            )
        members.append(member)
    return members


def _member(entry: object, where: str, env: Mapping[str, str]) -> Member:
    if not isinstance(entry, dict):
        raise SourcesError(f"{where}: expected an object")
    name = _name(entry, where)
    where = f"{where} ({name!r})"
    unknown = sorted(set(entry) - _MEMBER_KEYS)
    if unknown:
        raise SourcesError(
            f"{where}: unknown key {unknown[0]!r} (known: name, url, token_env, fingerprint)"
        )
    url = entry.get("url")
    if not isinstance(url, str):
        raise SourcesError(f'{where}: "url" is required: the member gateway\'s address')
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourcesError(f"{where}: url {url!r} must be http:// or https:// with a host")
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK_HOSTS:
        # The member's token (and the person's answers) would cross the network in clear.
        raise SourcesError(f"{where}: url {url!r} must be https:// off loopback")
    token = _token(entry, where, env)
    return Member(name, url.rstrip("/"), token, _fingerprint(entry, where, parts.scheme))


def _fingerprint(entry: dict[str, object], where: str, scheme: str) -> str | None:
    """A member's ``"fingerprint"``: ``sha256:<hex>`` as a pairing link carries it, or the
    hex with colons as ``collie-gateway serve`` prints it."""
    given = entry.get("fingerprint")
    if given is None:
        return None
    hexed = given.removeprefix("sha256:").replace(":", "").lower() if isinstance(given, str) else ""
    if len(hexed) != 64 or any(c not in "0123456789abcdef" for c in hexed):
        raise SourcesError(
            f'{where}: "fingerprint" must be a certificate\'s SHA-256 (64 hex digits)'
        )
    if scheme != "https":
        raise SourcesError(f'{where}: "fingerprint" needs an https:// url')
    return hexed


def _name(entry: dict[str, object], where: str) -> str:
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SourcesError(f'{where}: "name" is required and must be a non-empty string')
    if len(name) > 100 or "/" in name:
        raise SourcesError(f"{where} ({name!r}): a name has at most 100 characters and no '/'")
    return name


def _token(entry: dict[str, object], where: str, env: Mapping[str, str]) -> str | None:
    token_env = entry.get("token_env")
    if token_env is None:
        return None
    if not isinstance(token_env, str) or not token_env:
        raise SourcesError(f'{where}: "token_env" must be the name of a variable')
    token = env.get(token_env)
    if not token:
        raise SourcesError(f"{where}: the token variable {token_env} is not set or empty")
    return token


def _entry(entry: object, where: str, env: Mapping[str, str], beside: Path) -> Source:
    if not isinstance(entry, dict):
        raise SourcesError(f"{where}: expected an object")
    name = _name(entry, where)
    where = f"{where} ({name!r})"
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        known = ", ".join(("name", "socket", "url", "token_env", *_BRIDGES, "langgraph"))
        raise SourcesError(f"{where}: unknown key {unknown[0]!r} (known: {known})")
    kinds = [k for k in (*_BRIDGES, "langgraph") if k in entry]
    if kinds:
        if len(kinds) > 1 or "socket" in entry or "url" in entry:
            raise SourcesError(
                f'{where}: a bridge ("{kinds[0]}") is given alone, without "socket", "url" '
                "or another bridge"
            )
        spec, at = entry[kinds[0]], f'{where}: "{kinds[0]}"'
        if kinds[0] == "langgraph":
            bridge = _langgraph_bridge(name, spec, at, beside)
        else:
            bridge = _BRIDGES[kinds[0]](name, spec, at)
        return Source(name=name, socket=bridge.socket, bridge=bridge)
    socket, url = entry.get("socket"), entry.get("url")
    if (socket is None) == (url is None):
        raise SourcesError(f'{where}: give exactly one of "socket" or "url", not both or neither')
    token = _token(entry, where, env)
    if socket is not None:
        if not isinstance(socket, str) or not socket:
            raise SourcesError(f'{where}: "socket" must be a path')
        return Source(name=name, socket=Path(socket).expanduser(), token=token)
    if not isinstance(url, str):
        raise SourcesError(f'{where}: "url" must be a string')
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourcesError(f"{where}: url {url!r} must be http:// or https:// with a host")
    return Source(name=name, url=url.rstrip("/"), token=token)


def _path(value: object, where: str, default: Path) -> Path:
    if value is None:
        return default.expanduser()
    if not isinstance(value, str) or not value:
        raise SourcesError(f"{where} must be a path")
    return Path(value).expanduser()


def _acp_bridge(name: str, spec: object, where: str) -> BridgeCommand:
    """``{"acp": {"command": [...], "cwd": "~/src/shop", "socket": …, "state": …}}``: the ACP
    bridge (``bridges.acp``) serving ``command``; ``cwd`` is a folder or a list of folders
    (the New page's starters); ``socket`` and ``state`` default to ``~/.collie/agents/``."""
    if not isinstance(spec, dict):
        raise SourcesError(f'{where} must be an object with "command"')
    unknown = sorted(set(spec) - {"command", "cwd", "socket", "state"})
    if unknown:
        raise SourcesError(
            f"{where}: unknown key {unknown[0]!r} (known: command, cwd, socket, state)"
        )
    command = spec.get("command")
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(c, str) and c for c in command)
    ):
        raise SourcesError(f'{where}: "command" must be a non-empty list of strings')
    cwd = spec.get("cwd", [])
    cwds = [cwd] if isinstance(cwd, str) else cwd
    if not isinstance(cwds, list) or not all(isinstance(c, str) and c for c in cwds):
        raise SourcesError(f'{where}: "cwd" must be a folder or a list of folders')
    socket = _path(spec.get("socket"), f'{where}: "socket"', AGENTS_DIR / f"{name}.sock")
    state = _path(spec.get("state"), f'{where}: "state"', AGENTS_DIR / f"{name}.acp.db")
    argv = [sys.executable, "-m", "bridges.acp", "--socket", str(socket), "--state", str(state)]
    for folder in cwds:
        argv += ["--cwd", str(Path(folder).expanduser())]
    return BridgeCommand(name=name, argv=(*argv, "--", *command), socket=socket)


# Bridge kinds a sources.json entry may name instead of "socket" or "url".
_STALWART_KEYS = frozenset(
    {"url", "token_env", "secret_env", "webhook_secret_env", "webhook_port", "socket", "state"}
)


def _object(spec: object, where: str, keys: frozenset[str], needed: str) -> dict[str, object]:
    """A bridge's object, with none but ``keys``."""
    if not isinstance(spec, dict):
        raise SourcesError(f'{where} must be an object with "{needed}"')
    unknown = sorted(set(spec) - keys)
    if unknown:
        raise SourcesError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(keys))})"
        )
    return spec


def _stalwart_bridge(name: str, spec: object, where: str) -> BridgeCommand:
    """``{"stalwart": {"url": "http://127.0.0.1:8700", "token_env": "…"}}``: the bridge
    ``bridges.stalwart`` to a stalwart-style server (people-in-the-loop S7). Optional:
    ``secret_env`` (resumes are signed, S6), ``webhook_secret_env`` and ``webhook_port``
    (``on_interrupt`` deliveries), ``socket`` and ``state`` (default ``~/.collie/agents/``).
    The bridge reads the variables named, and exits saying which one is unset."""
    spec = _object(spec, where, _STALWART_KEYS, "url")
    url = spec.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourcesError(f'{where}: "url" must be http:// or https:// with a host')
    argv = [sys.executable, "-m", "bridges.stalwart", "--url", str(url)]
    for key in ("token_env", "secret_env", "webhook_secret_env"):
        variable = spec.get(key)
        if variable is None:
            continue
        if not isinstance(variable, str) or not variable:
            raise SourcesError(f'{where}: "{key}" must be the name of a variable')
        argv += ["--" + key.replace("_", "-"), variable]
    port = spec.get("webhook_port")
    if port is not None:
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise SourcesError(f'{where}: "webhook_port" must be a port number')
        argv += ["--webhook-port", str(port)]
    socket = _path(spec.get("socket"), f'{where}: "socket"', AGENTS_DIR / f"{name}.sock")
    state = _path(spec.get("state"), f'{where}: "state"', AGENTS_DIR / f"{name}.stalwart.db")
    argv += ["--socket", str(socket), "--state", str(state)]
    return BridgeCommand(name=name, argv=tuple(argv), socket=socket)


def _port_bridge(
    name: str, spec: object, where: str, kind: str, port: int, extra: tuple[str, ...] = ()
) -> BridgeCommand:
    """A bridge (``bridges.<kind>``) serving HTTP on 127.0.0.1:``port`` beside its socket:
    ``{"port": …, "socket": …, "state": …}`` and the ``extra`` paths it takes."""
    if not isinstance(spec, dict):
        raise SourcesError(f'{where} must be an object, e.g. {{"port": {port}}}')
    known = ("port", "socket", "state", *extra)
    unknown = sorted(set(spec) - set(known))
    if unknown:
        raise SourcesError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(known)})")
    port = spec.get("port", port)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise SourcesError(f'{where}: "port" must be a port number')
    socket = _path(spec.get("socket"), f'{where}: "socket"', AGENTS_DIR / f"{name}.sock")
    state = _path(spec.get("state"), f'{where}: "state"', AGENTS_DIR / f"{name}.{kind}.db")
    argv = [sys.executable, "-m", f"bridges.{kind}", "--socket", str(socket), "--state", str(state)]
    for key in extra:
        if spec.get(key) is not None:
            argv += [f"--{key}", str(_path(spec[key], f'{where}: "{key}"', AGENTS_DIR))]
    return BridgeCommand(name=name, argv=(*argv, "--port", str(port)), socket=socket)


def _mcp_bridge(name: str, spec: object, where: str) -> BridgeCommand:
    """``{"mcp": {"port": 8790, "socket": …, "state": …}}``: the MCP bridge (``bridges.mcp``),
    MCP tools that ask the person, served on 127.0.0.1:``port`` at ``/mcp``; ``socket`` and
    ``state`` default to ``~/.collie/agents/``."""
    return _port_bridge(name, spec, where, "mcp", 8790)


def _hooks_bridge(name: str, spec: object, where: str) -> BridgeCommand:
    """``{"hooks": {"port": 8791, "socket": …, "state": …, "keys": …}}``: the hooks bridge
    (``bridges.hooks``), Claude Code's and Codex's hooks served on 127.0.0.1:``port``;
    ``socket`` and ``state`` default to ``~/.collie/agents/``, ``keys`` to the credential
    hashes ``hooks install`` writes."""
    return _port_bridge(name, spec, where, "hooks", 8791, ("keys",))


_BRIDGES: dict[str, Callable[[str, object, str], BridgeCommand]] = {
    "acp": _acp_bridge,
    "hooks": _hooks_bridge,
    "mcp": _mcp_bridge,
    "stalwart": _stalwart_bridge,
}


_LANGGRAPH_KEYS = frozenset({"graph", "checkpoints", "input", "socket", "state"})
_LANGGRAPH_SERVER_KEYS = frozenset({"url", "assistant", "input", "poll", "socket", "state"})


def _langgraph_bridge(name: str, spec: object, where: str, beside: Path) -> BridgeCommand:
    """``{"langgraph": {"graph": "my_pkg.agent:graph", "checkpoints": "graphs.sqlite",
    "input": "messages"}}``: the LangGraph bridge (``bridges.langgraph``) running the graph
    in-process; a relative ``checkpoints`` is in ``beside`` (the gateway database's folder).
    ``{"langgraph": {"url": "http://127.0.0.1:2024", "assistant": "agent"}}``: the bridge a
    client of that Agent Server (``poll``: seconds between two readings of its threads).
    ``socket`` and ``state`` default to ``~/.collie/agents/``."""
    served = isinstance(spec, dict) and "url" in spec
    keys = _LANGGRAPH_SERVER_KEYS if served else _LANGGRAPH_KEYS
    spec = _object(spec, where, keys, "graph" if not served else "url")
    given = spec.get("input", "messages")
    if not isinstance(given, str) or not (given == "messages" or ":" in given):
        raise SourcesError(f'{where}: "input" must be "messages" or "module:name"')
    mode = _langgraph_server(spec, where) if served else _langgraph_local(name, spec, where, beside)
    socket = _path(spec.get("socket"), f'{where}: "socket"', AGENTS_DIR / f"{name}.sock")
    state = _path(spec.get("state"), f'{where}: "state"', AGENTS_DIR / f"{name}.langgraph.db")
    argv = (sys.executable, "-m", "bridges.langgraph", *mode, "--input", given)
    files = ("--socket", str(socket), "--state", str(state))
    return BridgeCommand(name=name, argv=(*argv, *files), socket=socket)


def _langgraph_local(name: str, spec: dict[str, object], where: str, beside: Path) -> list[str]:
    """The in-process mode's arguments: the graph, its checkpoints beside the database."""
    graph = spec.get("graph")
    if not isinstance(graph, str) or ":" not in graph:
        raise SourcesError(f'{where}: "graph" must name the compiled graph as "module:name"')
    checkpoints = beside / _path(
        spec.get("checkpoints"), f'{where}: "checkpoints"', Path(f"{name}.graphs.sqlite")
    )
    return ["--graph", graph, "--checkpoints", str(checkpoints)]


def _langgraph_server(spec: dict[str, object], where: str) -> list[str]:
    """The server mode's arguments: the Agent Server's URL, the assistant, how often to poll."""
    url, assistant, poll = spec.get("url"), spec.get("assistant"), spec.get("poll", 5)
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourcesError(f'{where}: "url" must be the Agent Server\'s http:// or https:// URL')
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK_HOSTS:
        raise SourcesError(f"{where}: url {url!r} must be https:// off loopback")
    if not isinstance(assistant, str) or not assistant:
        raise SourcesError(f'{where}: "assistant" must name an assistant or a graph')
    if isinstance(poll, bool) or not isinstance(poll, int | float) or poll < 0:
        raise SourcesError(f'{where}: "poll" must be a number of seconds (0: never)')
    return ["--url", str(url), "--assistant", assistant, "--poll", str(poll)]
