"""The real command-line agents the hooks tests drive, installed with npm into a folder of the
tests' own (``.cache/``) on first use. The standard library only: ``python3 -m
tests.bridges.npm_clients`` installs them ahead (CI does, while it installs the rest)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(__file__).resolve().parents[2] / ".cache"


@dataclass(frozen=True, slots=True)
class NpmClient:
    """An npm package and where its native binary lies under ``node_modules``."""

    package: str
    version: str
    native: str  # a glob under node_modules
    bin_name: str  # the wrapper's name under node_modules/.bin


CLAUDE = NpmClient(
    "@anthropic-ai/claude-code", "2.1.197", "@anthropic-ai/claude-code-*/claude", "claude"
)
CODEX = NpmClient("@openai/codex", "0.171.0", "@openai/codex-linux-*/vendor/*/bin/codex", "codex")


def installed(name: str, marker: str, install: Callable[[Path], None]) -> Path:
    """``CACHE/name``, made by ``install(folder)`` unless its file ``marker`` is there.

    Processes running at once take turns (a lock file): one installs, into a folder of its
    own renamed into place whole, and the others then find it there."""
    where = CACHE / name
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (where / marker).exists():
            shutil.rmtree(where, ignore_errors=True)  # a partial install of an older run
            fresh = tempfile.mkdtemp(dir=CACHE, prefix=f"{name}.")
            try:
                install(Path(fresh))
                os.rename(fresh, where)
            finally:
                shutil.rmtree(fresh, ignore_errors=True)  # what is left of a failed install
    return where


def npm_binary(client: NpmClient) -> Path:
    """``client``'s native binary, installed with npm when missing (a minute or so); npm may
    leave a wrapper's postinstall unrun, so the platform package's binary is preferred to
    ``.bin/<bin_name>``."""

    def install(fresh: Path) -> None:
        argv = ["npm", "install", "--prefix", str(fresh), "--no-audit", "--no-fund"]
        subprocess.run(
            [*argv, f"{client.package}@{client.version}"],
            check=True,
            timeout=600,
            capture_output=True,
        )

    name = f"{client.package.rsplit('/', 1)[-1]}-{client.version}"
    where = installed(name, f"node_modules/.bin/{client.bin_name}", install)
    found = sorted((where / "node_modules").glob(client.native))
    return found[0] if found else where / "node_modules" / ".bin" / client.bin_name


if __name__ == "__main__":
    for each in (CLAUDE, CODEX):
        print(npm_binary(each))
