"""Issue 22: push health — each provider's last success and last failure with its reason."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from push import Delivery, Outcome, Provider
from push.health import PushHealth

T = 1_700_000_000.0


def delivery(outcome: Outcome, reason: str | None = None, status: int | None = None) -> Delivery:
    return Delivery(device_id="d1", outcome=outcome, reason=reason, status=status)


def test_a_failure_after_a_success_shows_with_its_reason() -> None:
    health = PushHealth()
    assert health.record(Provider.APNS, delivery(Outcome.SENT), T)
    assert health.record(
        Provider.APNS, delivery(Outcome.FAILED, "InvalidProviderToken", 403), T + 60
    )
    report = health.report([Provider.APNS, Provider.WEBPUSH])
    assert report == {
        "apns": {
            "configured": True,
            "ok": False,
            "last_success": {"at": T},
            "last_failure": {"at": T + 60, "reason": "InvalidProviderToken"},
        },
        "webpush": {"configured": True, "ok": None, "last_success": None, "last_failure": None},
    }
    health.record(Provider.APNS, delivery(Outcome.SENT), T + 120)
    assert health.report([Provider.APNS])["apns"]["ok"] is True  # type: ignore[index]


def test_a_gone_token_is_the_devices_fault_and_a_cancelled_push_says_nothing() -> None:
    health = PushHealth()
    health.record(Provider.FCM, delivery(Outcome.GONE, "UNREGISTERED", 404), T)
    assert not health.record(Provider.FCM, delivery(Outcome.FAILED, "cancelled"), T + 1)
    assert health.report([Provider.FCM])["fcm"] == {
        "configured": True, "ok": True, "last_success": {"at": T}, "last_failure": None,
    }  # fmt: skip


def test_throttled_is_a_failure() -> None:
    health = PushHealth()
    health.record(Provider.WEBPUSH, delivery(Outcome.THROTTLED, "HTTP 429", 429), T)
    entry = health.report([])["webpush"]
    assert entry == {
        "configured": False, "ok": False, "last_success": None,
        "last_failure": {"at": T, "reason": "HTTP 429"},
    }  # fmt: skip


@given(
    st.lists(
        st.tuples(
            st.sampled_from(Provider),
            st.sampled_from(Outcome),
            st.one_of(st.none(), st.text(max_size=20)),
            st.floats(min_value=0, max_value=2e9),
        ),
        max_size=20,
    )
)
def test_the_state_survives_a_restart(
    events: list[tuple[Provider, Outcome, str | None, float]],
) -> None:
    health = PushHealth()
    for provider, outcome, reason, at in events:
        health.record(provider, delivery(outcome, reason), at)
    again = PushHealth.from_state(health.to_state())
    assert again.report(list(Provider)) == health.report(list(Provider))


@pytest.mark.parametrize(
    "state",
    [
        b"",
        b"{}",
        b"[]",
        b'{"v": 2, "providers": {}}',
        b'{"v": 1, "providers": {"x": [null, null, null]}}',
        b'{"v": 1, "providers": {"apns": [{"at": "soon"}, null, true]}}',
    ],
)
def test_an_unreadable_state_is_refused(state: bytes) -> None:
    with pytest.raises(ValueError, match="not a push health state"):
        PushHealth.from_state(state)
