"""Arguments that cannot be misread, and event verbs that agree about an ended session.

``expect(name, predicate, timeout)`` and ``wait_for(name, timeout, predicate)`` once took
their arguments in different orders, so ``expect("agent_turn_ended", 30)`` (the
``wait_for`` call the docs showed) made 30 the predicate: every matching event then logged
``TypeError: 'int' object is not callable`` from the bus and the waiter never resolved.
Everything after the event name is keyword-only now, and what is passed is checked when the
waiter is registered, not when the first event arrives.
"""

from __future__ import annotations

import pytest

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.events.bus import Event
from avatar_sdk.testing import StagingServer

from .conftest import SessionFactory


async def test_a_timeout_in_the_predicates_place_is_refused_at_registration(
    make_session: SessionFactory,
) -> None:
    session = make_session()
    with pytest.raises(TypeError):
        session.expect("agent_turn_ended", 30)  # type: ignore[misc]
    with pytest.raises(TypeError):
        session.wait_for("agent_turn_ended", 30)  # type: ignore[misc]
    with pytest.raises(TypeError, match="predicate must be callable"):
        session.expect("agent_turn_ended", predicate=30)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="predicate must be callable"):
        session.wait_for("agent_turn_ended", predicate=30)  # type: ignore[arg-type]
    for bad in ("30", True, lambda: 30):
        with pytest.raises(TypeError, match="timeout must be"):
            session.expect("agent_turn_ended", timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(AvatarError) as negative:
        session.wait_for("agent_turn_ended", timeout=-1)
    assert negative.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(TypeError, match="callback must be callable"):
        session.on("agent_turn_ended", 30)  # type: ignore[call-overload]


async def test_keyword_calls_still_resolve(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    greeted = session.expect("agent_turn_ended", timeout=5)
    talking = session.expect(
        "agent_talking", predicate=lambda e: e.data["talking"] is False, timeout=5
    )
    await session.connect()
    assert (await greeted).name == "agent_turn_ended"
    assert (await talking).data["talking"] is False
    done = session.wait_for("agent_turn_ended", timeout=5, predicate=lambda e: True)
    await session.speak("hello")
    assert isinstance(await done, Event)


async def test_every_event_verb_refuses_an_ended_session_at_once(
    make_session: SessionFactory,
) -> None:
    session = make_session()
    await session.connect()
    await session.close()
    verbs = {
        "on": lambda: session.on("agent_text", lambda _: None),
        "on (decorator)": lambda: session.on("agent_text")(lambda _: None),
        "expect": lambda: session.expect("agent_text"),
        "wait_for": lambda: session.wait_for("agent_text"),
        "events": session.events,
    }
    for verb, call in verbs.items():
        with pytest.raises(AvatarError) as refused:
            call()
        assert refused.value.code is ErrorCode.CLOSED, verb
        assert "ended" in str(refused.value), verb
