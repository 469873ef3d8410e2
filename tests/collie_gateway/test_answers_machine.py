"""The answer state machine (spec T1; people-in-the-loop S5; wire §11, §12.1).

As in h2's ``test_state_machines``, the machine is driven directly rather than through its
shell: :mod:`collie_gateway.core.answers` is pure, so a test plays the ledger (what
:mod:`collie_gateway.services.answering` keeps in SQLite), the agent and the link between them, and
states what must hold after every step. The example tests below it walk T1's table row by row.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from collie_gateway.core.answers import (
    AGENT_OUTCOMES,
    Action,
    Outcome,
    Record,
    Tap,
    TapDecision,
    card_state,
    on_result,
    on_tap,
)
from collie_gateway.strings import Catalogue
from collie_gateway.views.cards import OutcomeLine, outcome_line

CAT = Catalogue()
AGENT = "desk"
ASKS = ("ask-1", "ask-2")
ALLOW = b'{"option":"allow"}'
DENY = b'{"option":"deny"}'
UNFIT = b'{"option":"nonsense"}'  # an answer that does not fit the ask: 400, nothing recorded
ANSWERS = (ALLOW, DENY, UNFIT)

# A small pool of request ids, so that two phones sometimes pick the same one.
request_ids = st.sampled_from([f"r{n}" for n in range(6)])
asks = st.sampled_from(ASKS)
answers = st.sampled_from(ANSWERS)


class Fate(enum.Enum):
    """What the link does with one send."""

    DELIVERED = "delivered"
    LOST_BEFORE = "lost before the agent"  # the agent never saw it
    LOST_AFTER = "lost after the agent acted"  # the agent decided; its answer never came back


fates = st.sampled_from(Fate)


class UnfitAnswer(Exception):
    """The agent's 400 bad_request: nothing is recorded or applied (wire §11)."""


@dataclass
class AgentAsk:
    """One ask as the agent holds it."""

    version: int = 1
    status: str = "open"  # open | answered | decided | expired | gone
    answered_by: str | None = None


@dataclass
class Agent:
    """A durable agent that keeps wire §11 and decides replies in §12.1's order."""

    asks: dict[str, AgentAsk] = field(default_factory=lambda: {a: AgentAsk() for a in ASKS})
    records: dict[str, tuple[tuple[str, int, bytes], str]] = field(default_factory=dict)
    acted: dict[str, list[str]] = field(default_factory=lambda: {a: [] for a in ASKS})

    def reply(self, tap: Tap) -> str:
        body = (tap.ask_id, tap.version, tap.answer)
        first = self.records.get(tap.request_id)
        if first is not None:
            # The gateway never reuses a request id for another body (a 409 here is its bug).
            assert first[0] == body, f"request id {tap.request_id} reused for another answer"
            return first[1]
        ask = self.asks[tap.ask_id]
        if ask.status == "gone":
            outcome = "not_open"
        elif ask.status in ("answered", "decided", "expired"):
            outcome = ask.status
        elif tap.version != ask.version:
            outcome = "changed"
        elif tap.answer == UNFIT:
            raise UnfitAnswer
        else:
            outcome = "accepted"
            ask.status, ask.answered_by = "answered", tap.request_id
            self.acted[tap.ask_id].append(tap.request_id)
        self.records[tap.request_id] = (body, outcome)
        return outcome


class AnswersMachine(RuleBasedStateMachine):
    """Phones tap, the link loses things, the agent decides and expires, the gateway restarts.

    The ledger and the claims are what ``answering.Answering`` keeps, written as it writes
    them: a reply's record only when the request id is new; a send's record and claim before
    the send; the settlement and the claim's release after it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ledger: dict[str, Record] = {}  # request id -> record
        self.claims: dict[str, str] = {}  # ask id -> the request id holding its claim
        self.agent = Agent()
        self.sent: list[Tap] = []  # every tap that left the gateway
        self.settled_seen: dict[str, Record] = {}

    # --- the gateway, as answering.Answering runs the pure machine --------------------------

    def tap(self, tap: Tap, fate: Fate) -> TapDecision:
        existing = self.ledger.get(tap.request_id)
        decision = on_tap(existing, self.claims.get(tap.ask_id), tap)
        if decision.action is Action.REPLY:
            if existing is None:
                self.ledger[tap.request_id] = decision.record
            return decision
        self.ledger[tap.request_id] = decision.record
        if decision.claim:
            # The claims table's primary key: one holder per ask.
            assert self.claims.get(tap.ask_id, tap.request_id) == tap.request_id
            self.claims[tap.ask_id] = tap.request_id
        agent_outcome, reason = self.send(decision.record.tap, fate)
        settlement = on_result(decision.record, agent_outcome, reason)
        self.ledger[tap.request_id] = settlement.record
        if settlement.release_claim and self.claims.get(tap.ask_id) == tap.request_id:
            del self.claims[tap.ask_id]
        return decision

    def send(self, tap: Tap, fate: Fate) -> tuple[str | None, str | None]:
        self.sent.append(tap)
        if fate is Fate.LOST_BEFORE:
            return None, None
        try:
            outcome = self.agent.reply(tap)
        except UnfitAnswer:
            return "refused", "That option is not one of this ask's."
        if fate is Fate.LOST_AFTER:
            return None, None
        return outcome, None

    def version_seen(self, ask_id: str, stale: bool) -> int:
        version = self.agent.asks[ask_id].version
        return version - 1 if stale and version > 1 else version

    # --- rules ---------------------------------------------------------------------------

    @rule(
        request_id=request_ids,
        ask_id=asks,
        answer=answers,
        stale=st.booleans(),
        fate=fates,
    )
    def phone_taps(
        self, request_id: str, ask_id: str, answer: bytes, stale: bool, fate: Fate
    ) -> None:
        """A phone taps an answer under a request id, new or (by chance) already used."""
        tap = Tap(request_id, AGENT, ask_id, self.version_seen(ask_id, stale), answer)
        existing = self.ledger.get(request_id)
        holder = self.claims.get(ask_id)
        sent_before = len(self.sent)
        decision = self.tap(tap, fate)
        if existing is not None and existing.tap != tap:
            self.check_conflict(existing, decision, sent_before)
        elif existing is None and holder is not None:
            # S5: another request id holds the claim, so this one loses without sending.
            assert decision.action is Action.REPLY
            assert decision.record.outcome is Outcome.ANSWERED
            assert decision.record.settled
            assert len(self.sent) == sent_before

    @precondition(lambda self: bool(self.ledger))
    @rule(data=st.data(), fate=fates)
    def phone_retries(self, data: st.DataObject, fate: Fate) -> None:
        """A phone sends a tap again with its request id (Retry, or a repeated request)."""
        request_id = data.draw(st.sampled_from(sorted(self.ledger)), label="request_id")
        before = self.ledger[request_id]
        sent_before = len(self.sent)
        decision = self.tap(before.tap, fate)
        if before.settled:
            assert decision == TapDecision(Action.REPLY, before)
            assert len(self.sent) == sent_before
        else:
            assert decision.action is Action.SEND
            assert not decision.claim
            assert decision.record.attempts == before.attempts + 1
            assert self.sent[sent_before:] == [before.tap]

    @precondition(lambda self: bool(self.ledger))
    @rule(data=st.data(), answer=answers, fate=fates)
    def phone_reuses_request_id(self, data: st.DataObject, answer: bytes, fate: Fate) -> None:
        """The same request id with another answer (or for another ask): refused, unsent."""
        request_id = data.draw(st.sampled_from(sorted(self.ledger)), label="request_id")
        before = self.ledger[request_id]
        other = (
            Tap(request_id, AGENT, before.tap.ask_id, before.tap.version, answer)
            if answer != before.tap.answer
            else Tap(request_id, AGENT, before.tap.ask_id, before.tap.version + 1, answer)
        )
        sent_before = len(self.sent)
        self.check_conflict(before, self.tap(other, fate), sent_before)

    def check_conflict(self, before: Record, decision: TapDecision, sent_before: int) -> None:
        assert decision.action is Action.REPLY
        assert decision.record.outcome is Outcome.REFUSED
        assert decision.conflict
        assert decision.record.tap == before.tap
        assert len(self.sent) == sent_before
        assert self.ledger[before.tap.request_id] == before

    @rule(ask_id=asks)
    def agent_decides(self, ask_id: str) -> None:
        """The agent decides the ask itself (R2)."""
        ask = self.agent.asks[ask_id]
        if ask.status == "open":
            ask.status = "decided"

    @rule(ask_id=asks)
    def ask_expires(self, ask_id: str) -> None:
        """The ask's deadline passes (A3)."""
        ask = self.agent.asks[ask_id]
        if ask.status == "open":
            ask.status = "expired"

    @rule(ask_id=asks)
    def ask_changes(self, ask_id: str) -> None:
        """The ask's content changes; its version grows."""
        ask = self.agent.asks[ask_id]
        if ask.status == "open":
            ask.version += 1

    @rule(ask_id=asks)
    def agent_restarts(self, ask_id: str) -> None:
        """The agent restarts and has not raised the ask again yet (not_open); its request
        records survive (wire §11)."""
        ask = self.agent.asks[ask_id]
        if ask.status == "open":
            ask.status = "gone"

    @rule(ask_id=asks)
    def agent_raises_again(self, ask_id: str) -> None:
        """The agent raises the ask again under the same id (ask.raised after a restart)."""
        ask = self.agent.asks[ask_id]
        if ask.status == "gone":
            ask.status = "open"

    @rule(data=st.data())
    def gateway_restarts(self, data: st.DataObject) -> None:
        """What ``resend_pending`` does: every unsettled tap again, same request id."""
        pending = [r for r in self.ledger.values() if not r.settled]
        for record in pending:
            sent_before = len(self.sent)
            decision = self.tap(record.tap, data.draw(fates, label="fate"))
            assert decision.action is Action.SEND
            assert self.sent[sent_before:] == [record.tap]

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def agent_acts_on_at_most_one_answer_per_ask(self) -> None:
        for ask_id, acted in self.agent.acted.items():
            assert len(acted) <= 1, (ask_id, acted)

    @invariant()
    def only_one_tap_is_accepted_per_ask(self) -> None:
        for ask_id in ASKS:
            accepted = [
                r
                for r in self.ledger.values()
                if r.tap.ask_id == ask_id and r.outcome is Outcome.ACCEPTED
            ]
            assert len(accepted) <= 1
            # The phone hears "accepted" only for the answer the agent acted on.
            assert [r.tap.request_id for r in accepted] == [
                rid for rid in self.agent.acted[ask_id] if self.ledger[rid].settled
            ]

    @invariant()
    def an_acted_answer_is_never_told_otherwise(self) -> None:
        for acted in self.agent.acted.values():
            for request_id in acted:
                record = self.ledger[request_id]
                assert record.outcome in (Outcome.ACCEPTED, Outcome.UNCERTAIN)
                assert record.settled == (record.outcome is Outcome.ACCEPTED)

    @invariant()
    def a_settled_record_never_changes(self) -> None:
        for request_id, record in self.ledger.items():
            seen = self.settled_seen.get(request_id)
            if seen is not None:
                assert record == seen
            elif record.settled:
                assert record.outcome is not None
                assert record.outcome is not Outcome.UNCERTAIN
                self.settled_seen[request_id] = record

    @invariant()
    def a_replay_returns_the_settled_outcome(self) -> None:
        for record in self.ledger.values():
            if record.settled:
                replay = on_tap(record, self.claims.get(record.tap.ask_id), record.tap)
                assert replay == TapDecision(Action.REPLY, record)

    @invariant()
    def a_claim_has_one_holder_and_covers_every_unsettled_tap(self) -> None:
        for ask_id in ASKS:
            unsettled = [
                r.tap.request_id
                for r in self.ledger.values()
                if r.tap.ask_id == ask_id and not r.settled
            ]
            assert len(unsettled) <= 1
            if unsettled:
                assert self.claims.get(ask_id) == unsettled[0]
        for ask_id, holder in self.claims.items():
            record = self.ledger[holder]
            assert record.tap.ask_id == ask_id
            assert not record.settled or record.outcome is Outcome.ACCEPTED

    @invariant()
    def every_record_has_its_card(self) -> None:
        for record in self.ledger.values():
            state = card_state(record)
            assert state is not None
            line = outcome_line(state, CAT)
            assert line.request_id == record.tap.request_id
            assert (line.retry_label is not None) == (record.outcome is Outcome.UNCERTAIN)
            assert line.closed == (record.outcome is Outcome.ACCEPTED)


AnswersMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestAnswersMachine = AnswersMachine.TestCase


# --- T1, row by row ---------------------------------------------------------------------------


def make_tap(request_id: str = "r1", *, version: int = 1, answer: bytes = ALLOW) -> Tap:
    return Tap(request_id, AGENT, "ask-1", version, answer)


def sent(tap: Tap, holder: str | None = None) -> Record:
    """The record of a tap that was sent once (claimed)."""
    decision = on_tap(None, holder, tap)
    assert decision == TapDecision(Action.SEND, Record(tap=tap, attempts=1), claim=True)
    return decision.record


def line(record: Record) -> OutcomeLine:
    state = card_state(record)
    assert state is not None
    return outcome_line(state, CAT)


def test_T1_every_tap_carries_its_request_id() -> None:
    record = sent(make_tap("r-42"))
    assert card_state(record) is None  # nothing to show until an outcome comes
    settled = on_result(record, "decided").record
    assert line(settled).request_id == "r-42"


def test_T1_agent_took_the_answer() -> None:
    settlement = on_result(sent(make_tap()), "accepted")
    assert settlement.record.settled
    assert settlement.record.outcome is Outcome.ACCEPTED
    assert not settlement.release_claim  # every later tap on this ask is "already answered"
    shown = line(settlement.record)
    assert (shown.closed, shown.line, shown.retry_label) == (True, None, None)


def test_T1_agent_decided_first() -> None:
    settlement = on_result(sent(make_tap()), "decided")
    assert settlement.release_claim
    shown = line(settlement.record)
    assert (shown.line, shown.frozen, shown.closed) == (
        "Decided in the durable agent.",
        True,
        False,
    )


def test_T1_ask_expired_first() -> None:
    settlement = on_result(sent(make_tap()), "expired")
    assert settlement.release_claim
    shown = line(settlement.record)
    assert (shown.line, shown.frozen) == ("Timed out before an answer.", True)


def test_T1_already_answered() -> None:
    # S5: the claim decides a race between phones; the loser sends nothing.
    first = sent(make_tap("r1"))
    lost = on_tap(None, first.tap.request_id, make_tap("r2", answer=DENY))
    assert lost.action is Action.REPLY
    assert not lost.claim
    assert (lost.record.settled, lost.record.outcome) == (True, Outcome.ANSWERED)
    assert line(lost.record).line == "Already answered. This card goes away on the next refresh."
    # The agent's own "answered" (another request id won at the agent) reads the same.
    by_agent = on_result(sent(make_tap("r3")), "answered").record
    assert line(by_agent).line == "Already answered. This card goes away on the next refresh."


def test_T1_not_open_and_no_reason() -> None:
    settlement = on_result(sent(make_tap()), "not_open")
    assert settlement.release_claim  # a restarted agent raises it again: a new tap may send
    assert line(settlement.record).line == "Not accepted. This ask may come back shortly."


def test_T1_not_open_with_the_agents_reason() -> None:
    record = on_result(sent(make_tap()), "not_open", "The run was cancelled.").record
    assert line(record).line == "The run was cancelled."


def test_T1_ask_changed_meanwhile() -> None:
    settlement = on_result(sent(make_tap(version=1)), "changed")
    assert settlement.release_claim
    shown = line(settlement.record)
    assert shown.line == "This ask changed. Read it again, then tap an answer."
    assert not shown.frozen
    # Read the new text and tap again: a new request id, and the claim is free.
    again = on_tap(None, None, make_tap("r2", version=2))
    assert (again.action, again.claim) == (Action.SEND, True)


def test_T1_uncertain_then_retry_same_request_id() -> None:
    tap = make_tap("r1")
    first = on_result(sent(tap), None)
    assert not first.release_claim  # the agent may have acted: nobody else may answer
    assert not first.record.settled
    shown = line(first.record)
    assert shown.line == "Not sure the answer arrived. Retry sends it once more."
    assert (shown.retry_label, shown.request_id) == ("Retry", "r1")
    # Another phone meanwhile: the claim is still held.
    assert on_tap(None, "r1", make_tap("r2")).record.outcome is Outcome.ANSWERED
    # Retry: the same request id is sent again, once more, without a new claim.
    retry = on_tap(first.record, "r1", tap)
    assert retry == TapDecision(Action.SEND, Record(tap=tap, attempts=2, outcome=Outcome.UNCERTAIN))
    # The agent had taken the first send: it answers the retry with its first result.
    agent = Agent()
    assert agent.reply(tap) == "accepted"
    done = on_result(retry.record, agent.reply(tap))
    assert done.record.outcome is Outcome.ACCEPTED
    assert agent.acted["ask-1"] == ["r1"]
    assert line(done.record).closed


@pytest.mark.parametrize("outcome", ["decided", "expired", "answered", "not_open", "changed"])
def test_T1_retry_found_closed_maybe_applied(outcome: str) -> None:
    tap = make_tap()
    uncertain = on_result(sent(tap), None).record
    retry = on_tap(uncertain, tap.request_id, tap)
    record = on_result(retry.record, outcome).record
    shown = line(record)
    assert shown.line == "Your answer may already have been applied. Check the chat."
    assert shown.frozen
    assert shown.retry_label is None


def test_T1_collie_refused_with_a_reason() -> None:
    settlement = on_result(sent(make_tap()), "refused", "Answers are off for this agent.")
    assert settlement.release_claim
    shown = line(settlement.record)
    assert shown.line == "Answers are off for this agent."
    assert not shown.frozen  # nothing reached the agent: another answer may be tapped


def test_T1_collie_refused_without_a_reason() -> None:
    assert line(on_result(sent(make_tap()), "refused").record).line == "The answer was refused."


def test_T1_same_request_id_other_answer_is_refused_and_not_sent() -> None:
    first = on_result(sent(make_tap("r1", answer=ALLOW)), None).record
    conflict = on_tap(first, "r1", make_tap("r1", answer=DENY))
    assert conflict.action is Action.REPLY
    assert not conflict.claim
    assert conflict.conflict
    assert conflict.record.outcome is Outcome.REFUSED
    assert conflict.record.tap == first.tap  # the first record is kept, unchanged


@pytest.mark.parametrize("outcome", ["withdrawn", "", "ACCEPTED"])
def test_T1_unknown_agent_outcome_reads_refused(outcome: str) -> None:
    # wire §12.1: an outcome the reader does not know is "not accepted": the reason if given,
    # else "The answer was refused.", and no retry.
    assert outcome not in AGENT_OUTCOMES
    plain = on_result(sent(make_tap()), outcome)
    assert plain.release_claim
    assert plain.record.settled
    assert line(plain.record).line == "The answer was refused."
    assert line(plain.record).retry_label is None
    told = on_result(sent(make_tap()), outcome, "Try the desk.").record
    assert line(told).line == "Try the desk."


def test_T1_older_collie() -> None:
    record = Record(tap=make_tap(), attempts=1, settled=True, outcome=Outcome.OLDER_COLLIE)
    shown = line(record)
    assert shown.line == (
        "This machine runs an older Collie and can't take answers here. "
        "Update it, or answer in the durable agent."
    )
    assert shown.frozen


def test_S5_settled_tap_replays_its_outcome_without_sending() -> None:
    tap = make_tap()
    record = on_result(sent(tap), "decided").record
    for holder in (None, "r1", "r9"):
        assert on_tap(record, holder, tap) == TapDecision(Action.REPLY, record)
