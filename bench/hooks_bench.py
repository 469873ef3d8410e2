"""A permission's round trip through the hooks bridge, beside an SDK agent's ask, in the same
run.

- Hooks: the bridge (``python -m bridges.hooks``, its own process) serves hooks on a free
  loopback port; this script POSTs Claude Code's ``PermissionRequest`` body (the fixture's)
  N times one after another and times each (hook request to its answer).
- SDK agent: the same number of asks raised by an SDK agent (``bench/mcp_bench.py``'s, its
  own process), timed by the agent (``conv.ask`` to ``handle.wait()`` returning).

Both sides are answered the same way, at once (the first option: Allow): a wire client on the
agent's Unix socket reads ``GET /events`` and replies to each ``ask.raised``. Printed: p50 and
p99 each way, what the bridge adds, and each process's CPU per round trip (its own, read from
``/proc``: the bridge's against ``CPU_TARGET_MS``, beside the SDK agent's for the same ask).

Run: ``python bench/hooks_bench.py [--asks 200]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench._common import bench_main, cpu_seconds, heading, pct, ratio, row, short_dir, verdict
from bench.mcp_bench import REPO, _answering, _free_port, load_note, sdk
from bridges.hooks import keys

Json = dict[str, Any]
SECRET = "bench-secret"
CPU_TARGET_MS = 2.0  # a bridge's own CPU per ask's round trip (the SDK agent's budget)


def _body(n: int, tmp: Path) -> Json:
    found: Json = json.loads((REPO / "fixtures/hooks/claude-code-2.1.json").read_text())
    body: Json = found["hooks"]["PermissionRequest"]
    command = f"rm -rf build-{n}"
    return {
        **body,
        "session_id": "bench",
        "cwd": str(tmp),
        "transcript_path": str(tmp / "none.jsonl"),
        "tool_input": {**body["tool_input"], "command": command},
    }


async def hooked(asks: int) -> Json:
    with short_dir("hb-") as tmp:
        sock, port, keys_path = tmp / "hooks.sock", _free_port(), tmp / "keys.json"
        keys.remember(keys_path, "claude-code", SECRET)
        argv = [sys.executable, "-m", "bridges.hooks", "--socket", str(sock), "--port", str(port)]
        argv += ["--state", str(tmp / "hooks.db"), "--keys", str(keys_path)]
        async with _answering(argv, tmp, sock) as (proc, _):
            url = f"http://127.0.0.1:{port}/hooks/claude-code"
            headers = {"Authorization": f"Bearer {SECRET}"}
            trips: list[float] = []
            async with aiohttp.ClientSession(headers=headers) as http:
                cpu0 = 0.0
                for n in range(asks + 1):  # the first opens the session's conversation
                    if n == 1:
                        cpu0 = cpu_seconds(proc.pid)
                    t = time.perf_counter()
                    async with http.post(url, json=_body(n, tmp)) as resp:
                        answer = await resp.json()
                    if n:
                        trips.append(time.perf_counter() - t)
                    decision = answer["hookSpecificOutput"]["decision"]
                    assert decision == {"behavior": "allow"}, answer
                cpu = cpu_seconds(proc.pid) - cpu0
        return {"trips": trips, "cpu_per_ask": cpu / max(asks, 1)}


async def run(args: argparse.Namespace) -> Json:
    return {"sdk": await sdk(args.asks), "hooks": await hooked(args.asks)}


def report(results: Json, args: argparse.Namespace) -> None:
    s, b = results["sdk"], results["hooks"]
    heading(f"a permission's round trip, {args.asks} asks one after another, answered at once")
    for q in (50, 99):
        sq, bq = pct(s["trips"], q) * 1000, pct(b["trips"], q) * 1000
        row(f"p{q} SDK agent / hooks bridge", f"{sq:.2f} ms / {bq:.2f} ms ({ratio(bq, sq)})")
        row(f"p{q} added by the bridge", f"{bq - sq:.2f} ms")
    bc, sc = b["cpu_per_ask"] * 1000, s["cpu_per_ask"] * 1000
    row("CPU per round trip, SDK agent", f"{sc:.2f} ms")
    met = verdict(bc <= CPU_TARGET_MS)
    row("CPU per round trip, hooks bridge", f"{bc:.2f} ms ({ratio(bc, sc)}): {met}")
    row("target", f"the bridge's own CPU ≤ {CPU_TARGET_MS:.0f} ms per round trip {load_note()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--asks", type=int, default=200, help="asks each way (200)")
    bench_main(p, run, report)


if __name__ == "__main__":
    main()
