"""The event loop while many pushes go out through the real APNs and FCM clients.

What the old timed test ``test_the_loop_never_stalls_50ms_while_sending_many_pushes`` asserted,
measured: a ticker task asks the loop for a turn every 2 ms while ``--pushes`` pushes (half
APNs over HTTP/2 and TLS, half FCM with its OAuth token) go out through ``push.Dispatcher`` to
the loopback fakes of ``tests/push/fakes.py``; the loop's largest stall (the longest gap between
the ticker's turns, less the 2 ms it asked for), its p99 gap, the longest ``dispatch`` call and
the process CPU time per push. Baseline, in the same run and process: the same number of bare
aiohttp POSTs to a loopback aiohttp server, the same 16 at a time, under the same ticker — the
least a push over HTTP can cost the loop. Rounds alternate the two.

Run: ``python bench/push_loop_bench.py [--pushes 400] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import ssl
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from bench._common import heading, pct, ratio, row, short_dir, verdict
from collie_gateway.strings import Catalogue
from push import (
    ApnsClient,
    Content,
    Device,
    Dispatcher,
    FcmClient,
    Provider,
    ServiceAccount,
)
from push.sender import MAX_IN_FLIGHT
from tests.push.fakes import HOST, FakeApns, FakeFcm, ask_note, make_tls, pem, service_account

TICK = 0.002
STALL_TARGET_MS = 50.0  # the figure the timed test used to assert
TEAM_ID, KEY_ID, TOPIC = "TEAM123456", "KEY7890ABC", "org.collie.phone"
EMAIL, PROJECT = "push@bench.iam.gserviceaccount.com", "collie-bench"


@dataclass
class Round:
    """One round's figures (seconds)."""

    stall: float  # wall clock: includes the time other processes had the core
    cpu_stall: float  # this thread's CPU time: what the loop itself did between two turns
    p99_gap: float
    longest_call: float  # this thread's CPU time
    cpu_per_push: float


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """``app`` on 127.0.0.1, a free port; its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    try:
        yield f"http://{HOST}:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def measured(
    count: int, start: Callable[[int], object], drain: Callable[[], Awaitable[None]]
) -> Round:
    """Start ``count`` sends with ``start(i)`` under a ticker, wait for them with ``drain``."""
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    gaps: list[float] = []
    cpu_gaps: list[float] = []

    async def ticker() -> None:
        last, last_cpu = loop.time(), time.thread_time()
        while not done.is_set():
            await asyncio.sleep(TICK)
            now, now_cpu = loop.time(), time.thread_time()
            gaps.append(now - last)
            cpu_gaps.append(now_cpu - last_cpu)
            last, last_cpu = now, now_cpu

    gc.collect()
    gc.freeze()  # the heap built so far is no part of sending, as in a server after start-up
    try:
        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        cpu = time.process_time()
        longest = 0.0
        for i in range(count):
            began = time.thread_time()
            start(i)
            longest = max(longest, time.thread_time() - began)
            if i % 50 == 0:
                await asyncio.sleep(0)
        await drain()
        cpu = time.process_time() - cpu
        done.set()
        await ticking
    finally:
        gc.unfreeze()
    stall, cpu_stall = max(gaps) - TICK, max(cpu_gaps)
    return Round(stall, cpu_stall, pct(gaps, 99) - TICK, longest, cpu / count)


def device(i: int) -> Device:
    if i % 2:
        return Device(id=f"i{i}", provider=Provider.APNS, token=f"{i:064x}", registered_at=0.0)
    return Device(id=f"f{i}", provider=Provider.FCM, token=f"fcm-{i:0140d}", registered_at=0.0)


async def pushes_round(
    count: int,
    apns_server: FakeApns,
    fcm: FakeFcm,
    fcm_url: str,
    tls_client: ssl.SSLContext,
    apns_pem: bytes,
    account: ServiceAccount,
) -> Round:
    """One round through fresh clients (one token each, as a gateway's first pushes)."""
    content = Content(strings=Catalogue())
    apns = ApnsClient(
        team_id=TEAM_ID,
        key_id=KEY_ID,
        signing_key=apns_pem,
        topic=TOPIC,
        content=content,
        production_url=apns_server.url,
        sandbox_url=apns_server.url,
        verify=tls_client,
    )
    client = FcmClient(account, content=content, base_url=fcm_url)
    failed: list[str] = []

    def record(delivery: object) -> None:
        if not getattr(delivery, "ok", False):
            failed.append(str(getattr(delivery, "reason", "?")))

    dispatcher = Dispatcher({Provider.APNS: apns, Provider.FCM: client}, record)
    try:
        result = await measured(
            count, lambda i: dispatcher.dispatch([device(i)], ask_note(i)), dispatcher.drain
        )
    finally:
        await dispatcher.aclose()
        await apns.aclose()
        await client.aclose()
    if failed:
        raise SystemExit(f"pushes failed: {sorted(set(failed))}")
    return result


async def baseline_round(count: int, url: str) -> Round:
    """The same number of bare POSTs, ``MAX_IN_FLIGHT`` at a time."""
    slots = asyncio.Semaphore(MAX_IN_FLIGHT)
    tasks: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession() as http:

        async def post(i: int) -> None:
            async with slots, http.post(url, data=ask_note(i).ask.encode()) as resp:
                await resp.read()

        def start(i: int) -> None:
            tasks.add(asyncio.create_task(post(i)))

        async def drain() -> None:
            await asyncio.gather(*tasks)

        return await measured(count, start, drain)


async def run(args: argparse.Namespace) -> tuple[list[Round], list[Round]]:
    apns_key = ec.generate_private_key(ec.SECP256R1())
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    async def ok(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"name": "ok"})

    plain = web.Application()
    plain.router.add_post("/send", ok)
    fcm = FakeFcm(public_key=rsa_key.public_key(), client_email=EMAIL, project_id=PROJECT)
    pushes: list[Round] = []
    bare: list[Round] = []
    with short_dir("cb-push-") as tmp:
        tls = make_tls(tmp)
        apns_server = await FakeApns(
            tls, public_key=apns_key.public_key(), key_id=KEY_ID, team_id=TEAM_ID
        ).start()
        try:
            async with serve(fcm.app()) as fcm_url, serve(plain) as plain_url:
                fcm.token_uri = fcm_url + "/token"
                account = service_account(rsa_key, fcm)
                for _ in range(args.rounds):
                    bare.append(await baseline_round(args.pushes, plain_url + "/send"))
                    pushes.append(
                        await pushes_round(
                            args.pushes,
                            apns_server,
                            fcm,
                            fcm_url,
                            tls.client,
                            pem(apns_key),
                            account,
                        )
                    )
        finally:
            await apns_server.aclose()
    return pushes, bare


def report(pushes: list[Round], bare: list[Round], count: int) -> None:
    def med(rounds: list[Round], pick: Callable[[Round], float]) -> float:
        return statistics.median(pick(r) for r in rounds)

    heading(f"the loop while {count} pushes go out (median of {len(pushes)} rounds)")
    for label, pick, unit in (
        ("largest stall, loop's CPU", lambda r: r.cpu_stall, 1e3),
        ("largest stall, wall clock", lambda r: r.stall, 1e3),
        ("p99 gap beyond the 2 ms tick", lambda r: r.p99_gap, 1e3),
        ("longest dispatch() call", lambda r: r.longest_call, 1e3),
        ("process CPU per push", lambda r: r.cpu_per_push, 1e3),
    ):
        ours, base = med(pushes, pick), med(bare, pick)
        row(
            label, f"{ours * unit:7.2f} ms   (bare POST {base * unit:6.2f} ms, {ratio(ours, base)})"
        )
    worst = max(r.cpu_stall for r in pushes) * 1e3
    row("worst CPU stall of any round", f"{worst:7.2f} ms")
    # Judged on the loop's own CPU time: on a shared machine the wall clock also counts the
    # time the scheduler gave the core to other processes.
    met = med(pushes, lambda r: r.cpu_stall) * 1e3 < STALL_TARGET_MS
    row(f"target: CPU stall under {STALL_TARGET_MS:.0f} ms", verdict(met))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--pushes", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    began = time.perf_counter()
    pushes, bare = asyncio.run(asyncio.wait_for(run(args), timeout=170.0))
    report(pushes, bare, args.pushes)
    print(f"\n(total {time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    main()
