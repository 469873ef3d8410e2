"""The CPU a streamed item's masking adds to each delta (X1 while written).

Run: ``python bench/live_mask_bench.py [--rounds N]``. For four streams — the chat bench's
words (``w123 ``), prose naming keywords ("token", "key"), code dense with keywords in
4-character pieces, a PEM block in 4-character pieces — it times ``ShownText.feed`` per piece
(cleaning alone, the baseline) beside ``ShownText.feed`` with ``ShownText.live`` kept
(cleaning and ``LiveMask``), interleaved in this process, best of ``--rounds``; process CPU.
Then a 100 KB base64 run in 4-character pieces (it must stay linear).
"""

from __future__ import annotations

import argparse
import time

from collie_gateway.core.cleaning import ShownText
from collie_gateway.core.redact import Redactor

LIMIT = 200_000  # CHAT_TEXT_LIMIT
TARGET_US = 10.0  # ours: added per plain-word delta (≤ 50 µs for all of it: chat_bench.py)


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def streams() -> dict[str, list[str]]:
    prose = "The quick brown fox jumps over the lazy dog; we counted each token and the key. "
    code = (
        "API_KEY = os.environ['KEY']\npassword = get_secret()\n"
        "headers = {'Authorization': f'Bearer {token}'}\n"
    )
    line = "MIIEowIBAAKCAQEAx4aV1b2cD3eF4gH5iJ6kL7mN8oP9qR0sT1uV2wX3yZ4aB5cD\n"
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{line * 25}-----END RSA PRIVATE KEY-----\nok "
    return {
        "chat bench words (w123 )": [f"w{i} " for i in range(20_000)],
        "prose naming keywords, a word a delta": [w + " " for w in (prose * 300).split(" ")],
        "code dense with keywords, 4 characters a delta": pieces(code * 200, 4),
        "a PEM block, 4 characters a delta": pieces(pem, 4) * 10,
    }


def per_piece(texts: list[str], live: bool, mask: Redactor) -> float:
    """Process CPU µs per piece for one stream."""
    shown = ShownText(LIMIT)
    start = time.process_time()
    for text in texts:
        if live:  # as the gateway's live path does for each delta
            shown.keep_live(mask.mask)
        shown.feed(text)
    return (time.process_time() - start) / len(texts) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    mask = Redactor()
    print("== CPU per delta: cleaning (baseline) vs cleaning + masking while written")
    worst_plain = 0.0
    for name, texts in streams().items():
        base, live = [], []
        for _ in range(args.rounds):  # interleaved: the machine's noise hits both alike
            base.append(per_piece(texts, False, mask))
            live.append(per_piece(texts, True, mask))
        added = min(live) - min(base)
        if name.startswith("chat bench"):
            worst_plain = added
        print(f"  {name:50} {min(base):6.1f} → {min(live):6.1f} µs  (+{added:.1f} µs)")
    blob = "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAA" * 2_000
    for size in (25_000, 100_000):
        texts = pieces(blob[:size] + " done ", 4)
        print(f"  a {size:,}-character run, 4 a delta {per_piece(texts, True, mask):18.1f} µs")
    verdict = "MET" if worst_plain <= TARGET_US else "MISSED"
    print(f"  target: ≤ {TARGET_US:.0f} µs added per plain-word delta   {verdict}")


if __name__ == "__main__":
    main()
