"""The parts of the session core, alone: turn ledger, inbound router, supervisor, and the
cold tier's streak budget under a fake clock (no network)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from avatar_sdk import AvatarError, ErrorCode, RetryPolicy, SessionConfig
from avatar_sdk.clock import FakeClock
from avatar_sdk.guards.brain import ConversationGuards
from avatar_sdk.lifecycle.completion import IdleTimer
from avatar_sdk.session.core.machine import SessionMachine
from avatar_sdk.session.core.router import route
from avatar_sdk.session.core.stats import SessionStats
from avatar_sdk.session.core.turns import TurnLedger
from avatar_sdk.session.recovery import LinkSlot, Outcome, RecoveryController
from avatar_sdk.session.supervisor import Supervisor
from avatar_sdk.session.turn_desk import UNINTERRUPTIBLE_CAP, TurnDesk
from avatar_sdk.wire import AgentStartSpeech, In, StvStartedTalking, make_speech_id, parse_event

# -- turn ledger ----------------------------------------------------------------------------


def test_a_turn_is_confirmed_by_its_transcript_speech_id_even_truncated() -> None:
    long_turn = "Hello there, how are   you today? " + "tell me everything about the weather " * 3
    ledger = TurnLedger()
    ledger.sent(long_turn)
    assert not ledger.observe_speech_id(make_speech_id("approved-permissions"))
    assert not ledger.observe_speech_id(make_speech_id("transcript", "something else"))
    assert not ledger.observe_speech_id(make_speech_id("transcript", "hello there"))  # short
    cut = " ".join(long_turn.split())[:60]  # the server cuts the text into the speechId
    assert ledger.observe_speech_id(make_speech_id("transcript", cut, nonce="AbCd"))
    assert ledger.unconfirmed() == []


def test_one_speech_id_confirms_once_and_a_short_prefix_never() -> None:
    """The soak's find: every segment of the answer to "tell me" carries its speechId; none
    of them may confirm a later "tell me more" that was lost in a dead socket."""
    ledger = TurnLedger()
    ledger.sent("tell me")
    answer = make_speech_id("transcript", "tell me", nonce="Ab12")
    assert ledger.observe_speech_id(answer)
    ledger.sent("tell me more")
    assert not ledger.observe_speech_id(answer)  # later segments of the same answer
    assert [t.text for t in ledger.unconfirmed()] == ["tell me more"]


def test_evidence_for_a_later_turn_confirms_every_earlier_one() -> None:
    ledger = TurnLedger()
    ledger.sent("one")
    ledger.sent("two")
    ledger.sent("three")
    assert ledger.observe_speech_id(make_speech_id("transcript", "two"))
    assert [t.text for t in ledger.unconfirmed()] == ["three"]


def test_resends_are_taken_once_and_a_resent_turn_is_never_resent_again() -> None:
    ledger = TurnLedger()
    ledger.sent("lost")
    through = ledger.last_seq
    ledger.sent("later")
    [due] = ledger.take_resends(through)
    assert due.text == "lost"
    assert ledger.take_resends(through) == []
    ledger.sent("lost", resent=True)
    assert [t.text for t in ledger.take_resends(ledger.last_seq)] == ["later"]
    assert ledger.take_resends(ledger.last_seq) == []  # the resent "lost" stays put


def test_the_ledger_is_bounded() -> None:
    ledger = TurnLedger(limit=3)
    for i in range(10):
        ledger.sent(f"t{i}")
    assert [t.text for t in ledger.unconfirmed()] == ["t7", "t8", "t9"]


# -- inbound router -------------------------------------------------------------------------


def test_router_maps_fatal_events_session_errors_and_evidence() -> None:
    fatal = route(
        In.THROW_TO_EXCEEDED_TIER, parse_event(In.THROW_TO_EXCEEDED_TIER, [{}]), connecting=False
    )
    assert fatal.fatal is not None and fatal.fatal.code is ErrorCode.TIER_EXCEEDED
    restart = parse_event(In.SESSION_ERROR, [{"code": "AGENT_CHILD_CRASHED_RESTARTED"}])
    routed = route(In.SESSION_ERROR, restart, connecting=False)
    assert routed.agent_restarting and routed.agent_error is not None
    assert routed.agent_error.code is ErrorCode.AGENT_RESTARTED
    crash = route(
        In.SESSION_ERROR,
        parse_event(In.SESSION_ERROR, [{"code": "AGENT_CHILD_CRASHED"}]),
        connecting=False,
    )
    assert crash.agent_error is not None and crash.agent_error.code is ErrorCode.AGENT_CRASHED
    assert crash.session_error is not None and crash.session_error["recoverable"] is False
    sid = make_speech_id("transcript", "hi")
    speech = parse_event(
        In.AGENT_START_SPEECH, [{"speechId": sid, "turnId": "t", "isNewTurn": True}]
    )
    assert route(In.AGENT_START_SPEECH, speech, connecting=False).speech_id == sid
    handoff = route(
        In.AGENT_TURN_TO_TALK, parse_event(In.AGENT_TURN_TO_TALK, [{}]), connecting=False
    )
    assert handoff.turn_to_talk and handoff.activity


def test_show_agent_means_agent_back_only_outside_the_connect_sequence() -> None:
    shown = parse_event(In.SHOW_AGENT, [{}])
    assert route(In.SHOW_AGENT, shown, connecting=False).agent_back
    assert not route(In.SHOW_AGENT, shown, connecting=True).agent_back


# -- supervisor -----------------------------------------------------------------------------


async def test_supervisor_reports_a_dying_task_and_cancels_the_rest_on_close() -> None:
    failures: list[tuple[str, str]] = []
    sup = Supervisor(lambda name, exc: failures.append((name, type(exc).__name__)))
    forever = asyncio.Event()
    waiting = sup.spawn(forever.wait(), "waiter")

    async def boom() -> None:
        raise RuntimeError("bug")

    dying = sup.spawn(boom(), "boom")
    await asyncio.wait({dying})
    assert failures == [("avatar-sdk:boom", "RuntimeError")]
    await sup.aclose(1.0)
    assert waiting.cancelled() and len(sup) == 0
    late = sup.spawn(forever.wait(), "late")  # nothing outlives the close
    await asyncio.wait({late})
    assert late.cancelled()


# -- the cold tier's streak budget, under a fake clock --------------------------------------


class _FakeLink:
    lanes = None

    async def close(self, timeout: float) -> None:
        return None


class _FakeBuilder:
    """Joins fail ``failures`` times, then succeed."""

    def __init__(self) -> None:
        self.failures = 0
        self.joins = 0

    def create(self) -> _FakeLink:
        return _FakeLink()

    async def join(self, link: Any, deadline: Any, **_: Any) -> None:
        self.joins += 1
        if self.failures:
            self.failures -= 1
            raise AvatarError(ErrorCode.TRANSPORT_CLOSED, "refused")


def _controller(
    policy: RetryPolicy,
) -> tuple[RecoveryController, SessionMachine, _FakeBuilder, FakeClock, list[Any]]:
    machine = SessionMachine(strict=True)
    for trigger in ("start", "socket_open", "joined", "stv_ready", "agent_shown", "media_skipped"):
        machine.fire(trigger)
    machine.fire("approved")
    events: list[Any] = []
    outcomes: list[Outcome] = []
    clock = FakeClock()
    builder = _FakeBuilder()

    async def on_outcome(outcome: Outcome) -> None:
        outcomes.append(outcome)

    async def restore(link: Any) -> None:
        return None

    controller = RecoveryController(
        machine=machine,
        config=SessionConfig(cold_reconnect=policy),
        clock=clock,
        slot=LinkSlot(),
        builder=builder,  # type: ignore[arg-type]
        view=SimpleNamespace(thread_id="thread-1"),
        restore=restore,
        reassert=restore,
        emit=lambda name, data: events.append((name, data)),
        spawn=lambda coro, name: asyncio.ensure_future(coro),
        on_outcome=on_outcome,
        stats=SessionStats(),
    )
    return controller, machine, builder, clock, events


async def _outage(controller: RecoveryController, machine: SessionMachine) -> Outcome:
    machine.fire("session_lost")
    return await controller.recover_cold("test")


#: The attempts alone decide (``min_span=0``): these tests count the streak.
POLICY = RetryPolicy(max_attempts=3, initial=0.0, base=0.0, cap=0.0, jitter="none", min_span=0.0)


async def test_failed_cold_attempts_count_as_one_streak_until_a_stable_period() -> None:
    controller, machine, builder, clock, events = _controller(POLICY)
    builder.failures = 1
    assert (await _outage(controller, machine)).ok  # 1 failure spent, then in
    await clock.advance(POLICY.stable_after / 2)  # not stable yet
    builder.failures = 5
    outcome = await _outage(controller, machine)
    assert not outcome.ok and outcome.error is not None
    # The reconnect that did not hold counts too: one attempt left in the streak.
    assert builder.joins == 3
    assert ("gave_up", {"tier": "cold", "attempts": 1, "code": "transport_closed"}) in events


async def test_a_streak_spent_when_the_outage_begins_gives_up_at_once() -> None:
    """Two failures and a reconnect that held only half of ``stable_after``: three spent,
    so the next outage gives up without an attempt (the link keeps failing)."""
    controller, machine, builder, clock, events = _controller(POLICY)
    builder.failures = 2
    assert (await _outage(controller, machine)).ok
    await clock.advance(POLICY.stable_after / 2)
    outcome = await _outage(controller, machine)
    assert not outcome.ok and builder.joins == 3
    assert ("gave_up", {"tier": "cold", "attempts": 0, "code": "gave_up"}) in events


async def test_a_stable_connected_period_resets_the_streak_budget() -> None:
    controller, machine, builder, clock, events = _controller(POLICY)
    builder.failures = 2
    assert (await _outage(controller, machine)).ok
    await clock.advance(POLICY.stable_after + 0.1)
    builder.failures = 2
    assert (await _outage(controller, machine)).ok  # the full budget again
    resets = [data for name, data in events if name == "retry_budget_reset"]
    assert resets and resets[0]["tier"] == "cold" and resets[0]["spent"] == 2


async def test_without_reset_after_success_the_budget_spans_the_session() -> None:
    policy = RetryPolicy(
        max_attempts=3,
        initial=0.0,
        base=0.0,
        cap=0.0,
        jitter="none",
        reset_after_success=False,
        min_span=0.0,
    )
    controller, machine, builder, clock, events = _controller(policy)
    builder.failures = 2
    assert (await _outage(controller, machine)).ok
    await clock.advance(policy.stable_after * 10)
    builder.failures = 2
    assert not (await _outage(controller, machine)).ok
    assert not any(name == "retry_budget_reset" for name, _ in events)


async def test_cold_backoff_waits_on_the_injected_clock() -> None:
    policy = RetryPolicy(max_attempts=3, initial=5.0, base=0.0, cap=0.0, jitter="none")
    controller, machine, builder, clock, _ = _controller(policy)
    builder.failures = 1
    task = asyncio.ensure_future(_outage(controller, machine))
    for _ in range(20):
        await asyncio.sleep(0)
    assert builder.joins == 1 and not task.done()
    assert machine.data.backing_off
    await clock.advance(5.0)
    outcome = await asyncio.wait_for(task, 1)
    assert outcome.ok and builder.joins == 2 and not machine.data.backing_off


@pytest.mark.parametrize("clock_start", [0.0, 1e6])
async def test_fake_clock_wakes_sleepers_in_order(clock_start: float) -> None:
    clock = FakeClock(clock_start)
    woke: list[float] = []

    async def sleeper(seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(clock.monotonic() - clock_start)

    tasks = [asyncio.ensure_future(sleeper(s)) for s in (3.0, 1.0, 2.0)]
    await asyncio.sleep(0)
    await clock.advance(2.5)
    assert woke == [1.0, 2.0]
    await clock.advance(1.0)
    await asyncio.gather(*tasks)
    assert woke == [1.0, 2.0, 3.0]


async def test_a_refused_transition_emits_nothing() -> None:
    """A socket drop reported while the session is already ending: no reconnecting, no
    reconnected, nothing; the machine refused the transition."""
    controller, machine, _, _, events = _controller(POLICY)
    machine.fire("end")
    assert await controller.recover_socket(_FakeLink(), "transport close") is None  # type: ignore[arg-type]
    assert events == []
    assert machine.state == "disconnecting"


# -- the brain-stall watchdog, under a fake clock -------------------------------------------


async def test_brain_stall_watchdog_repeats_on_the_injected_clock_until_output() -> None:
    clock = FakeClock()
    events: list[tuple[str, dict[str, Any]]] = []
    guards = ConversationGuards(
        SessionConfig(brain_stall_timeout=12.0),
        lambda name, data: events.append((name, data)),
        clock=clock,
    )
    runner = asyncio.ensure_future(guards.run_watchdog(lambda: True))
    try:
        guards.on_user_turn("hello?")
        await clock.advance(11.9)
        assert [n for n, _ in events] == ["response_pending"]
        await clock.advance(0.2)
        await clock.advance(12.0)
        stalls = [d for n, d in events if n == "brain_stalled"]
        assert stalls == [{"after": 12.0, "count": 1}, {"after": 12.0, "count": 2}]
        guards.observe(StvStartedTalking())  # the avatar talks: perceivable output
        await clock.advance(60.0)
        assert len([n for n, _ in events if n == "brain_stalled"]) == 2
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await guards.aclose()


def test_evidence_never_confirms_a_turn_across_a_recovery() -> None:
    """The soak's find: a turn lost in a dead socket ("hello there friend") must not be
    confirmed by the answer to a later turn that it starts like ("hello there")."""
    ledger = TurnLedger()
    ledger.sent("hello there friend")  # written into the dead socket
    through = ledger.new_epoch()  # the recovery
    ledger.sent("hello there")  # spoken after it, on the new connection
    assert ledger.observe_speech_id(make_speech_id("transcript", "hello there"))
    assert [t.text for t in ledger.unconfirmed()] == ["hello there friend"]
    [due] = ledger.take_resends(through)
    assert due.text == "hello there friend"


def test_an_exact_match_wins_over_a_prefix() -> None:
    ledger = TurnLedger()
    ledger.sent("hello there")
    ledger.sent("hello there friend")
    assert ledger.observe_speech_id(make_speech_id("transcript", "hello there"))
    assert [t.text for t in ledger.unconfirmed()] == ["hello there friend"]


async def test_a_greeting_that_never_ends_holds_turns_only_for_the_cap() -> None:
    """A server that loses the greeting's closing events must not hold a user's turn
    forever: after ``UNINTERRUPTIBLE_CAP`` the turn goes out (fake clock)."""
    machine = SessionMachine(strict=True)
    for trigger in ("start", "socket_open", "joined", "stv_ready", "agent_shown", "media_skipped"):
        machine.fire(trigger)
    machine.fire("approved")
    clock = FakeClock()
    sent: list[Any] = []

    async def send(event: str, payload: Any) -> None:
        sent.append(payload)

    config = SessionConfig(brain_stall_timeout=0)
    desk = TurnDesk(
        config=config, machine=machine, clock=clock, outbox=SimpleNamespace(send=send),
        guards=ConversationGuards(config, lambda n, d: None, clock=clock),
        idle=IdleTimer(0, lambda: None, clock=clock), emit=lambda n, d: None, stats=SessionStats(),
    )  # fmt: skip
    greeting = make_speech_id("approved-permissions", nonce="Gr33")
    desk.observe_turn(AgentStartSpeech(speech_id=greeting, turn_id="t1", is_new_turn=True))
    speaking = asyncio.ensure_future(desk.speak("anyone there?"))
    for _ in range(10):
        await asyncio.sleep(0)
    assert sent == [] and not speaking.done()  # held while the greeting runs
    await clock.advance(UNINTERRUPTIBLE_CAP - 1)
    assert sent == []
    await clock.advance(2)
    await asyncio.wait_for(speaking, 1)
    assert any(isinstance(p, dict) and p.get("text") == "anyone there?" for p in sent)
