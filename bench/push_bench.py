"""A burst of 10,000 asks from 50 agents in one minute through the push limits (P1).

Prints how many pushes the limits let through (and why the rest were quiet), decisions per
second, the limiter's cost per ask beside a baseline loop doing the same bookkeeping with no
limiter, and the cost of building the APNs payload for each push sent. Issue 22: beside it, in
the same run, the cost of a Web Push for the same pushes — the payload, its ``aes128gcm``
encryption (a fresh P-256 key and ECDH per push) and the VAPID signature (once per origin
while it lives; also shown signed for every push).

Run: ``python bench/push_bench.py [--asks 10000] [--agents 50] [--panes 5]``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter

from cryptography.hazmat.primitives.asymmetric import ec

from collie_gateway.strings import Catalogue
from push import (
    AskNotification,
    Content,
    Device,
    Provider,
    PushLimiter,
    Quiet,
    Summary,
    WebPushClient,
    apns_request,
    vapid,
)
from push.webpush import encrypt
from push.webpush import subscription_keys as keys_of

TARGET_US = 20.0


def burst(asks: int, agents: int, panes: int, seed: int) -> list[tuple[str, str, float]]:
    """(pane key, agent key, time) for each ask, spread over one minute."""
    rng = random.Random(seed)
    start = 1_800_000_000.0
    out = []
    for i in range(asks):
        agent = rng.randrange(agents)
        pane = rng.randrange(panes)
        out.append((f"m/a{agent}/c{pane}", f"m/a{agent}", start + 60.0 * i / asks))
    return out


def webpush_costs(sent: list[tuple[str, str, float]], content: Content) -> dict[str, float]:
    """Seconds for the Web Push of every push sent: encrypted and signed as the client does
    (one VAPID token per origin), and the parts alone."""
    browser = ec.generate_private_key(ec.SECP256R1())  # the subscription's, as a browser's
    keys = keys_of(vapid.public_key(browser.public_key()), "BTBZMqHH6r4Tts7J_aSIgg")
    device = Device(
        id="w1", provider=Provider.WEBPUSH, token="https://push.example.org/p/1",
        registered_at=0.0, webpush=keys,
    )  # fmt: skip
    key = vapid.generate()
    client = WebPushClient(vapid_key=key, subject="mailto:bench@collie.test", content=content)
    notes = [
        AskNotification(
            machine="m", agent=agent, conversation=pane, ask="a", pane_key=pane, pane="Notes",
            title="Run ls?", line="In ~/notes",
        )
        for pane, agent, _ in sent
    ]  # fmt: skip
    costs: dict[str, float] = {}
    t0 = time.perf_counter()
    for note in notes:
        client.request(device, note)
        client.authorization(device.token)
    costs["Web Push per push sent"] = time.perf_counter() - t0
    plain = b"x" * 300
    t0 = time.perf_counter()
    for _ in notes:
        encrypt(keys, plain)
    costs["  of which aes128gcm (300 B)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in notes:
        vapid.authorization(key, "https://push.example.org", subject="mailto:b@c.d", now=0.0)
    costs["  VAPID signed every push"] = time.perf_counter() - t0
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asks", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--panes", type=int, default=5, help="conversations per agent")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    asks = burst(args.asks, args.agents, args.panes, args.seed)

    # Baseline: the same loop with the least bookkeeping a decision needs (a dict per key).
    seen: Counter[str] = Counter()
    t0 = time.perf_counter()
    for pane, agent, _ in asks:
        seen[pane] += 1
        seen[agent] += 1
    baseline = time.perf_counter() - t0

    limiter = PushLimiter()
    outcomes: Counter[str] = Counter()
    sent: list[tuple[str, str, float]] = []
    t0 = time.perf_counter()
    for pane, agent, now in asks:
        decision = limiter.decide(pane, agent, "desk-mac", now)
        if isinstance(decision, Quiet):
            outcomes[f"quiet: {decision.reason.value}"] += 1
        elif isinstance(decision, Summary):
            outcomes["summary push"] += 1
            sent.append((pane, agent, now))
        else:
            outcomes["push"] += 1
            sent.append((pane, agent, now))
    elapsed = time.perf_counter() - t0

    content = Content(strings=Catalogue())
    device = Device(id="d1", provider=Provider.APNS, token="ab" * 32, registered_at=0.0)
    t0 = time.perf_counter()
    for pane, agent, now in sent:
        note = AskNotification(
            machine="m", agent=agent, conversation=pane, ask="a", pane_key=pane, pane="Notes",
            title="Run ls?", line="In ~/notes",
        )  # fmt: skip
        apns_request(device, note, topic="app.collie", content=content, now=now)
    payloads = time.perf_counter() - t0
    web = webpush_costs(sent, content)

    per_ask = elapsed / len(asks) * 1e6
    print(f"== a burst of {len(asks):,} asks from {args.agents} agents in one minute")
    print(f"  pushes sent                    {len(sent):,}")
    for key, count in sorted(outcomes.items()):
        print(f"    {key:<28} {count:,}")
    print(f"  limiter decisions per second   {len(asks) / elapsed:,.0f}")
    print(f"  limiter cost per ask           {per_ask:.2f} µs")
    print(f"  baseline (two dict counts)     {baseline / len(asks) * 1e6:.2f} µs per ask")
    print(f"  ratio limiter / baseline       {elapsed / baseline:.1f}x")
    print(f"  APNs payload per push sent     {payloads / max(1, len(sent)) * 1e6:.1f} µs")
    for label, seconds in web.items():
        print(f"  {label:<30} {seconds / max(1, len(sent)) * 1e6:.1f} µs")
    verdict = "MET" if per_ask < TARGET_US else "MISSED"
    print(f"  target < {TARGET_US:.0f} µs per ask          {verdict}")


if __name__ == "__main__":
    main()
