"""The hooks' credentials: one secret a client (``claude-code``, ``codex``), written into that
client's own hook settings; the bridge keeps only their SHA-256, in a 0600 JSON file
(``~/.collie/hooks-keys.json`` unless ``COLLIE_HOOKS_KEYS``)."""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

ENV = "COLLIE_HOOKS_KEYS"


def default_path() -> Path:
    """Where the hashes are kept."""
    found = os.environ.get(ENV)
    return Path(found) if found else Path.home() / ".collie" / "hooks-keys.json"


def new_secret() -> str:
    """A fresh credential."""
    return "collie-hook-" + secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def load(path: Path) -> dict[str, str]:
    """The hashes by client (none when the file is missing or unreadable)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def check(path: Path, client: str, secret: str) -> bool:
    """Whether ``secret`` is ``client``'s credential (the file read again only when it
    changed: an install while the bridge runs holds at its next hook)."""
    try:
        stat = path.stat()
    except OSError:
        return False
    kept = _loaded(path, stat.st_mtime_ns, stat.st_size, stat.st_ino).get(client)
    return kept is not None and hmac.compare_digest(kept, digest(secret))


@functools.lru_cache(maxsize=4)
def _loaded(path: Path, mtime_ns: int, size: int, inode: int) -> dict[str, str]:
    """:func:`load`, once per version of the file."""
    return load(path)


def remember(path: Path, client: str, secret: str | None) -> None:
    """Keep ``secret``'s hash as ``client``'s (``None``: forget it); the file stays 0600."""
    kept = load(path)
    if secret is None:
        kept.pop(client, None)
    else:
        kept[client] = digest(secret)
    write_private(path, json.dumps(kept, indent=2, sort_keys=True) + "\n")


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600), replacing it at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
