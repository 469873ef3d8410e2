"""Run one bench script in two trees in the same run: a revision's and this one.

    python -m bench.beside --base 3a7ca1b [--rounds 2] [--timeout 600] chat_bench.py -- --rounds 100

Makes a detached worktree of ``--base`` in a temp directory (removed at the end), then runs the
script base/new/base/new… (``--rounds`` each), each run from its own tree: the tree's copy of
the script, ``cwd`` the tree and ``PYTHONPATH`` the tree, so each imports its own packages and
its own bench helpers. Arguments after ``--`` go to both unchanged. Every run is bounded by
``--timeout`` (its whole process group is killed then). Each run's output is printed as it
comes, tagged ``[base]``/``[new]``; then the lines carrying figures (a number with a unit or a
×) side by side, with new/base of each number (medians over the rounds; ``=`` where equal).
The benches themselves use only 127.0.0.1 and Unix sockets.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
_NUMBER: Final = r"[-+]?\d[\d,]*(?:\.\d+)?"
_UNIT: Final = r"(?:[µu]s|ms|ns|s\b|KiB|MiB|GiB|kB|MB|B\b|\w*/s|%|×|x\b|Hz)"
FIGURE: Final = re.compile(rf"({_NUMBER})\s?{_UNIT}|×\s?({_NUMBER})")
NUMBER: Final = re.compile(_NUMBER)

Runs = dict[str, list[list[str]]]  # side -> one list of output lines per run


def figures(line: str) -> list[float]:
    """The numbers of ``line`` if it carries a figure (a number with a unit or ×), else []."""
    if not FIGURE.search(line):
        return []
    return [float(n.replace(",", "")) for n in NUMBER.findall(line)]


def label(line: str) -> str:
    """``line`` with its numbers blanked: the same figure's line in every run."""
    return re.sub(r"\s+", " ", NUMBER.sub("#", line)).strip()


def run_once(tag: str, tree: Path, script: str, args: Sequence[str], timeout: float) -> list[str]:
    """Run ``tree/bench/script args`` with the tree's packages; print and return its lines."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, str(tree / "bench" / script), *args]
    print(f"[{tag}] $ (cd {tree}; PYTHONPATH=. {' '.join(argv[1:])})", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=tree,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a timeout kills its helpers too
    )
    timer = threading.Timer(timeout, _kill_group, (proc, f"[{tag}] timeout ({timeout:g} s)"))
    timer.start()
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            lines.append(line)
            print(f"[{tag}] {line}", flush=True)
        code = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            _kill_group(proc, f"[{tag}] stopped")
    print(f"[{tag}] exit {code} after {time.monotonic() - started:.0f} s", flush=True)
    return lines


def _kill_group(proc: subprocess.Popen[str], why: str) -> None:
    print(f"{why}: killing its process group", flush=True)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def summary(runs: Runs) -> list[str]:
    """The figure lines side by side: base runs, new runs, new/base of each number."""
    order: list[str] = []
    values: dict[str, dict[str, list[list[float]]]] = {}
    for side in ("base", "new"):
        for lines in runs[side]:
            seen: dict[str, int] = {}
            for line in lines:
                nums = figures(line)
                if not nums:
                    continue
                key = label(line)
                seen[key] = seen.get(key, 0) + 1
                if seen[key] > 1:
                    key = f"{key} ({seen[key]})"
                if key not in values:
                    order.append(key)
                    values[key] = {"base": [], "new": []}
                values[key][side].append(nums)
    out: list[str] = []
    for key in order:
        base, new = values[key]["base"], values[key]["new"]
        out.append(key)
        for side, got in (("base", base), ("new", new)):
            shown = " | ".join(" ".join(f"{v:g}" for v in nums) for nums in got) or "—"
            out.append(f"    {side:4}  {shown}")
        ratios = _ratios(base, new)
        if ratios:
            out.append(f"    new/base  {ratios}  (medians over the runs)")
    return out


def _ratios(base: list[list[float]], new: list[list[float]]) -> str:
    """new/base of each number's median, where both sides have it and base is not 0."""
    width = min((len(nums) for nums in base + new), default=0)
    if not base or not new:
        return ""
    shown = []
    for i in range(width):
        b = statistics.median(nums[i] for nums in base)
        n = statistics.median(nums[i] for nums in new)
        shown.append("=" if b == n else f"{n / b:.2f}" if b else "—")
    return " ".join(shown)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("script", help="a file in bench/, e.g. chat_bench.py")
    p.add_argument("args", nargs="*", help="the script's arguments (after --)")
    p.add_argument("--base", default="main", help="the revision to run beside this tree")
    p.add_argument("--rounds", type=int, default=2, help="runs on each side, alternating")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds at most per run")
    a = p.parse_args()
    script = Path(a.script).name
    if not (REPO / "bench" / script).is_file():
        p.error(f"no bench/{script} in {REPO}")
    runs: Runs = {"base": [], "new": []}
    # SIGTERM unwinds like ^C: the running bench's group is killed, the worktree removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="beside-") as tmp:
        base = Path(tmp) / "base"
        git = ["git", "-C", str(REPO)]
        subprocess.run([*git, "worktree", "add", "--detach", str(base), a.base], check=True)
        try:
            if not (base / "bench" / script).is_file():
                print(f"[base] no bench/{script} at {a.base}", flush=True)
                return 1
            for i in range(a.rounds):
                for side, tree in (("base", base), ("new", REPO)):
                    tag = f"{side} {i + 1}/{a.rounds}"
                    runs[side].append(run_once(tag, tree, script, a.args, a.timeout))
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(base)], check=False)
            subprocess.run([*git, "worktree", "prune"], check=False)
    print(f"\n== {script} beside {a.base}: figure lines, each run left to right", flush=True)
    print("\n".join(summary(runs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
