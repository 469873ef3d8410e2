"""Redaction on the fixtures/redaction corpus: hits, false alarms and masks per second.

Run: ``python bench/redact_bench.py [seconds]``. A hit is a secret fully masked (the text
around it unchanged, at most its public kind prefix left, no 4-character run of the rest); a
false alarm is an ordinary string changed. Each set is scored apart: in sample
(``secrets.json``, ``clean.json``: the rules were written against them) and out of sample
(``heldout.json``, ``heldout-2.json``, ``heldout-3.json``: each written before the rules it
tests, never tuned on). Then a large sample of ordinary text (``fixtures/redaction/ordinary.py``,
20,000 generated lines an agent prints): its false alarms. The speed is masks per second of
process CPU time over the in-sample texts.

``--baseline FILE`` also times another version of ``redact.py`` (e.g. from
``git show 7fcd29f:collie_gateway/core/redact.py``) on the same texts, interleaved in this
process, and prints the ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable

from collie_gateway.core.redact import Redactor
from fixtures.redaction.corpus import HELD_OUT, Score, held_out, in_sample, score
from fixtures.redaction.ordinary import ordinary_lines


def _rate(redactor: Redactor, texts: list[str], seconds: float) -> float:
    """Masks per second of process CPU time."""
    count = 0
    start = time.process_time()
    while (elapsed := time.process_time() - start) < seconds:
        for text in texts:
            redactor.mask(text)
        count += len(texts)
    return count / elapsed


def _load(path: str) -> Callable[[str], str]:
    """The ``Redactor().mask`` of another copy of ``redact.py``."""
    spec = importlib.util.spec_from_file_location("redact_baseline", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--baseline: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["redact_baseline"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    mask: Callable[[str], str] = module.Redactor().mask
    return mask


def _cpu_per_mask(mask: Callable[[str], str], texts: list[str]) -> float:
    start = time.process_time()
    for _ in range(5):
        for text in texts:
            mask(text)
    return (time.process_time() - start) / (5 * len(texts))


def _compare(baseline: Callable[[str], str], texts: list[str], title: str) -> None:
    """Median CPU per mask of 7 interleaved rounds, this version against the baseline."""
    ours, theirs = [], []
    for _ in range(7):
        theirs.append(_cpu_per_mask(baseline, texts))
        ours.append(_cpu_per_mask(Redactor().mask, texts))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"  {title}: {a * 1e6:.1f} µs vs baseline {b * 1e6:.1f} µs CPU per mask: {a / b:.2f}×")


def _report(title: str, result: Score) -> None:
    print(f"{title}: {result.hits} of {result.secrets} secrets masked,")
    print(f"  {len(result.alarms)} false alarms on {result.clean} ordinary strings")
    for description in result.misses:
        print(f"  missed: {description}")
    for text in result.alarms:
        print(f"  false alarm: {text!r}")


def main(seconds: float = 1.0, baseline: str | None = None) -> None:
    """Print the figures of every set, then the rates (and the ratio to ``baseline``)."""
    redactor = Redactor()
    secrets, clean = in_sample()
    _report("in sample (secrets.json, clean.json)", score(redactor.mask, secrets, clean))
    for name in HELD_OUT:
        _report(f"out of sample ({name})", score(redactor.mask, *held_out(name)))
    lines = ordinary_lines()
    alarms = [line for line in lines if redactor.mask(line) != line]
    print(f"large ordinary sample: {len(alarms)} false alarms on {len(lines):,} lines")
    for line in alarms[:10]:
        print(f"  false alarm: {line!r}")
    texts = [c["input"] for c in secrets]
    clean_texts = [c["input"] for c in clean]
    mean = sum(map(len, texts + clean_texts)) / len(texts + clean_texts)
    print(
        f"speed:   {_rate(redactor, texts + clean_texts, seconds):,.0f} masks/s CPU on the"
        f" in-sample corpus (mean {mean:.0f} chars)"
    )
    print(f"         {_rate(redactor, clean_texts, seconds):,.0f} masks/s CPU on clean text only")
    if baseline is not None:
        print(f"against {baseline}:")
        other = _load(baseline)
        _compare(other, texts + clean_texts, "in-sample corpus")
        _compare(other, clean_texts, "clean text only")
        _compare(other, lines[:2_000], "large ordinary sample (2,000 lines)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seconds", nargs="?", type=float, default=1.0)
    parser.add_argument("--baseline", help="another redact.py to time against")
    args = parser.parse_args()
    main(args.seconds, args.baseline)
