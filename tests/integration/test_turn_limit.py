"""Nothing cut in silence: a user turn longer than the SDK's 8,000-character limit.

``speak()`` of 20,000 characters used to send exactly 8,000 and say nothing: the avatar
answered the first two fifths of a question as if it were the whole. It is refused now,
before anything is sent (``AvatarError(INVALID_ARGUMENT)`` naming both lengths), and the
turns held during the greeting, joined into one, are never cut either: joined only as far
as they fit, the rest sent as further turns.
"""

from __future__ import annotations

import asyncio

import pytest

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire import MAX_TEXT, Out

from .conftest import SessionFactory, until


async def test_a_turn_over_the_limit_is_refused_and_nothing_is_sent(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=3)  # the greeting is over
    with pytest.raises(AvatarError) as refused:
        await session.speak("x" * 20_000)
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert "20000" in str(refused.value) and "8000" in str(refused.value)
    assert staging.received_events(Out.TEXT_ENTERED) == []  # not even the barge-in marker
    assert session.state == "connected"  # a refused call, not a broken session
    # At the limit it goes whole; control characters do not count (they are stripped).
    answered = session.expect("agent_turn_ended", timeout=5)
    await session.speak("y" * MAX_TEXT + "\x07")
    await answered
    conv = staging.conversations[staging.live_sids[0]]
    assert conv.user_turns == ["y" * MAX_TEXT]


async def test_turns_held_during_the_greeting_are_joined_only_as_far_as_they_fit(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    # Asked before connect(), which returns once the greeting has begun (its thread id).
    started = session.expect("agent_speech_started", timeout=2)
    await session.connect()
    await started  # the greeting is on
    texts = ["a" * 5000, "b" * 2000, "c" * 5000]
    await asyncio.wait_for(asyncio.gather(*(session.speak(t) for t in texts)), 5)
    conv = staging.conversations[staging.live_sids[0]]
    assert await until(lambda: "".join(conv.user_turns).count("c") == 5000, 3)
    assert conv.user_turns == ["a" * 5000 + "\n" + "b" * 2000, "c" * 5000]
    assert conv.dropped_turns == []
