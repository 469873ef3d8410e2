"""``hooks install|uninstall|status claude-code|codex`` and ``hook codex``: Claude Code's and
Codex's hooks pointed at the hooks bridge (``bridges.hooks``), whether the gateway runs or not.

Exit codes: 0 done, 1 a settings file cannot be read or written (or the bridge is not
reached, for ``status``), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bridges.hooks import keys, settings
from bridges.hooks.cli import DEFAULT_PORT

COMMANDS = ("hooks", "hook")
CLIENTS = ("claude-code", "codex")
KEY_FILE = "collie-hook.key"
CODEX_SAYS = (
    "codex: it runs hooks with `[features] hooks = true` in its config.toml, once you have "
    "reviewed them in its TUI"
)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``hooks`` and ``hook`` to the gateway's commands."""
    hooks = sub.add_parser(
        "hooks",
        help="put Claude Code's or Codex's questions on the phone (their hooks)",
        description="Install, uninstall or show the hooks that send Claude Code's and Codex's "
        'questions to the hooks bridge (sources.json: {"hooks": {"port": 8791}}).',
    )
    actions = hooks.add_subparsers(dest="hooks_action", required=True, metavar="ACTION")
    for name, said in (
        ("install", "merge the bridge's hooks into the client's settings"),
        ("uninstall", "take the bridge's hooks out of the client's settings"),
        ("status", "say what is installed where, and whether the bridge answers"),
    ):
        p = actions.add_parser(name, help=said, description=said)
        p.add_argument("client", choices=CLIENTS)
        p.add_argument("--port", type=int, default=DEFAULT_PORT, help="the bridge's port")
        p.add_argument(
            "--project",
            type=Path,
            default=None,
            help="claude-code: this project's "
            ".claude/settings.local.json instead of the user's settings",
        )
        p.add_argument("--keys", type=Path, default=None, help="the bridge's credential hashes")
    hook = sub.add_parser(
        "hook",
        help="run as a client's command hook",
        description="Read a hook's JSON on standard input, ask the hooks bridge, print its answer.",
    )
    hook.add_argument("client", choices=("codex",))
    hook.add_argument("--port", type=int, default=DEFAULT_PORT, help="the bridge's port")


def add_bridge(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bridge hooks`` to the gateway's ``bridge`` kinds."""
    from bridges.hooks.cli import DESCRIPTION, add_arguments

    add_arguments(kinds.add_parser("hooks", help=DESCRIPTION, description=DESCRIPTION))


def run_bridge(args: argparse.Namespace) -> int:
    """``bridge hooks …``: serve the bridge until a signal."""
    from bridges.hooks.cli import run as run_hooks

    return run_hooks(args)


def run(args: argparse.Namespace) -> int:
    """Run ``hooks …`` or ``hook …``; returns the exit code."""
    if args.command == "hook":
        return _hook_codex(args.port, _codex_home())
    where = _settings_path(args.client, args.project)
    keys_path = args.keys or keys.default_path()
    try:
        if args.hooks_action == "install":
            return _install(args.client, where, args.port, keys_path)
        if args.hooks_action == "uninstall":
            return _uninstall(args.client, where, keys_path)
        return _status(args.client, where, args.port)
    except (OSError, ValueError) as exc:
        print(f"collie-gateway hooks: {where}: {exc}", file=sys.stderr)
        return 1


def _claude_home() -> Path:
    found = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(found) if found else Path.home() / ".claude"


def _codex_home() -> Path:
    found = os.environ.get("CODEX_HOME")
    return Path(found) if found else Path.home() / ".codex"


def _settings_path(client: str, project: Path | None) -> Path:
    if client == "codex":
        return _codex_home() / "hooks.json"
    if project is not None:
        return project / ".claude" / "settings.local.json"
    return _claude_home() / "settings.json"


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    found = json.loads(path.read_text() or "{}")
    if not isinstance(found, dict):
        raise ValueError("not a JSON object")
    return found


def _write(path: Path, value: dict[str, Any]) -> None:
    keys.write_private(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _install(client: str, where: Path, port: int, keys_path: Path) -> int:
    current = _read(where)
    url = f"http://127.0.0.1:{port}/hooks/{client}"
    if client == "claude-code":
        secret = settings.secret_in(current) or keys.new_secret()
        hook_for = {e: settings.claude_hook(url, secret, e) for e in settings.EVENTS[client]}
    else:
        key_file = where.parent / KEY_FILE
        secret = key_file.read_text().strip() if key_file.exists() else keys.new_secret()
        keys.write_private(key_file, secret + "\n")
        command = shlex.join([sys.executable, "-m", "collie_gateway", "hook", "codex"])
        command += f" --port {port}"
        hook_for = {e: settings.codex_hook(command, e) for e in settings.EVENTS[client]}
    _write(where, settings.install(current, client, hook_for))
    keys.remember(keys_path, client, secret)
    print(f"{client}: the bridge's hooks are in {where} (port {port})")
    if client == "codex":
        print(CODEX_SAYS)
    return 0


def _uninstall(client: str, where: Path, keys_path: Path) -> int:
    current = _read(where)
    if not settings.installed(current, client):
        print(f"{client}: no hooks of the bridge in {where}")
        return 0
    _write(where, settings.uninstall(current, client))
    if client == "codex":
        (where.parent / KEY_FILE).unlink(missing_ok=True)
    keys.remember(keys_path, client, None)
    print(f"{client}: the bridge's hooks are out of {where}")
    return 0


def _status(client: str, where: Path, port: int) -> int:
    events = settings.installed(_read(where), client)
    said = ", ".join(events) if events else "nothing"
    print(f"{client}: {said} installed in {where}")
    answers = _answers(port)
    print(f"bridge on 127.0.0.1:{port}: {'answers' if answers else 'does not answer'}")
    return 0 if answers and events else 1


def _answers(port: int) -> bool:
    """Whether the bridge answers (a request without credential gets its 401)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/claude-code", data=b"{}", method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=3):
            return True
    except urllib.error.HTTPError as exc:
        return exc.code == 401
    except OSError:
        return False


def _hook_codex(port: int, home: Path) -> int:
    """Codex's command hook: stdin to the bridge, its answer to stdout. The bridge not
    reached: no answer (Codex asks at the desk), said on stderr."""
    body = sys.stdin.buffer.read()
    try:
        secret = (home / KEY_FILE).read_text().strip()
    except OSError as exc:
        print(f"collie-gateway hook codex: no credential: {exc}", file=sys.stderr)
        return 0
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/codex",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=settings.HOLD + 60) as resp:
            answer = json.loads(resp.read() or b"{}")
    except (OSError, ValueError) as exc:
        print(f"collie-gateway hook codex: the bridge did not answer: {exc}", file=sys.stderr)
        return 0
    if answer:
        print(json.dumps(answer))
    return 0
