"""Redaction on the fixtures/redaction corpus: hits, false alarms and masks per second.

Run: ``python bench/redact_bench.py [seconds]``. A hit is a secret fully masked (the text
around it unchanged, at most its public kind prefix left, no 4-character run of the rest); a
false alarm is an ordinary string changed. Each set is scored apart: in sample
(``secrets.json``, ``clean.json``: the rules were written against them) and out of sample
(``heldout.json``, ``heldout-2.json``: each written before the rules it tests, never tuned
on). The speed is process CPU time per mask over the in-sample texts.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the corpus is a fixture
from collie_gateway.redact import Redactor
from fixtures.redaction.corpus import HELD_OUT, Score, held_out, in_sample, score


def _rate(redactor: Redactor, texts: list[str], seconds: float) -> float:
    """Masks per second of process CPU time."""
    count = 0
    start = time.process_time()
    while (elapsed := time.process_time() - start) < seconds:
        for text in texts:
            redactor.mask(text)
        count += len(texts)
    return count / elapsed


def _report(title: str, result: Score) -> None:
    print(f"{title}: {result.hits} of {result.secrets} secrets masked,")
    print(f"  {len(result.alarms)} false alarms on {result.clean} ordinary strings")
    for description in result.misses:
        print(f"  missed: {description}")
    for text in result.alarms:
        print(f"  false alarm: {text!r}")


def main(seconds: float = 1.0) -> None:
    """Print the figures of every set, then the rates."""
    redactor = Redactor()
    secrets, clean = in_sample()
    _report("in sample (secrets.json, clean.json)", score(redactor.mask, secrets, clean))
    for name in HELD_OUT:
        _report(f"out of sample ({name})", score(redactor.mask, *held_out(name)))
    texts = [c["input"] for c in secrets]
    clean_texts = [c["input"] for c in clean]
    mean = sum(map(len, texts + clean_texts)) / len(texts + clean_texts)
    print(
        f"speed:   {_rate(redactor, texts + clean_texts, seconds):,.0f} masks/s CPU on the"
        f" in-sample corpus (mean {mean:.0f} chars)"
    )
    print(f"         {_rate(redactor, clean_texts, seconds):,.0f} masks/s CPU on clean text only")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
