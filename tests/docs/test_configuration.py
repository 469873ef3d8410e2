"""docs/configuration.md cannot drift: its reference part is what the parsers and the
environment variables the code reads generate now, and every ``COLLIE_*`` name the code reads
is described there (and nothing the code no longer reads)."""

from __future__ import annotations

import subprocess
import sys

from collie_gateway import docs_config
from collie_gateway.__main__ import _parser
from fixtures.agents.harness import REPO


def test_the_committed_page_is_the_generated_one() -> None:
    current = docs_config.PAGE.read_text(encoding="utf-8")
    assert current == docs_config.page(current), (
        "docs/configuration.md is stale: run python -m collie_gateway.docs_config"
    )


def test_check_says_stale_when_an_option_is_missing() -> None:
    current = docs_config.PAGE.read_text(encoding="utf-8")
    stale = current.replace("| `--public-url` |", "| `--gone` |")
    assert stale != current
    assert docs_config.page(stale) == current
    done = subprocess.run(
        [sys.executable, "-m", "collie_gateway.docs_config", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_every_option_of_every_command_is_on_the_page() -> None:
    page = docs_config.PAGE.read_text(encoding="utf-8")
    for words, parser in docs_config._commands(_parser(), ()):
        assert f"### `collie-gateway {' '.join(words)}`" in page
        for action in parser._actions:
            for option in action.option_strings:
                if option in ("-h", "--help"):
                    continue
                assert f"`{option}`" in page, (words, option)


def test_every_variable_the_code_reads_is_described_and_none_other() -> None:
    product = docs_config.names_in(docs_config.PRODUCT)
    assert product == set(docs_config.ENVIRONMENT)
    for_tests = docs_config.names_in(docs_config.FOR_TESTS) - product
    assert for_tests == set(docs_config.ENVIRONMENT_FOR_TESTS)
    page = docs_config.PAGE.read_text(encoding="utf-8")
    for name in product | for_tests:
        assert f"| `{name}` |" in page
