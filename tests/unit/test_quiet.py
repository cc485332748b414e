"""The quiet rule (session/quiet.py): an agent turn that ended is not an avatar that has
finished talking; and the wait for quiet, under a fake clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from avatar_sdk.clock import FakeClock
from avatar_sdk.events.bus import Event
from avatar_sdk.session.quiet import QuietWatch, Voice

#: One spoken answer, in the order the server sends it (PROTOCOL.md §3.9).
ANSWER: list[tuple[str, dict[str, Any]]] = [
    ("agent_speech_started", {"speech_id": "s1", "turn_id": "t1", "is_new_turn": True}),
    ("agent_text", {"content": "Hi", "spoken": True}),
    ("caption", {"text": "Hi", "speech_id": "s1", "duration": 0.4}),
    ("agent_talking", {"talking": True}),
    ("agent_turn_ended", {"speech_id": "s1", "turn_id": "t1"}),
    ("agent_talking", {"talking": False}),
]


def quiet_after_each(events: list[tuple[str, dict[str, Any]]]) -> list[bool]:
    voice = Voice()
    states = []
    for name, data in events:
        voice.observe(name, data)
        states.append(voice.quiet)
    return states


def test_a_spoken_answer_is_quiet_only_once_the_talking_stops() -> None:
    assert quiet_after_each(ANSWER) == [False, False, False, False, False, True]


def test_captions_before_the_talking_begins_count_as_speech_due() -> None:
    # The turn ended before the talking began: the captions say speech is still coming.
    events = [ANSWER[0], ANSWER[2], ANSWER[4], ANSWER[3], ANSWER[5]]
    assert quiet_after_each(events) == [False, False, False, False, True]


def test_a_turn_without_speech_is_quiet_at_its_end() -> None:
    events = [ANSWER[0], ("agent_text", {"type": "tool"}), ANSWER[4]]
    assert quiet_after_each(events) == [False, False, True]


def test_an_interruption_or_a_lost_server_session_silences_it() -> None:
    assert quiet_after_each([*ANSWER[:4], ("agent_interrupted", {})])[-1]
    for state in ("cold_reconnecting", "ended", "failed"):
        assert quiet_after_each([*ANSWER[:4], ("state_changed", {"state": state})])[-1], state
    # A socket-tier recovery keeps the same server session: the answer goes on.
    assert not quiet_after_each([*ANSWER[:4], ("state_changed", {"state": "reconnecting"})])[-1]


def test_a_continuation_does_not_open_a_turn() -> None:
    voice = Voice()
    voice.observe("agent_speech_started", {"is_new_turn": False})
    assert voice.quiet


def test_an_ended_session_stays_quiet() -> None:
    voice = Voice()
    voice.observe("state_changed", {"state": "ended"})
    voice.observe("agent_speech_started", {"is_new_turn": True})
    assert voice.quiet


def _feed(watch: QuietWatch, clock: FakeClock, events: list[tuple[str, dict[str, Any]]]) -> None:
    for name, data in events:
        watch.observe(Event(name, data, clock.monotonic()))


async def test_wait_returns_when_the_talking_stops_and_times_out_on_the_clock() -> None:
    clock = FakeClock()
    watch = QuietWatch(clock)
    await asyncio.wait_for(watch.wait(timeout=1), 1)  # quiet: at once
    _feed(watch, clock, ANSWER[:5])
    waiting = asyncio.ensure_future(watch.wait(timeout=10))
    await asyncio.sleep(0)  # waiting: its timer is on the clock
    await clock.advance(9)
    assert not waiting.done()
    _feed(watch, clock, ANSWER[5:])
    await asyncio.wait_for(waiting, 1)
    assert clock.sleepers == 0  # its timer was cancelled
    # Still talking when the timeout passes on the session's clock: TimeoutError.
    _feed(watch, clock, ANSWER[:4])
    late = asyncio.ensure_future(watch.wait(timeout=2))
    await asyncio.sleep(0)
    await clock.advance(2)
    with pytest.raises(TimeoutError, match="still talking after 2 s"):
        await late
    assert not watch._waiters


async def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    clock = FakeClock()
    watch = QuietWatch(clock)
    _feed(watch, clock, ANSWER[:4])
    waiting = asyncio.ensure_future(watch.wait(timeout=5))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not watch._waiters and clock.sleepers == 0
