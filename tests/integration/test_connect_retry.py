"""A failed first ``connect()`` need not leave a session that must be rebuilt by hand.

``connect(retry=RetryPolicy(...))`` retries a first connect whose attempt failed with a
retryable error (the backend unreachable or restarting, a step timing out), each attempt on
a fresh socket with the attempt before it closed, waiting the policy's backoff in between
and announcing each retry (``connect_retrying``). Non-retryable failures (a refused token,
a plan limit) and an exhausted budget raise at once, as a plain ``connect()`` does, and
leave the session ``failed`` with nothing open. Without ``retry`` nothing changes.

Over real sockets: ``staging.faults.refuse_joins(times=n)`` drops the socket of the next
``n`` joins the way a restarting backend does.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from avatar_sdk import AvatarError, ErrorCode, RetryPolicy
from avatar_sdk.clock import FakeClock
from avatar_sdk.events.bus import Event
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire import Out

from .conftest import HANG_GUARD, SessionFactory, sdk_tasks, until

#: No jitter, short waits: the schedule itself is RetryPolicy.delay's (unit-tested).
QUICK = RetryPolicy(max_attempts=3, initial=0.0, base=0.05, cap=0.2, jitter="none")


async def test_a_refused_first_join_is_retried_on_a_fresh_socket(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.faults.refuse_joins(times=2)
    session = make_session()
    retries: list[Event] = []
    states: list[str] = []
    session.on("connect_retrying", retries.append)
    session.on("state_changed", lambda e: states.append(e.data["state"]))
    await session.connect(retry=QUICK)
    assert session.state == "connected"
    assert [(e.data["attempt"], e.data["max_attempts"]) for e in retries] == [(1, 3), (2, 3)]
    assert {e.data["code"] for e in retries} == {"transport_closed"}
    assert [e.data["retry_in"] for e in retries] == [QUICK.delay(1), QUICK.delay(2)]
    assert len(staging.received_events(Out.JOIN)) == 3  # one join per attempt
    assert len({r.sid for r in staging.received_events(Out.JOIN)}) == 3  # each on its socket
    assert len(staging.live_sids) == 1  # the failed attempts' sockets are closed
    assert "failed" not in states and states.count("connecting_socket") == 3
    await session.wait_for("agent_turn_ended", timeout=3)  # a working conversation
    answered = session.expect("agent_turn_ended", timeout=3)
    await session.speak("hello")
    await answered


async def test_out_of_attempts_the_last_error_is_raised_and_nothing_stays_open(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.faults.refuse_joins(times=10)
    session = make_session()
    retries: list[Event] = []
    session.on("connect_retrying", retries.append)
    with pytest.raises(AvatarError) as failed:
        await session.connect(retry=replace(QUICK, max_attempts=2))
    assert failed.value.code is ErrorCode.TRANSPORT_CLOSED
    assert session.state == "failed"
    assert len(retries) == 1 and len(staging.received_events(Out.JOIN)) == 2
    assert await until(lambda: staging.live_sids == [], 2)
    assert sdk_tasks() == []


async def test_a_refused_token_is_not_retried(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(token=staging.token + "x")
    retries: list[Event] = []
    session.on("connect_retrying", retries.append)
    with pytest.raises(AvatarError) as failed:
        await session.connect(retry=QUICK)
    assert failed.value.code is ErrorCode.AUTH_FAILED
    assert retries == [] and session.state == "failed"


async def test_without_a_policy_one_attempt_as_before(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.faults.refuse_joins(times=1)
    session = make_session()
    with pytest.raises(AvatarError) as failed:
        await session.connect()
    assert failed.value.code is ErrorCode.TRANSPORT_CLOSED
    assert session.state == "failed"
    assert len(staging.received_events(Out.JOIN)) == 1


async def test_retry_must_be_a_policy(make_session: SessionFactory) -> None:
    session = make_session()
    with pytest.raises(TypeError, match="RetryPolicy"):
        await session.connect(retry=3)  # type: ignore[arg-type]
    assert session.state == "idle"  # refused before anything started


async def test_the_backoff_waits_on_the_sessions_clock(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """Under a fake clock the retry waits exactly the policy's delay: nothing is tried
    again until that much (virtual) time has passed, and then at once."""
    clock = FakeClock()
    staging.faults.refuse_joins(times=1)
    session = make_session(clock=clock)
    retrying = session.expect("connect_retrying", timeout=HANG_GUARD)
    policy = RetryPolicy(max_attempts=2, initial=30.0, jitter="none")
    connecting = asyncio.ensure_future(session.connect(retry=policy))
    assert (await retrying).data["retry_in"] == 30.0
    assert session.health().upstream == "backoff"
    assert await until(lambda: clock.sleepers >= 1, HANG_GUARD)  # the backoff is asleep
    await clock.advance(29.9)
    assert len(staging.received_events(Out.JOIN)) == 1 and not connecting.done()
    await clock.advance(0.1)
    await asyncio.wait_for(connecting, HANG_GUARD)
    assert session.state == "connected"
    assert len(staging.received_events(Out.JOIN)) == 2


async def test_close_during_the_backoff_ends_at_once(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.faults.refuse_joins(times=10)
    session = make_session()
    retrying = session.expect("connect_retrying", timeout=HANG_GUARD)
    policy = RetryPolicy(max_attempts=5, initial=60.0, jitter="none")
    connecting = asyncio.ensure_future(session.connect(retry=policy))
    await retrying
    await asyncio.wait_for(session.close(), HANG_GUARD)  # far below the 60 s wait
    with pytest.raises(AvatarError) as closed:
        await asyncio.wait_for(connecting, HANG_GUARD)
    assert closed.value.code is ErrorCode.CLOSED
    assert session.state == "ended"
    assert await until(lambda: staging.live_sids == [], 2)
    assert sdk_tasks() == []
