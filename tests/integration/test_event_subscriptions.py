"""Event subscriptions over real sockets: registered at call time, never waiting on an ended
session."""

from __future__ import annotations

import asyncio

import pytest

from avatar_sdk import AvatarError, ErrorCode, EventName
from avatar_sdk.events.bus import Event
from avatar_sdk.testing import StagingServer

from .conftest import SessionFactory


async def test_expect_before_a_drop_sees_the_reconnect(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    reconnected = session.expect("reconnected", timeout=5)
    await staging.faults.drop_socket()
    event = await reconnected
    assert event.data["tier"] == "socket" and event.data["recovered"] is True


async def test_wait_for_subscribes_when_called_not_when_awaited(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    done = asyncio.Event()
    session.on(EventName.RECONNECTED, lambda _: done.set())
    waiting = session.wait_for(EventName.RECONNECTED, timeout=5)  # not awaited yet
    await staging.faults.drop_socket()
    await asyncio.wait_for(done.wait(), 5)  # the event has already happened...
    event = await asyncio.wait_for(waiting, 1)  # ...and the earlier call still gets it
    assert event.data["tier"] == "socket"


async def test_wait_for_on_a_closed_session_fails_at_once(make_session: SessionFactory) -> None:
    session = make_session()
    await session.connect()
    await session.close()
    # "At once" is the exception itself: a wait that waited would end in wait_for's
    # TimeoutError, not AvatarError(CLOSED); no wall-clock bound needed.
    with pytest.raises(AvatarError) as caught:
        await asyncio.wait_for(session.wait_for("reconnected"), 2)
    assert caught.value.code is ErrorCode.CLOSED
    with pytest.raises(AvatarError) as caught:
        session.expect("reconnected")
    assert caught.value.code is ErrorCode.CLOSED
    with pytest.raises(AvatarError) as caught:  # refused at once too (test_call_hygiene)
        session.events()
    assert caught.value.code is ErrorCode.CLOSED


async def test_on_is_also_a_decorator_and_unknown_names_are_refused(
    make_session: SessionFactory,
) -> None:
    session = make_session()
    said: list[str] = []

    @session.on("agent_text")
    def collect(event: Event) -> None:
        if event.data["spoken"]:
            said.append(event.data["content"])

    assert callable(collect)  # the decorator hands the function back unchanged
    for verb in (
        lambda: session.on("agent_txt", collect),
        lambda: session.expect("reconected"),
        lambda: session.events("agent_text", "conected"),
    ):
        with pytest.raises(AvatarError) as refused:
            verb()
        assert refused.value.code is ErrorCode.INVALID_ARGUMENT
        assert "did you mean" in str(refused.value)
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    assert said and all(isinstance(text, str) for text in said)


async def test_a_config_that_is_not_a_session_config_is_refused_by_name(
    make_session: SessionFactory,
) -> None:
    with pytest.raises(AvatarError) as refused:
        make_session(config={"agent_timeout": 5})
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert "SessionConfig" in str(refused.value)
