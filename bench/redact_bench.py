"""Redaction on the fixtures/redaction corpus: hits, false alarms and masks per second.

Run: ``python bench/redact_bench.py [seconds]``. A hit is a secret fully masked (the exact
expected text, no 4-character run of the secret left); a false alarm is a clean string changed.
The figures come twice: in sample (``secrets.json``, ``clean.json``: the rules were written
against them) and out of sample (``heldout.json``: written before the rules it tests, never
tuned on).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from collie_gateway.redact import Redactor

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "redaction"


def _hit(redactor: Redactor, case: dict[str, str]) -> bool:
    out = redactor.mask(case["input"])
    body = case["secret"][len(case["kept"]) :]
    leaked = any(body[i : i + 4] in out for i in range(len(body) - 3))
    return out == case["expect"] and not leaked


def _rate(redactor: Redactor, texts: list[str], seconds: float) -> float:
    count = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for text in texts:
            redactor.mask(text)
        count += len(texts)
    return count / elapsed


def main(seconds: float = 1.0) -> None:
    """Print the counts and the rates."""
    secrets = json.loads((CORPUS / "secrets.json").read_text("utf-8"))
    clean = json.loads((CORPUS / "clean.json").read_text("utf-8"))
    redactor = Redactor()
    misses = [c["description"] for c in secrets if not _hit(redactor, c)]
    alarms = [c["input"] for c in clean if redactor.mask(c["input"]) != c["input"]]
    print(f"secrets: {len(secrets)} cases, {len(secrets) - len(misses)} hits, {len(misses)} missed")
    for description in misses:
        print(f"  missed: {description}")
    print(f"clean:   {len(clean)} cases, {len(alarms)} false alarms")
    for text in alarms:
        print(f"  false alarm: {text!r}")
    held = json.loads((CORPUS / "heldout.json").read_text("utf-8"))
    held_misses = [c["description"] for c in held["secrets"] if not _hit(redactor, c)]
    held_alarms = [c["input"] for c in held["clean"] if redactor.mask(c["input"]) != c["input"]]
    hits = len(held["secrets"]) - len(held_misses)
    print(f"out of sample (heldout.json): {hits} of {len(held['secrets'])} secrets masked,")
    print(f"  {len(held_alarms)} false alarms on {len(held['clean'])} ordinary strings")
    for description in held_misses:
        print(f"  missed: {description}")
    for text in held_alarms:
        print(f"  false alarm: {text!r}")
    texts = [c["input"] for c in secrets]
    clean_texts = [c["input"] for c in clean]
    mean = sum(map(len, texts + clean_texts)) / len(texts + clean_texts)
    print(
        f"speed:   {_rate(redactor, texts + clean_texts, seconds):,.0f} masks/s on the corpus"
        f" (mean {mean:.0f} chars)"
    )
    print(f"         {_rate(redactor, clean_texts, seconds):,.0f} masks/s on clean text only")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
