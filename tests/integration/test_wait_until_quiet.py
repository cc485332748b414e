"""``session.wait_until_quiet()`` against staging: ``agent_turn_ended`` comes while the
avatar is still saying its answer; a turn sent then interrupts it, a turn sent after
``wait_until_quiet()`` does not."""

from __future__ import annotations

import pytest

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.events.bus import Event
from avatar_sdk.testing import StagingServer

from .conftest import HANG_GUARD, SessionFactory

LONG = " ".join(f"word{i}" for i in range(24))


async def test_the_next_turn_after_quiet_interrupts_nothing(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    seen: list[Event] = []
    session.on("*", seen.append)
    greeting = session.expect("agent_turn_ended")
    await session.connect()
    await greeting
    await session.wait_until_quiet(timeout=HANG_GUARD)
    for text in ("one", "two"):
        staging.brain.reply(LONG)
        answered = session.expect("agent_turn_ended", timeout=HANG_GUARD)
        await session.speak(text)
        ended_at = (await answered).at
        # Staging, like the service, ends the turn before the avatar stops talking.
        talking = [e.data["talking"] for e in seen if e.name == "agent_talking"]
        assert talking[-1] is True, talking
        await session.wait_until_quiet(timeout=HANG_GUARD)
        stopped = [e for e in seen if e.name == "agent_talking" and not e.data["talking"]][-1]
        assert stopped.at > ended_at
    assert not [e for e in seen if e.name == "agent_interrupted"]
    await session.close()
    await session.wait_until_quiet(timeout=0)  # an ended session is quiet at once


async def test_speaking_at_turn_end_is_what_interrupts(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """The check above can fail: sending at ``agent_turn_ended`` barges in."""
    session = make_session()
    interrupted = session.expect("agent_interrupted", timeout=HANG_GUARD)
    greeting = session.expect("agent_turn_ended")
    await session.connect()
    await greeting
    await session.wait_until_quiet(timeout=HANG_GUARD)
    staging.brain.reply(LONG)
    answered = session.expect("agent_turn_ended", timeout=HANG_GUARD)
    await session.speak("one")
    await answered
    await session.speak("two")
    await interrupted


async def test_bad_timeouts_are_refused(make_session: SessionFactory) -> None:
    session = make_session()
    for bad in (-1, float("nan"), float("inf"), "3", True):
        with pytest.raises(AvatarError) as caught:
            await session.wait_until_quiet(timeout=bad)  # type: ignore[arg-type]
        assert caught.value.code is ErrorCode.INVALID_ARGUMENT
