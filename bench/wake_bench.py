"""The machine's price of a wake-up: the same small Python work per cycle, in a hot loop and
with the process asleep between cycles (as the gateway is between two frames of a streamed
reply). It explains why the relay's CPU follows its frames, not its deltas.

Run: ``python bench/wake_bench.py [--calls 300]``; prints the process CPU per cycle.
"""

from __future__ import annotations

import argparse
import asyncio
import time


def _step(x: int) -> int:
    return x + 1


def _work(calls: int) -> int:
    total = 0
    for _ in range(calls):
        total = _step(total)
    return total


async def _cycles(calls: int, sleep_s: float, n: int) -> float:
    """CPU seconds per cycle of ``calls`` small calls then a sleep of ``sleep_s``."""
    started = time.process_time()
    for _ in range(n):
        _work(calls)
        await asyncio.sleep(sleep_s)
    return (time.process_time() - started) / n


async def main(calls: int) -> None:
    print(f"{calls} small Python calls a cycle; process CPU per cycle:")
    for sleep_ms, n in ((0.0, 2000), (2.0, 300), (20.0, 100)):
        cpu = await _cycles(calls, sleep_ms / 1e3, n)
        label = "hot loop (no sleep)" if not sleep_ms else f"asleep {sleep_ms:g} ms between"
        print(f"    {label:<28} {cpu * 1e6:8.1f} µs")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=300)
    asyncio.run(main(p.parse_args().calls))
