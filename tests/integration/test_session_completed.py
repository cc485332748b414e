"""session_completed on AvatarSession: exactly when a conversation genuinely ends."""

from __future__ import annotations

import asyncio
from typing import Any

from avatar_sdk import AvatarSession
from avatar_sdk.lifecycle import default_hooks
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer

from .conftest import FAST, SessionFactory

TOUR = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0, media_recovery_timeout=5.0)


async def _greeted(make_session: SessionFactory, staging: StagingServer, **kw: Any) -> Any:
    kw.setdefault("genie_url", staging.genie_url)
    session = make_session(**kw)
    await session.connect()
    await session.wait_for("agent_turn_ended", 3)  # the thread id rides the greeting
    assert session.thread_id is not None
    return session


async def test_close_sends_it_exactly_once(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging)
    events: list[dict[str, Any]] = []
    session.on("session_completed", lambda e: events.append(e.data))
    await session.close()
    await session.close()
    assert staging.completed_threads == [session.thread_id]
    assert len(events) == 1
    assert events[0]["thread_id"] == session.thread_id
    assert events[0]["delivered"] is True and events[0]["reason"] == "close"


async def test_leaving_async_with_sends_it(staging: StagingServer) -> None:
    async with AvatarSession(
        staging.url,
        staging.token,
        genie_url=staging.genie_url,
        media=False,
        allow_insecure_transport=True,
        config=FAST,
    ) as session:
        await session.wait_for("agent_turn_ended", 3)
    assert staging.completed_threads == [session.thread_id]


async def test_a_full_fault_tour_sends_nothing_until_the_real_end(staging: StagingServer) -> None:
    session = AvatarSession(
        staging.url,
        staging.token,
        genie_url=staging.genie_url,
        audio=ToneSource(),
        allow_insecure_transport=True,
        config=TOUR.with_(tool_spiral_limit=2, hard_tool_spiral_limit=4),
    )
    try:
        await session.connect()
        await session.wait_for("agent_turn_ended", 3)
        waiter = asyncio.ensure_future(session.wait_for("reconnected", 5))
        await staging.faults.drop_socket()  # socket tier
        await waiter
        waiter = asyncio.ensure_future(session.wait_for("reconnected", 10))
        await staging.faults.drop_socket(recovery=False)  # cold tier
        await waiter
        waiter = asyncio.ensure_future(session.wait_for("media_recovered", 8))
        await staging.faults.ice_failure("stv")  # media tier
        await waiter
        await session.pause()
        await session.resume()
        staging.brain.tool_calls(['navigate_to_slide {"slide": 2}'] * 5)
        waiter = asyncio.ensure_future(session.wait_for("spiral_recovered", 10))
        await session.speak("show the next slide")  # hard spiral: a new server session
        await waiter
        assert staging.completed_threads == []
    finally:
        await session.close()
    assert staging.completed_threads == [session.thread_id]


async def test_server_ended_conversation_is_not_completed_by_default(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging)
    await staging.faults.end_conversation()
    await session.wait_for("ended", 3)
    await session.close()
    assert staging.completed_threads == []


async def test_complete_on_server_end_opt_in(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging, config=FAST.with_(complete_on_server_end=True))
    await staging.faults.end_conversation()
    await session.wait_for("ended", 3)
    assert staging.completed_threads == [session.thread_id]


async def test_a_fatal_end_is_not_a_completion(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging)
    await staging.faults.agent_crash(recoverable=False)
    await session.wait_for("ended", 3)
    await session.close()
    assert staging.completed_threads == []


async def test_suppressed_while_another_session_holds_the_thread_then_sent_by_the_last(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    first = await _greeted(make_session, staging)
    second = make_session(genie_url=staging.genie_url, thread_id=first.thread_id)
    await second.connect()
    outcomes: list[str] = []
    first.on("session_completed", lambda e: outcomes.append(e.data["outcome"]))
    await first.close()
    assert staging.completed_threads == []
    assert outcomes == ["suppressed"]
    await second.close()
    assert staging.completed_threads == [first.thread_id]


async def test_idle_timeout_ends_and_completes(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging, config=FAST.with_(idle_timeout=0.5))
    ended = await session.wait_for("ended", 3)
    assert ended.data["reason"] == "idle_timeout"
    assert staging.completed_threads == [session.thread_id]


async def test_a_slow_genie_never_stretches_close(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging)
    staging.faults.genie_delay(5.0)
    events: list[dict[str, Any]] = []
    session.on("session_completed", lambda e: events.append(e.data))
    started = asyncio.get_running_loop().time()
    await session.close()
    assert asyncio.get_running_loop().time() - started < FAST.close_timeout + 0.5
    assert events and events[0]["delivered"] is False
    staging.faults.clear()
    default_hooks().untrack(session._completion)  # the exit hook would retry at exit
