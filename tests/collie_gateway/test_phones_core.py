"""The pure rules of phones (issue 21): codes, tokens, scopes, the check number, the link and
the limiter of failed pairings."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collie_gateway.core import phones
from collie_gateway.core.phones import (
    ADMIN,
    CODE_TRANSITIONS,
    OPEN,
    Caller,
    CodeInput,
    CodeState,
    Effect,
    FailureLimiter,
    Kind,
    Pairing,
    PairingLink,
    Scope,
    Verdict,
)
from collie_gateway.http.routes import ROUTES

T0 = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
READER = Caller(Kind.PHONE, "p-1", Scope.READ)
ANSWERER = Caller(Kind.PHONE, "p-2", Scope.ANSWER)


def template(path: str) -> str:
    """A route's path as aiohttp's canonical form names it (``{tail:.+}`` is ``{tail}``)."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)


# --- codes ------------------------------------------------------------------------------------


def test_a_code_holds_160_random_bits_and_never_repeats() -> None:
    codes = [phones.new_code() for _ in range(1000)]
    assert len(set(codes)) == 1000
    for code in codes[:50]:
        assert re.fullmatch(r"[a-z2-7]{4}(-[a-z2-7]{4}){7}", code)
        raw = base64.b32decode(phones.normal_code(code).upper())
        assert len(raw) * 8 == 160 >= 128


def test_a_typed_code_forgives_case_dashes_and_look_alike_digits() -> None:
    code = "abcd-efgh-ijkl-mnop-qrst-uvwx-yz23-4567"
    typed = " ABCD EFGH 1JKL MN0P-QRST-UVWX-YZ23-4567 "
    assert phones.code_hash(typed) == phones.code_hash(code)
    assert phones.code_hash("abcd") != phones.code_hash(code)


def pairing(state: CodeState = CodeState.PENDING) -> Pairing:
    return Pairing("k-1", "h", Scope.ANSWER, T0, T0 + phones.CODE_TTL, state)


def test_a_code_pairs_once_within_five_minutes() -> None:
    assert timedelta(minutes=5) == phones.CODE_TTL
    assert phones.redeem(pairing(), T0) == (Effect.PAIR, CodeState.USED)
    just_before = T0 + timedelta(minutes=5) - timedelta(microseconds=1)
    assert phones.redeem(pairing(), just_before) == (Effect.PAIR, CodeState.USED)
    at_five = T0 + timedelta(minutes=5)
    assert phones.redeem(pairing(), at_five) == (Effect.REFUSE_EXPIRED, CodeState.EXPIRED)
    assert phones.redeem(pairing(CodeState.USED), T0) == (Effect.REFUSE_USED, CodeState.USED)
    # A used code stays used once its time is over: "used" is what the person is told.
    late = T0 + timedelta(hours=1)
    assert phones.redeem(pairing(CodeState.USED), late) == (Effect.REFUSE_USED, CodeState.USED)
    assert phones.redeem(None, T0) == (Effect.NOTHING, None)


def test_the_code_table_is_whole() -> None:
    assert set(CODE_TRANSITIONS) == {(s, i) for s in CodeState for i in CodeInput}


@given(st.sampled_from(CodeState), st.sampled_from(CodeInput))
def test_every_pair_of_the_code_table(state: CodeState, event: CodeInput) -> None:
    """Each (state, input): only a pending code pairs; nothing leads back to pending."""
    effect, after = phones.step(state, event)
    pairs = (state, event) == (CodeState.PENDING, CodeInput.REDEEM)
    assert (effect is Effect.PAIR) == pairs
    if state is not CodeState.PENDING:
        assert after is state
    elif event is CodeInput.TIMEOUT:
        assert (effect, after) == (Effect.NOTHING, CodeState.EXPIRED)


@given(st.lists(st.sampled_from(CodeInput), max_size=30))
def test_a_walk_pairs_at_most_once(events: list[CodeInput]) -> None:
    state, paired = CodeState.PENDING, 0
    for event in events:
        effect, state = phones.step(state, event)
        paired += effect is Effect.PAIR
    assert paired <= 1
    assert paired == 1 or state is not CodeState.USED


def test_the_check_number_is_six_digits_of_code_and_key() -> None:
    code = phones.new_code()
    check = phones.check_number(code, "key-A")
    assert re.fullmatch(r"\d{6}", check)
    assert phones.check_number(code.upper(), "key-A") == check  # the phone types it its way
    assert phones.check_number(code, "key-B") != check
    assert phones.check_number(phones.new_code(), "key-A") != check
    assert phones.check_number(code, None) == phones.check_number(code, "")


# --- tokens -----------------------------------------------------------------------------------


def test_a_token_holds_256_random_bits_and_only_its_hash_is_kept() -> None:
    token = phones.new_token("p-abc")
    prefix, phone_id, secret = token.split(".")
    assert (prefix, phone_id) == ("collie", "p-abc")
    assert len(base64.urlsafe_b64decode(secret + "=")) * 8 == 256
    hashed = phones.token_hash(token)
    assert re.fullmatch(r"[0-9a-f]{64}", hashed)
    assert token not in hashed
    assert phones.token_matches(token, hashed)
    assert not phones.token_matches(token[:-1] + ("A" if token[-1] != "A" else "B"), hashed)
    assert phones.new_token("p-abc") != token


@pytest.mark.parametrize(
    ("given", "phone_id"),
    [
        ("collie.p-1.secret", "p-1"),
        ("collie.p-1", None),
        ("collie..secret", None),
        ("collie.p-1.", None),
        ("other.p-1.secret", None),
        ("collie.p-1.a.b", None),
        ("collie.p-1." + "x" * 300, None),
        ("", None),
    ],
)
def test_a_token_names_its_phone(given: str, phone_id: str | None) -> None:
    assert phones.token_phone(given) == phone_id


# --- who may do what --------------------------------------------------------------------------


def test_a_read_phone_reads_everything_and_acts_nowhere() -> None:
    acts = []
    for route in ROUTES:
        key = (route.method, template(route.path))
        verdict = phones.authorize(READER, *key)
        if key in phones.ADMIN_ROUTES:
            assert verdict is Verdict.ADMIN_ONLY, route.path
        elif route.method == "GET" or key in phones.READ_MAY or key in phones.PUBLIC_ROUTES:
            assert verdict is Verdict.ALLOW, route.path
        else:
            assert verdict is Verdict.READ_ONLY, route.path
            acts.append(route.path.rsplit("/", 1)[-1])
    # answers, messages, commands, starters, device registration: each refused
    assert {"answer", "messages", "stop", "{button}", "close", "reopen"} <= set(acts)
    assert {"conversations", "devices", "{device}", "{tail:.+}"} <= set(acts)
    assert phones.authorize(READER, "POST", "/api/v1/presence") is Verdict.ALLOW
    assert phones.authorize(READER, "DELETE", "/api/v1/phones/{phone}") is Verdict.ALLOW


def test_an_answer_phone_does_everything_but_pair_others() -> None:
    for route in ROUTES:
        key = (route.method, template(route.path))
        admin_only = key in phones.ADMIN_ROUTES
        want = Verdict.ADMIN_ONLY if admin_only else Verdict.ALLOW
        assert phones.authorize(ANSWERER, *key) is want, route.path
        assert phones.authorize(ADMIN, *key) is Verdict.ALLOW
        assert phones.authorize(OPEN, *key) is Verdict.ALLOW
    assert phones.authorize(ANSWERER, "POST", "/api/v1/pairings") is Verdict.ADMIN_ONLY
    assert phones.authorize(READER, "GET", "/api/v1/pairings/{pairing}") is Verdict.ADMIN_ONLY


def test_without_a_credential_only_health_and_pairing() -> None:
    public = []
    for route in ROUTES:
        verdict = phones.authorize(None, route.method, template(route.path))
        if verdict is Verdict.ALLOW:
            public.append((route.method, route.path))
        else:
            assert verdict is Verdict.UNAUTHORIZED
    assert public == [("GET", "/healthz"), ("POST", "/api/v1/pair")]
    assert phones.authorize(None, "GET", "/api/v1/pair") is Verdict.UNAUTHORIZED


def test_a_phone_revokes_itself_only() -> None:
    assert phones.may_revoke(READER, "me") is Verdict.ALLOW
    assert phones.may_revoke(READER, "p-1") is Verdict.ALLOW
    assert phones.may_revoke(READER, "p-2") is Verdict.ADMIN_ONLY
    assert phones.may_revoke(ADMIN, "p-2") is Verdict.ALLOW
    assert phones.may_revoke(OPEN, "p-2") is Verdict.ALLOW
    assert phones.may_revoke(phones.NOBODY, "me") is Verdict.ADMIN_ONLY


def test_nobody_acts_and_nobody_passes_where_a_credential_is_needed() -> None:
    assert not phones.NOBODY.acts
    assert (OPEN.acts, ADMIN.acts, ANSWERER.acts, READER.acts) == (True, True, True, False)
    assert phones.authorize(phones.NOBODY, "GET", "/api/v1/dashboard") is Verdict.UNAUTHORIZED
    assert phones.authorize(phones.NOBODY, "POST", "/api/v1/pair") is Verdict.ALLOW


def test_the_page_changes_state_only_from_its_own_origin() -> None:
    own = ["https://gw.example:8765"]
    assert phones.origin_ok("GET", "https://evil.example", own)
    assert phones.origin_ok("POST", "https://gw.example:8765", own)
    assert phones.origin_ok("DELETE", "HTTPS://GW.EXAMPLE:8765/", own)
    assert not phones.origin_ok("POST", "https://evil.example", own)
    assert not phones.origin_ok("POST", None, own)
    assert not phones.origin_ok("POST", "null", own)
    assert not phones.origin_ok("POST", "https://gw.example:8766", own)


# --- the link ---------------------------------------------------------------------------------


def test_the_link_carries_code_addresses_and_fingerprint() -> None:
    link = PairingLink(
        "abcd-efgh",
        ("https://gw.tail1234.ts.net", "http://192.168.1.5:8765/x?y=1&z"),
        "ab" * 32,
    )
    text = str(link)
    assert text.startswith("collie://pair?code=abcd-efgh&url=https%3A%2F%2Fgw.tail1234")
    assert text.endswith("&fp=sha256%3A" + "ab" * 32)
    assert PairingLink.parse(text) == link
    assert PairingLink.parse(str(PairingLink("c"))) == PairingLink("c")


@pytest.mark.parametrize(
    "text",
    ["https://pair?code=x", "collie://other?code=x", "collie://pair?url=u", "collie://pair"],
)
def test_what_is_no_pairing_link(text: str) -> None:
    with pytest.raises(ValueError, match="pairing link"):
        PairingLink.parse(text)


def test_a_fingerprint_as_people_compare_it() -> None:
    assert phones.spaced_fingerprint("ab01cd") == "AB:01:CD"


# --- failed pairings --------------------------------------------------------------------------


def test_the_eleventh_failure_in_a_minute_waits() -> None:
    limiter = FailureLimiter()
    for i in range(10):
        assert limiter.retry_after("203.0.113.5", 100.0 + i) is None
        limiter.failed("203.0.113.5", 100.0 + i)
    assert limiter.retry_after("203.0.113.5", 110.0) == 50  # the first failure leaves at 160
    assert limiter.retry_after("203.0.113.6", 110.0) is None  # another address is not held
    assert limiter.retry_after("203.0.113.5", 159.5) == 1
    assert limiter.retry_after("203.0.113.5", 160.0) is None  # one failure left the window


def test_10000_wrong_codes_from_one_address_get_ten_tries_a_minute() -> None:
    limiter = FailureLimiter()
    tried = []
    now = 0.0
    for _ in range(10_000):  # 100 a second for 100 seconds
        if limiter.retry_after("198.51.100.7", now) is None:
            tried.append(now)
            limiter.failed("198.51.100.7", now)
        now += 0.01
    assert len(tried) == 20  # 10 at once, 10 more a minute later
    for i, at in enumerate(tried):
        assert len([t for t in tried[: i + 1] if t > at - 60]) <= 10


def test_one_machines_ipv6_addresses_count_together() -> None:
    limiter = FailureLimiter()
    for i in range(10):
        limiter.failed(f"2001:db8:1:2::{i + 1:x}", 0.0)
    assert limiter.retry_after("2001:db8:1:2:ffff::9", 1.0) == 59
    assert limiter.retry_after("2001:db8:1:3::1", 1.0) is None
    assert phones.address_key("::ffff:198.51.100.7") == "198.51.100.7"
    assert phones.address_key("fe80::1%eth0") == "fe80::/64"
    assert phones.address_key(None) == "?"
    assert phones.address_key("not an address") == "not an address"


def test_the_limiter_remembers_a_bounded_number_of_addresses() -> None:
    limiter = FailureLimiter(max_addresses=100)
    for i in range(10_000):
        limiter.failed(f"10.0.{i // 256}.{i % 256}", 0.0)
    assert len(limiter._failures) == 100
    assert limiter.retry_after("10.0.0.0", 1.0) is None  # the oldest were forgotten


def test_a_failure_counted_before_the_lookup_is_taken_back_when_it_pairs() -> None:
    limiter = FailureLimiter()
    for i in range(9):
        limiter.failed("203.0.113.5", float(i))
    limiter.failed("203.0.113.5", 9.5)  # counted as the code is looked up
    assert limiter.retry_after("203.0.113.5", 10.0) == 50
    limiter.forgive("203.0.113.5", 9.5)  # it paired
    assert limiter.retry_after("203.0.113.5", 10.0) is None
    limiter.forgive("203.0.113.5", 99.0)  # nothing counted then: nothing changes
    limiter.forgive("203.0.113.9", 1.0)  # an address never seen
    assert limiter.retry_after("203.0.113.5", 10.0) is None
