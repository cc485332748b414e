"""Turns the SDK resends on a rebuilt server session wait for its opening greeting to end
(issue 17, item 14).

The service drops a typed turn that arrives during an uninterruptible agent turn, and a
rebuilt (cold) server session starts with its greeting: a resend sent as soon as the new
session is approved would be lost. Both resends are checked on a greeting long enough that
one sent without waiting would land inside it: the hard spiral tier's resend of the
abandoned turn, and the ledger's ``turn_resent`` after a cold reconnect.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from avatar_sdk.guards.brain import SPIRAL_RECOVERY_PREFIX
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.staging.conversation import Conversation
from avatar_sdk.wire import In, Out

from .conftest import FAST, SessionFactory, until

#: A greeting of ~2.4 s (10 words in 3 caption chunks of 0.4 s, at twice real time).
SLOW_SPEECH = 2.0


def greeting_ends(staging: StagingServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """Per sid, when the server sent its first ``stvFinishedTalking`` (the greeting's end),
    on the clock of ``ReceivedEvent.at``."""
    ends: dict[str, float] = {}
    emit = staging.sio.emit_recoverable

    async def spy(sid: str, event: str, payload: Any) -> None:
        if event == In.STV_FINISHED_TALKING:
            ends.setdefault(sid, time.monotonic())
        await emit(sid, event, payload)

    monkeypatch.setattr(staging.sio, "emit_recoverable", spy)
    return ends


def rebuilt(staging: StagingServer, old_sid: str) -> Conversation:
    [sid] = [s for s in staging.live_sids if s != old_sid]
    return staging.conversations[sid]


async def test_the_spiral_resend_waits_for_the_rebuilt_sessions_greeting(
    staging: StagingServer, make_session: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = FAST.with_(tool_spiral_limit=3, hard_tool_spiral_limit=6)
    session = make_session(config=config)
    await session.connect()
    await session.wait_for("agent_talking", timeout=3, predicate=lambda e: not e.data["talking"])
    old_sid = staging.live_sids[0]
    staging.speech_time_scale = SLOW_SPEECH
    ends = greeting_ends(staging, monkeypatch)
    staging.brain.tool_spiral(8)
    recovered = session.expect("spiral_recovered", timeout=10)
    answered = session.expect(
        "agent_turn_ended",
        predicate=lambda e: SPIRAL_RECOVERY_PREFIX.strip()[:10] in (e.data["speech_id"] or ""),
        timeout=15,
    )
    await session.speak("walk me through the guidance range")
    await recovered
    await answered  # the resend was taken and answered...
    conv = rebuilt(staging, old_sid)
    assert conv.dropped_turns == []  # ...not dropped by the greeting
    assert conv.user_turns == [SPIRAL_RECOVERY_PREFIX + "walk me through the guidance range"]
    [resend] = staging.received_events(Out.TEXT_ENTERED, sid=conv.sid)
    assert resend.at > ends[conv.sid]  # sent once the greeting had ended
    assert session.state == "connected"


async def test_a_turn_resent_after_a_cold_reconnect_waits_for_the_greeting(
    staging: StagingServer, make_session: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = make_session(config=FAST.with_(turn_confirm_timeout=0.1))
    await session.connect()
    await session.wait_for("agent_talking", timeout=3, predicate=lambda e: not e.data["talking"])
    old_sid = staging.live_sids[0]
    staging.conversations[old_sid].agent_down = True  # taken in, never answered: unconfirmed
    await session.speak("did you get this?")
    assert await until(lambda: staging.conversations[old_sid].dropped_turns != [], 2)
    staging.speech_time_scale = SLOW_SPEECH
    ends = greeting_ends(staging, monkeypatch)
    resent = session.expect("turn_resent", timeout=10)
    answered = session.expect(
        "agent_turn_ended",
        predicate=lambda e: "did you get this" in (e.data["speech_id"] or ""),
        timeout=15,
    )
    assert await staging.faults.drop_socket(recovery=False) == 1
    assert (await resent).data == {"text": "did you get this?", "tier": "cold"}
    await answered
    conv = rebuilt(staging, old_sid)
    assert conv.dropped_turns == []
    assert conv.user_turns == ["did you get this?"]
    resends = staging.received_events(Out.TEXT_ENTERED, sid=conv.sid)
    assert [r.payload.get("text") for r in resends] == ["", "did you get this?"]  # marker, turn
    assert resends[0].at > ends[conv.sid]
    assert session.stats()["turns_resent"] == 1
