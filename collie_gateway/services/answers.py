"""A phone's answer, from the tap to the agent and the ledger (spec T1, wire §8, §9).

``Answers.answer`` refuses what Collie must not send (:mod:`collie_gateway.core.refusal`),
else runs the tap through the ledger (:class:`~collie_gateway.services.answering.Answering`):
recorded and claimed before it is sent, sent once, settled. Unsettled taps are sent again
with their request ids when the link is back, when their ask closes or changes, and every
``resend_interval`` seconds. Each card's last tap is kept for the chat's next drawing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Protocol
from urllib.parse import quote

import msgspec

from collie_gateway.core.answers import CardState, Outcome, Record, Tap, card_state
from collie_gateway.core.refusal import misfit_reason, refusal
from collie_gateway.errors import AgentRejected, AgentUnreachable, AnswerMisfit
from collie_gateway.services.answering import Answering, Result
from collie_gateway.services.links import AgentClient, Fetched, expect
from collie_gateway.services.phonebus import Publish
from collie_gateway.strings import Catalogue
from collie_gateway.views.cards import card_facts
from wire.messages import Answer, Ask, AskResolved, Reply, ReplyResult, decode
from wire.tasks import cancel_late

log = logging.getLogger(__name__)

ANSWER_GRACE = 0.5  # ours: at a stop, answers on their way get this long to settle

_encoder = msgspec.json.Encoder()


class AgentCalls(Protocol):
    """What the answer path needs of the agents (``services/agents.py``)."""

    def find_ask(self, agent: str, ask_id: str) -> Ask | None:
        """The open ask, as mirrored."""
        ...

    def version_warning(self, agent: str, catalogue: Catalogue | None = None) -> str | None:
        """R5's box for an agent refused for its wire version (in ``catalogue``'s language),
        else None."""
        ...

    def client(self, agent: str) -> AgentClient:
        """The agent's HTTP client (raises when nothing may be sent)."""
        ...

    def ready(self) -> list[str]:
        """The agents whose link is ready now."""
        ...


class CardStates:
    """Each card's last tap, by conversation: what the chat draws on the card (T1)."""

    def __init__(self) -> None:
        self._by_chat: dict[tuple[str, str], dict[str, CardState]] = {}

    def of(self, agent: str, conv_id: str) -> dict[str, CardState]:
        """The states of one conversation's cards, by ask id."""
        return self._by_chat.get((agent, conv_id), {})

    def put(self, agent: str, conv_id: str, ask_id: str, state: CardState) -> None:
        """Keep a card's state."""
        self._by_chat.setdefault((agent, conv_id), {})[ask_id] = state

    def forget(self, agent: str, conv_id: str) -> None:
        """The conversation closed: its cards are gone."""
        self._by_chat.pop((agent, conv_id), None)

    def resolved(self, agent: str, conv_id: str, ask_id: str) -> None:
        """The ask is resolved: its card is gone (a conversation that asks all day keeps
        only its open cards' taps)."""
        states = self._by_chat.get((agent, conv_id))
        if states is not None:
            states.pop(ask_id, None)
            if not states:
                del self._by_chat[agent, conv_id]

    def __len__(self) -> int:
        return len(self._by_chat)


class Answers:
    """Takes taps and settles them."""

    def __init__(
        self,
        agents: AgentCalls,
        ledger: Answering,
        catalogue: Catalogue,
        clock: Callable[[], datetime],
        redact: Callable[[str], str],
        publish: Publish,
    ) -> None:
        self.agents = agents
        self.ledger = ledger
        self.catalogue = catalogue
        self.clock = clock
        self.redact = redact
        self.publish = publish
        #: Told of each answer the agent took (the gateway tells the webhooks who gave it).
        self.on_accepted: Callable[[Tap], None] | None = None
        self.cards = CardStates()
        #: Whether this worker sends to the agent (with several workers: holds its lease).
        self.sends_to: Callable[[str], bool] = lambda agent: True
        self._replies: set[asyncio.Future[Fetched]] = set()  # answers on their way

    async def answer(
        self,
        agent: str,
        ask_id: str,
        request_id: str,
        version: int,
        answer: Answer,
        phone: str | None = None,
        catalogue: Catalogue | None = None,
    ) -> Result:
        """Take one tap of ``phone`` (its id; None: the admin token or the open gateway):
        record, claim, send once, settle (spec T1). Collie's own reasons are worded in
        ``catalogue``'s language (default: the default's).

        Raises:
            AnswerMisfit: the answer does not fit the mirrored ask (wire §8); nothing was
                recorded or sent.
        """
        cat = catalogue or self.catalogue
        tap = Tap(request_id, agent, ask_id, version, _encoder.encode(answer), phone)
        ask = self.agents.find_ask(agent, ask_id)
        card = None if ask is None else card_facts(ask, cat, self.redact)
        refused = self.agents.version_warning(agent, cat) or refusal(
            ask, version, answer, cat, card
        )
        if refused is None:
            misfit = misfit_reason(ask, version, answer, cat, self.clock())
            if misfit is not None:
                raise AnswerMisfit(misfit)
            result = await self.ledger.tap(tap, lambda t: self._send(t, answer))
        else:
            result = await self.ledger.refuse(tap, refused)  # nothing is sent
        log.info(
            "answer %s to %s/%s by phone %s: %s", request_id, agent, ask_id, phone, result.outcome
        )
        if result.conflict:
            reason = cat["refused_conflict"]
            return Result(Outcome.REFUSED, reason, request_id, True, result.record)
        self._accepted(result)
        return self._remember(tap, result)

    async def lookup(self, request_id: str) -> Record | None:
        """The ledger's record of a request id."""
        return await self.ledger.lookup(request_id)

    def _remember(self, tap: Tap, result: Result) -> Result:
        """Keep the card's state after a tap, for the chat's next drawing (T1)."""
        record = result.record
        if record is not None and record.tap == tap:
            state = card_state(record)
            ask = self.agents.find_ask(tap.agent, tap.ask_id)
            if state is not None and ask is not None:
                self.cards.put(tap.agent, ask.conversation, tap.ask_id, state)
        return result

    async def _send(self, tap: Tap, answer: Answer | None = None) -> tuple[str, str | None]:
        """Send one tap to its agent; the agent's outcome and reason.

        Raises:
            AgentUnreachable: no answer came back (the answer may have arrived).
            AgentRejected: refused (version) or the agent answered with an error.
        """
        if answer is None:
            answer = decode(tap.answer, Answer)  # a tap read back from the ledger
        body = Reply(request_id=tap.request_id, version=tap.version, answer=answer)
        path = f"/asks/{quote(tap.ask_id, safe='')}/reply"
        sending = asyncio.ensure_future(self.agents.client(tap.agent).post(path, body))
        self._replies.add(sending)
        sending.add_done_callback(self._replies.discard)
        try:
            fetched = await sending
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if sending.cancelled() and task is not None and not task.cancelling():
                # Cut short by a stop (``settle_replies``): it may have arrived (T1).
                raise AgentUnreachable("the gateway stopped before the agent answered") from None
            raise
        if fetched.status >= 500:
            raise AgentUnreachable(f"the agent answered {fetched.status}")
        result = expect(fetched, ReplyResult)
        return result.outcome, result.reason

    async def settle_replies(self, grace: float = ANSWER_GRACE) -> None:
        """At a stop: answers on their way to agents get ``grace`` seconds to settle; the rest
        are cut short and stay recorded as uncertain (the phone is told so; the next run sends
        them again with their request ids)."""
        await cancel_late(self._replies, grace)

    async def resend_loop(self, interval: float) -> None:
        """Every ``interval`` s, send unsettled taps of ready agents again (T1)."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.ledger.refresh()
            except Exception:  # the store unreachable for now: the next round reads again
                log.exception("unsettled answers of other workers not read")
            for name in self.agents.ready():
                if self.sends_to(name):
                    await self.resend_pending(name)

    async def settle(self, agent: str, event: AskResolved) -> None:
        """An ask closed: the agent's word settles a tap it names as answered (T1, wire §9);
        other unsettled taps on it are sent again, so they settle too."""
        if event.how == "answered" and event.request_id is not None:
            result = await self.ledger.settle_accepted(agent, event.ask_id, event.request_id)
            if result is not None and result.record is not None:
                self._remember(result.record.tap, result)
                self._settled(agent, result)
        await self.resend_pending(agent, event.ask_id)

    async def resend_pending(self, agent: str, ask_id: str | None = None) -> None:
        """Send the agent's unsettled taps again, with their request ids: after a restart,
        when the link is back, and when an ask with an unsettled tap closes."""
        try:
            for result in await self.ledger.resend_pending(agent, self._send, ask_id):
                if result.record is not None:
                    self._remember(result.record.tap, result)
                self._settled(agent, result)
        except (AgentRejected, AgentUnreachable) as exc:
            log.info("agent %s: pending answers wait: %s", agent, exc)

    def _settled(self, agent: str, result: Result) -> None:
        payload = {"agent": agent, "request_id": result.request_id, "outcome": result.outcome}
        self.publish("answer.settled", payload)
        self._accepted(result)

    def _accepted(self, result: Result) -> None:
        if result.outcome is Outcome.ACCEPTED and result.record and self.on_accepted:
            self.on_accepted(result.record.tap)
