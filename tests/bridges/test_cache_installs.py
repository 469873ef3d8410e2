"""The tests' own installs in ``.cache/`` (the real ``claude``, ``codex``, ``langgraph dev``):
one at a time across processes, a folder renamed into place whole, a failed one left out."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.bridges import npm_clients
from tests.bridges.npm_clients import installed


def test_two_at_once_install_once_and_both_find_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(npm_clients, "CACHE", tmp_path)
    runs: list[Path] = []

    def install(fresh: Path) -> None:
        runs.append(fresh)
        (fresh / "part").write_text("1")
        time.sleep(0.3)  # the other one waits its turn meanwhile
        (fresh / "done").write_text("1")

    found: list[Path] = []
    both = [
        threading.Thread(target=lambda: found.append(installed("x", "done", install)))
        for _ in range(2)
    ]  # each opens the lock file for itself, as two processes do
    for each in both:
        each.start()
    for each in both:
        each.join()
    assert len(runs) == 1
    assert found == [tmp_path / "x"] * 2
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["done", "part"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x", "x.lock"]  # nothing half-made


def test_a_failed_install_leaves_nothing_and_the_next_one_tries_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(npm_clients, "CACHE", tmp_path)

    def failing(fresh: Path) -> None:
        (fresh / "part").write_text("1")
        subprocess.run([sys.executable, "-c", "raise SystemExit(3)"], check=True)

    with pytest.raises(subprocess.CalledProcessError):
        installed("x", "done", failing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.lock"]

    def working(fresh: Path) -> None:
        (fresh / "done").write_text("1")

    assert (installed("x", "done", working) / "done").exists()
