"""The shared retry policy and the Retry-After parser."""

from __future__ import annotations

import pytest

from push import RetryPolicy
from push._retry import parse_retry_after

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (" 0 ", 0.0),
        ("Tue, 14 Nov 2023 22:13:40 GMT", 20.0),  # NOW + 20 s
        ("Tue, 14 Nov 2023 22:13:00 GMT", 0.0),  # in the past
        (None, None),
        ("", None),
        ("-1", None),
        ("1.5", None),
        ("٣", None),  # not an ASCII digit
        ("soon", None),
        ("Tue, 14 Nov 2023 22:13:40", None),  # no zone
    ],
)
def test_parse_retry_after(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, NOW) == seconds


def test_policy_stops_after_max_tries_and_on_a_long_retry_after() -> None:
    policy = RetryPolicy(max_tries=3, base=0.5, cap=8.0, max_retry_after=30.0)
    assert policy.delay(1, None, lambda: 0.0) == 0.25
    assert policy.delay(2, 30.0, lambda: 0.0) == 30.0
    assert policy.delay(2, 30.5, lambda: 0.0) is None
    assert policy.delay(3, None, lambda: 0.0) is None
