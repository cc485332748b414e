"""The uninterruptible-turn gate (pure) and the turn desk holding typed turns behind it
(fake clock, fake send): the server drops a typed turn sent during the opening greeting
(PROTOCOL.md §4.13), so the client holds it until the greeting's closing events."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from avatar_sdk.clock import FakeClock
from avatar_sdk.config import SessionConfig
from avatar_sdk.guards.brain import ConversationGuards
from avatar_sdk.lifecycle.completion import IdleTimer
from avatar_sdk.session.core.machine import SessionMachine
from avatar_sdk.session.core.stats import SessionStats
from avatar_sdk.session.core.turns import TurnGate
from avatar_sdk.session.turn_desk import TurnDesk
from avatar_sdk.wire import (
    AgentInterrupted,
    AgentStartSpeech,
    AskPermissions,
    Out,
    StvFinishedGenerating,
    StvFinishedTalking,
    StvStartedTalking,
    make_speech_id,
)

GREETING = make_speech_id("approved-permissions", nonce="aB3d")
ANSWER = make_speech_id("transcript", "hello", nonce="xY9z")


# -- the pure gate ------------------------------------------------------------------------
def test_gate_runs_from_the_greeting_until_it_finishes_talking() -> None:
    gate = TurnGate()
    assert gate.phase == "open"
    gate.expect_opening()
    assert gate.phase == "expected"
    assert gate.speech_started(GREETING, True) is False
    assert gate.phase == "running"
    gate.talking_started()
    assert gate.generation_finished(GREETING) is False  # still talking: not over yet
    assert gate.talking_finished() is True
    assert gate.phase == "open"
    assert gate.talking_finished() is False  # a second end changes nothing


def test_gate_closes_a_silent_uninterruptible_turn_when_generation_ends() -> None:
    gate = TurnGate()
    gate.speech_started(make_speech_id("wake-up", nonce="q1w2"), True)
    assert gate.phase == "running"
    assert gate.generation_finished("other-speech") is False
    assert gate.generation_finished(gate.speech_id) is True
    assert gate.phase == "open"


def test_gate_ignores_continuations_and_opens_for_an_ordinary_turn() -> None:
    gate = TurnGate()
    gate.expect_opening()
    assert gate.speech_started(ANSWER, False) is False  # isNewTurn false: a continuation
    assert gate.phase == "expected"
    assert gate.speech_started(ANSWER, True) is True  # no greeting: an ordinary turn began
    assert gate.phase == "open"
    gate.expect_opening()
    assert gate.give_up_waiting() is True
    assert gate.give_up_waiting() is False


def test_interruption_ends_an_uninterruptible_turn() -> None:
    gate = TurnGate()
    gate.speech_started(GREETING, True)
    assert gate.talking_finished() is True  # agentInterrupted / stvFinishedTalking alike


# -- the desk behind the gate (fake clock, fake socket) ----------------------------------
def _connected_machine() -> SessionMachine:
    machine = SessionMachine()
    for trigger in ("start", "socket_open", "joined", "stv_ready", "agent_shown"):
        machine.fire(trigger)
    machine.fire("media_skipped")
    machine.fire("approved")
    assert machine.is_in("connected")
    return machine


def _desk(clock: FakeClock, sent: list[Any]) -> TurnDesk:
    config = SessionConfig(agent_timeout=0.5, idle_timeout=0)
    events: list[str] = []

    def emit(name: str, data: dict[str, Any] | None = None) -> None:
        events.append(name)

    async def send(event: str, payload: Any) -> None:
        assert event == Out.TEXT_ENTERED
        sent.append(payload)

    return TurnDesk(
        config=config,
        machine=_connected_machine(),
        clock=clock,
        outbox=SimpleNamespace(send=send),
        guards=ConversationGuards(config, emit, clock=clock),
        idle=IdleTimer(0, lambda: None, clock=clock),
        emit=emit,
        stats=SessionStats(),
    )


def _texts(sent: list[Any]) -> list[str]:
    return [p["text"] for p in sent if p.get("isFinal")]


async def test_turns_typed_during_the_greeting_go_out_joined_when_it_ends() -> None:
    clock = FakeClock()
    sent: list[Any] = []
    desk = _desk(clock, sent)
    desk.observe_turn(AskPermissions(audio=True, video=False))
    first = asyncio.ensure_future(desk.speak("first"))
    await asyncio.sleep(0)
    assert desk.observe_turn(AgentStartSpeech(GREETING, "t1", True)) is False
    second = asyncio.ensure_future(desk.speak("second"))
    desk.observe_turn(StvStartedTalking())
    for _ in range(5):
        await asyncio.sleep(0)
    assert sent == []  # nothing goes out while the greeting talks
    assert not first.done() and not second.done()
    desk.observe_turn(StvFinishedGenerating(GREETING))
    assert desk.observe_turn(StvFinishedTalking("Hello!")) is True
    await desk.flush(join=True)
    await asyncio.wait_for(asyncio.gather(first, second), 1)
    assert _texts(sent) == ["first\nsecond"]  # one turn: one answer, no self-barge-in
    assert sent[0] == {"text": "", "isFinal": False, "isSpeechStart": True}


async def test_no_greeting_within_agent_timeout_sends_the_turn() -> None:
    clock = FakeClock()
    sent: list[Any] = []
    desk = _desk(clock, sent)
    desk.observe_turn(AskPermissions(audio=True, video=False))
    turn = asyncio.ensure_future(desk.speak("anyone?"))
    await asyncio.sleep(0)  # speak() is waiting for the greeting to begin
    await clock.advance(0.4)
    assert sent == [] and not turn.done()
    await clock.advance(0.2)  # past agent_timeout: this server does not greet
    await asyncio.wait_for(turn, 1)
    assert _texts(sent) == ["anyone?"]
    assert desk.gate.phase == "open"


async def test_a_greeting_cut_short_releases_held_turns() -> None:
    clock = FakeClock()
    sent: list[Any] = []
    desk = _desk(clock, sent)
    desk.observe_turn(AgentStartSpeech(GREETING, "t1", True))
    turn = asyncio.ensure_future(desk.speak("after"))
    await asyncio.sleep(0)
    assert desk.observe_turn(AgentInterrupted()) is True
    await desk.flush(join=True)
    await asyncio.wait_for(turn, 1)
    assert _texts(sent) == ["after"]


async def test_an_ordinary_turn_goes_out_at_once() -> None:
    clock = FakeClock()
    sent: list[Any] = []
    desk = _desk(clock, sent)
    await asyncio.wait_for(desk.speak("now"), 1)
    assert _texts(sent) == ["now"]
