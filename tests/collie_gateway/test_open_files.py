"""The open-files limit at start-up: raised to the hard limit, said in the log; a warning
when even that is short of what the agents' links need (docs/benchmarks.md, sizing)."""

from __future__ import annotations

import resource
import subprocess
import sys

SCRIPT = """
import logging, resource, sys
soft, hard = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stdout)
from collie_gateway.serving import raise_open_files
now = raise_open_files(int(sys.argv[3]))
print("soft", now, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def _run(soft: int, hard: int, links: int) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(soft), str(hard), str(links)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def _hard() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 4096 if hard == resource.RLIM_INFINITY else min(hard, 65536)


def test_the_soft_limit_is_raised_to_the_hard_one_and_said() -> None:
    hard = _hard()
    lines = _run(256, hard, 100)
    assert f"INFO open files: limit raised from 256 to {hard}" in lines
    assert lines[-1] == f"soft {hard} {hard}"
    assert not any(line.startswith("WARNING") for line in lines)


def test_a_hard_limit_short_of_the_links_is_a_warning_naming_ulimit() -> None:
    lines = _run(300, 400, 10_000)
    assert "INFO open files: limit raised from 300 to 400" in lines
    assert (
        "WARNING open files: the limit is 400, 10000 agent links need about 20256;"
        " raise it (ulimit -n)"
    ) in lines
    assert lines[-1] == "soft 400 400"
