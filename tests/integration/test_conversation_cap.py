"""The staging backend's conversation cap (issue 19, item 3): the warning, then
``conversationTimeExpired`` + ``conversationEnded`` per server session, one server session
per thread on request, and the thread's memory shared across its server sessions. Real
Socket.IO against ``StagingServer`` over loopback."""

from __future__ import annotations

import pytest

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.staging.brain import RECALL_PROMPT
from avatar_sdk.wire import In

from .conftest import FAST, HANG_GUARD, SessionFactory, until


def _names(staging: StagingServer) -> list[str]:
    return list(staging.emitted)


async def test_capped_server_session_is_warned_then_expired_then_ended(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.max_conversation_length = 1.5
    staging.time_warning_before = 0.6
    session = make_session()
    warned = session.expect("time_warning", timeout=HANG_GUARD)
    ended = session.expect("ended", timeout=HANG_GUARD)
    await session.connect()
    sid = staging.live_sids[0]
    warning = await warned
    assert warning.data["remaining"] == pytest.approx(0.6)
    end = await ended
    assert end.data["reason"] == "conversation_ended"
    assert staging.expired_sids == [sid]
    # In the service's order: warning, expired, ended.
    assert staging.emitted[In.CONVERSATION_TIME_WARNING] == 1
    assert staging.emitted[In.CONVERSATION_TIME_EXPIRED] == 1
    assert staging.emitted[In.CONVERSATION_ENDED] == 1


async def test_each_server_session_of_a_thread_has_its_own_count(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.max_conversation_length = 2.0
    staging.time_warning_before = 0.5
    first = make_session()
    await first.connect()
    first_sid = staging.live_sids[0]
    assert await until(lambda: first.state == "ended", HANG_GUARD)
    second = make_session(thread_id=first.thread_id)
    await second.connect()
    second_sid = next(s for s in staging.live_sids if s != first_sid)
    assert staging.conversations[second_sid].thread_id == first.thread_id
    # The second one was not ended with the first: it expires on its own count.
    assert second.state == "connected"
    assert await until(lambda: second.state == "ended", HANG_GUARD)
    assert staging.expired_sids == [first_sid, second_sid]


async def test_no_cap_by_default(staging: StagingServer, make_session: SessionFactory) -> None:
    session = make_session()
    await session.connect()
    reply = await session.ask("hello", timeout=HANG_GUARD)
    assert reply.text
    assert staging.emitted[In.CONVERSATION_TIME_WARNING] == 0
    assert staging.conversations[staging.live_sids[0]].expired is False


async def test_one_session_per_thread_refuses_a_second_live_one(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.concurrent_thread_sessions = False
    first = make_session(thread_id="thr-one-at-a-time")
    await first.connect()
    second = make_session(thread_id=first.thread_id, config=FAST.with_(capacity_max_wait=0.5))
    with pytest.raises(AvatarError) as refused:
        await second.connect()
    assert refused.value.code is ErrorCode.CAPACITY_UNAVAILABLE
    assert staging.refused_thread_joins >= 1
    # Another thread is admitted, and the thread is free again once the first has gone.
    other = make_session()
    await other.connect()
    await first.close()
    live = staging.conversations.values
    assert await until(
        lambda: all(c.thread_id != first.thread_id for c in live() if not c.ended), HANG_GUARD
    )
    third = make_session(thread_id=first.thread_id)
    await third.connect()
    assert third.thread_id == first.thread_id


async def test_thread_memory_spans_its_server_sessions(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    first = make_session()
    await first.connect()
    await first.ask("my cat is called Tom", timeout=HANG_GUARD)
    await first.close()
    second = make_session(thread_id=first.thread_id)
    await second.connect()
    reply = await second.ask(RECALL_PROMPT, timeout=HANG_GUARD)
    assert reply.text == "Before, you said: my cat is called Tom"
    # Another thread has its own memory.
    stranger = make_session()
    await stranger.connect()
    other = await stranger.ask(RECALL_PROMPT, timeout=HANG_GUARD)
    assert other.text == "You said nothing before."


async def test_cap_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        StagingServer(max_conversation_length=0)
    with pytest.raises(ValueError):
        StagingServer(max_conversation_length=10, time_warning_before=-1)
